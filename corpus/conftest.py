"""The conformance corpus: each test is an export case in the form users write.

Marked cases carry ``tags=[...]``; each tag becomes a marker at collection. Tests that call the
``export_check`` fixture pass their tags to it and carry the ``api`` marker, registered here, so that
``--export-tags api`` and ``-m api`` select them too.

The zoo (``corpus/zoo/``, tag ``zoo``) holds real architectures and costs minutes: a run of the corpus
keeps only its CI slice (tag ``zoo-ci``). The whole zoo runs when the run selects by tag
(``--export-tags zoo``, the ini ``export_tags``, or a ``-m`` expression naming a zoo tag), or when it names
the zoo itself (``pytest corpus/zoo``, a zoo file, a zoo case).

The zoo's real-width cases (tag ``width``, ``corpus/zoo/test_zoo_width.py``: released configurations, hundreds of
MB of weights and minutes each) run only when asked for by name: when the run selects the tag ``width``
(``--export-tags width``, the ini ``export_tags``, or a ``-m`` expression naming it) or names their file or one of
their cases. Neither ``pytest corpus/zoo`` nor ``--export-tags zoo`` runs them.

The breadth slice (``corpus/breadth/``, tag ``breadth``: every ``transformers`` model class at tiny width) keeps
its CI sample (tag ``breadth-ci``) in a run of the corpus; the whole slice runs when the run selects the tag
``breadth`` (``--export-tags breadth`` or ``-m breadth``) or names ``corpus/breadth`` or a file or case in it.
"""

from __future__ import annotations

import re
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"
BREADTH = Path(__file__).resolve().parent / "breadth"
ZOO_TAG, ZOO_CI_TAG, WIDTH_TAG = "zoo", "zoo-ci", "width"
BREADTH_TAG, BREADTH_CI_TAG = "breadth", "breadth-ci"


def pytest_configure(config):
    config.addinivalue_line("markers", "api: a corpus test that calls a torch.export API on the exported program")


def _tags(item) -> set[str]:
    mark = item.get_closest_marker("exportable")
    tags = mark.kwargs.get("tags", ()) if mark is not None else ()
    if isinstance(tags, str):
        tags = [tags]
    try:
        return {t for t in tags if isinstance(t, str)}
    except TypeError:  # an ill-typed keyword is reported when the case runs
        return set()


def _export_tags(config) -> list[str]:
    """The tags ``--export-tags`` selects (the command line wins over the ini, as the plugin reads them)."""
    try:
        ini = config.getini("export_tags")
    except ValueError:  # the plugin is not loaded (-p no:export)
        ini = None
    value = config.getoption("export_tags", None) or ini or []
    chunks = [value] if isinstance(value, str) else value
    return [t for chunk in chunks for t in re.split(r"[,\s]+", str(chunk)) if t]


def _markexpr(config) -> str:
    return getattr(config.option, "markexpr", "") or ""


def _selects_tags(config) -> bool:
    return bool(_export_tags(config)) or bool(re.search(r"\bzoo", _markexpr(config)))


def _selects_breadth(config) -> bool:
    return BREADTH_TAG in _export_tags(config) or bool(re.search(r"\bbreadth\b", _markexpr(config)))


def _selects_width(config) -> bool:
    return WIDTH_TAG in _export_tags(config) or bool(re.search(r"\bwidth\b", _markexpr(config)))


def _zoo_paths_named(config, folder: Path = ZOO) -> list[Path]:
    """The command-line paths that point into the zoo (or ``folder``): the folder, a file, a case's node id."""
    out = []
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == folder or folder in path.parents:
            out.append(path)
    return out


def pytest_collection_modifyitems(config, items):
    """Deselect the zoo beyond its CI slice, and its real-width cases, unless the run asks for them (see the
    module's docstring)."""
    by_tag, width = _selects_tags(config), _selects_width(config)
    named, breadth = _zoo_paths_named(config), _selects_breadth(config) or bool(_zoo_paths_named(config, BREADTH))
    keep, drop = [], []
    for item in items:
        tags = _tags(item)
        path = Path(item.path).resolve()
        if WIDTH_TAG in tags:  # named itself: its file or one of its cases, not a folder above it
            wanted = width or path in named
        elif BREADTH_TAG in tags and BREADTH_CI_TAG not in tags:  # the breadth slice beyond its CI sample
            wanted = breadth
        elif ZOO_TAG in tags and ZOO_CI_TAG not in tags:
            wanted = by_tag or any(path == p or p in path.parents for p in named)
        else:
            wanted = True
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# torch's shape symbols (``s24``) never reach the user: every message is said in the declaration's names. The
# corpus holds itself to it: a message of any case that still shows one fails the run, naming the case and the text.
TORCH_SYMBOL = re.compile(r"(?<![\w.#])s\d+\b")
_UNNAMED: list[str] = []


def pytest_runtest_logreport(report):
    for result in getattr(report, "export_results", None) or ():
        if not isinstance(result, dict):  # serially a CaseResult; under xdist the controller holds its JSON
            result = result.to_json()
        texts = [(f"[{name}]", stage.get("message")) for name, stage in (result.get("stages") or {}).items()]
        texts += [("[warning]", w) for w in result.get("warnings") or []] + [("[error]", result.get("error"))]
        for where, text in texts:
            found = TORCH_SYMBOL.search(text or "")
            if found:
                start = max(found.start() - 80, 0)
                _UNNAMED.append(f"{report.nodeid} {where}: torch's symbol {found.group(0)} in "
                                f"...{text[start:found.end() + 80]}...")


def pytest_sessionfinish(session, exitstatus):
    if _UNNAMED and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    if _UNNAMED:
        terminalreporter.section("torch's symbols in messages (the corpus fails on them)")
        for line in _UNNAMED:
            terminalreporter.line(line)
