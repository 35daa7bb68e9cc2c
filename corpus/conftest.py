"""The conformance corpus: each test is an export case in the form users write.

Marked cases carry ``tags=[...]``; each tag becomes a marker at collection. Tests that call the
``export_check`` fixture pass their tags to it and carry the ``api`` marker, registered here, so that
``--export-tags api`` and ``-m api`` select them too.

The zoo (``corpus/zoo/``, tag ``zoo``) holds real architectures and costs minutes: a run of the corpus
keeps only its CI slice (tag ``zoo-ci``). The whole zoo runs when the run selects by tag
(``--export-tags zoo``, the ini ``export_tags``, or a ``-m`` expression naming a zoo tag), or when it names
the zoo itself (``pytest corpus/zoo``, a zoo file, a zoo case).
"""

from __future__ import annotations

import re
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"
ZOO_TAG, ZOO_CI_TAG = "zoo", "zoo-ci"


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


def _selects_tags(config) -> bool:
    try:
        ini = config.getini("export_tags")
    except ValueError:  # the plugin is not loaded (-p no:export)
        ini = None
    if config.getoption("export_tags", None) or ini:
        return True
    return bool(re.search(r"\bzoo", getattr(config.option, "markexpr", "") or ""))


def _zoo_paths_named(config) -> list[Path]:
    """The command-line paths that point into the zoo (the folder, a file, a case's node id)."""
    out = []
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0]).resolve()
        if path == ZOO or ZOO in path.parents:
            out.append(path)
    return out


def pytest_collection_modifyitems(config, items):
    """Deselect the zoo beyond its CI slice unless the run asks for it (see the module's docstring)."""
    if _selects_tags(config):
        return
    named = _zoo_paths_named(config)
    keep, drop = [], []
    for item in items:
        tags = _tags(item)
        beyond_ci = ZOO_TAG in tags and ZOO_CI_TAG not in tags
        path = Path(item.path).resolve()
        if beyond_ci and not any(path == p or p in path.parents for p in named):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
