"""pytest hooks of pytest-export. Thin: options, the marker, and hand-off to the runner.

This module must not import torch: a pytest run that does not use the plugin must not pay for it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from . import session as session_mod

# options, results, runner and torch are imported where a case needs them, not when pytest loads the plugin

MARKER = "exportable"
RESULTS_KEY = pytest.StashKey[list]()
VARIANT = "_pytest_export_variant"  # the hidden parameter of a case's mode/device items
# options that act only on the cases --export-check runs (the rest also set up the `export_check` fixture)
NEEDS_CHECK = ("export_report", "export_baseline", "export_baseline_update", "export_baseline_warn_stale",
               "export_coverage", "export_summary_md", "export_modes", "export_devices")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("export", "torch.export conformance (pytest-export)")

    def add(flag: str, ini: str, help: str, *, kind: str = "string", default: Any = None, **kw: Any) -> None:
        assert ini in session_mod.OPTION_NAMES, f"{ini} missing from session.OPTION_NAMES"
        group.addoption(flag, dest=ini, default=None, help=help + f" (ini: {ini})", **kw)
        parser.addini(ini, help=help, type=kind, default=default)

    add("--export-check", "export_check", "export every @pytest.mark.exportable case and check it",
        kind="bool", default=False, action="store_true")
    add("--export-tags", "export_tags", "run only the cases that carry one of these tags (comma-separated)",
        metavar="TAG[,TAG...]", action="append")
    add("--export-report", "export_report", "write the session's JSON report to PATH", metavar="PATH")
    add("--export-core-aten", "export_core_aten",
        "fail `decomp` where ops outside Core ATen survive run_decompositions()",
        kind="bool", default=False, action="store_true")
    add("--export-examples", "export_examples", "fuzz examples per case (default 25)", metavar="N")
    add("--export-max-size", "export_max_size", "cap for unbounded Dim maxima while fuzzing (default 64)",
        metavar="N")
    add("--export-modes", "export_modes",
        "trace every case in each of these modes, each its own item: non-strict, strict (comma-separated; "
        "default: the marker's `strict`)", metavar="MODE[,MODE]", action="append")
    add("--export-devices", "export_devices",
        "export and compare every case on each of these devices, each its own item: cpu, cuda, cuda:N "
        "(default: cpu, plus cuda where available)", metavar="DEVICE[,DEVICE]", action="append")
    add("--export-skip-stages", "export_skip_stages",
        "do not run these stages (comma-separated, e.g. fuzz,guards); they are reported as skipped",
        metavar="STAGE[,STAGE]", action="append")
    add("--export-aoti", "export_aoti", "run the `aoti` stage (AOTInductor compile, load, compare) for every case",
        kind="bool", default=False, action="store_true")
    add("--export-timeout", "export_timeout",
        "time limit in seconds for each case's stages; a case over it is stopped and reported (default: none)",
        metavar="SECONDS")
    add("--export-baseline", "export_baseline",
        "known failures (case, stage, reason) and non-core ops: a failure or op not in it fails the run, "
        "an entry that now passes is stale and fails it too", metavar="PATH")
    add("--export-baseline-update", "export_baseline_update",
        "rewrite --export-baseline from this run (entries of cases that did not run are pruned only where "
        "the whole suite, or a whole folder of it, ran)", kind="bool", default=False, action="store_true")
    add("--export-baseline-warn-stale", "export_baseline_warn_stale",
        "report stale baseline entries as warnings instead of failing the run",
        kind="bool", default=False, action="store_true")
    add("--export-coverage", "export_coverage",
        "write the decomposition coverage op table to PATH (JSON) and PATH with .md (Markdown)", metavar="PATH")
    add("--export-summary-md", "export_summary_md",
        "write a short Markdown summary to PATH (default: appended to $GITHUB_STEP_SUMMARY when set)",
        metavar="PATH")
    add("--export-no-diagnose", "export_no_diagnose",
        "do not rerun a failed export with torch.export.draft_export to diagnose it",
        kind="bool", default=False, action="store_true")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(dynamic_shapes=None, strict=False, rtol=None, atol=None, core_aten=None, tags=(), xfail=None, ...): "
        "the test returns (module, args[, kwargs]); with --export-check it is exported and checked "
        "(see pytest-export's README for every keyword)",
    )
    es = session_mod.ExportSession(config)
    config.stash[session_mod.SESSION_KEY] = es
    config.pluginmanager.register(es, "pytest-export-session")
    if not es.check and not hasattr(config, "workerinput"):
        given = [f"--{name.replace('_', '-')}" for name in NEEDS_CHECK if config.getoption(name)]
        if given:
            config.issue_config_time_warning(pytest.PytestConfigWarning(
                f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect without --export-check: "
                "no case is exported, so nothing is gated, reported or varied; add --export-check"), stacklevel=2)


def pytest_unconfigure(config: pytest.Config) -> None:
    es = config.stash.get(session_mod.SESSION_KEY, None)
    if es is not None and config.pluginmanager.is_registered(es):
        config.pluginmanager.unregister(es)


def _session(config: pytest.Config) -> "session_mod.ExportSession":
    return config.stash[session_mod.SESSION_KEY]


@pytest.hookimpl(tryfirst=True)  # tag markers must exist before -m deselects
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    from .tags import apply_tags, parse_tags

    apply_tags(config, items, MARKER, parse_tags(config.getoption("export_tags") or config.getini("export_tags")))
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            if "tmp_path" not in item.fixturenames:
                item.fixturenames.append("tmp_path")
            item.obj = _wrap(item, item.obj)


@pytest.hookimpl(trylast=True)  # after the test's own parametrize: its ids come first
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One item per tracing mode and device (--export-modes, --export-devices)."""
    if metafunc.definition.get_closest_marker(MARKER) is None:
        return
    variants = _session(metafunc.config).variants()
    if variants:
        metafunc.fixturenames.append(VARIANT)
        metafunc.parametrize(VARIANT, variants, ids=[v.id for v in variants], indirect=True)


@pytest.fixture
def _pytest_export_variant(request: pytest.FixtureRequest) -> Any:
    """The (mode, device) of this item of a marked case."""
    return request.param


def _variant(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(VARIANT) if callspec is not None else None


def _wrap(item: pytest.Function, func: Any) -> Any:
    @functools.wraps(func)
    def exportable_case(*args: Any, **kwargs: Any) -> None:
        variant = _variant(item)
        es = _session(item.config)
        if variant is not None and variant.on_cuda and not es.cuda_available():
            reason = (f"CUDA is not available (torch.cuda.is_available() is False): {item.nodeid} runs on "
                      f"{variant.device} (--export-devices)")
            from .results import SKIPPED, CaseResult

            _record(item, CaseResult(item.nodeid, outcome=SKIPPED, tags=list(_tags(item)),
                                     info={"mode": variant.mode, "device": variant.device, "reason": reason}))
            pytest.skip(reason)
        try:
            value = func(*args, **kwargs)
        except BaseException as exc:
            if _session(item.config).check and isinstance(exc, Exception):
                from .results import ERROR, CaseResult

                _record(item, CaseResult(
                    item.nodeid, outcome=ERROR,
                    error=f"{item.nodeid}: the test raised while building its case: {type(exc).__name__}: {exc}",
                ))
            raise
        _run_marked(item, value)

    return exportable_case


def _where(item: pytest.Item) -> str:
    return item.nodeid


def _run_marked(item: pytest.Function, value: Any) -> None:
    from .options import UsageError, validate_keywords
    from .results import ERROR, XFAILED, CaseResult

    es = _session(item.config)
    marker = item.get_closest_marker(MARKER)
    where = _where(item)
    try:
        validate_keywords(where, marker.args, marker.kwargs)
        case = es.build_case(where, value)
        problem = None
    except UsageError as exc:
        problem = str(exc)
    if problem is not None:
        if es.check:
            _record(item, CaseResult(item.nodeid, outcome=ERROR, error=problem))
        pytest.fail(problem, pytrace=False)
    if not es.check:
        es.smoke(where, case)
        return
    keywords, device = dict(marker.kwargs), "cpu"
    variant = _variant(item)
    if variant is not None:
        if variant.mode is not None:
            keywords["strict"] = variant.mode == "strict"  # --export-modes overrides the marker's strict
        device = variant.device or "cpu"
    result = es.run(item.nodeid, case, keywords, Path(item.funcargs["tmp_path"]), device=device)
    if variant is not None:
        result.info.update({"mode": "strict" if keywords.get("strict") else "non-strict", "device": device})
    action, text = es.gate(result)
    _record(item, result)
    _warn(result)
    if action == "fail":
        pytest.fail(text, pytrace=False)
    if action == "warn":
        import warnings

        warnings.warn(ExportBaselineWarning(f"{item.nodeid}: {text}"))
    if action == "xfail":
        pytest.xfail(text)
    if result.outcome == XFAILED:
        pytest.xfail("; ".join(f"{s.name}: {s.message.splitlines()[0]}" for s in result.stages.values()
                               if s.status == XFAILED))


def _warn(result: "CaseResult") -> None:
    import warnings

    from .options import ExportWarning

    for w in result.warnings:
        warnings.warn(ExportWarning(f"{result.nodeid}: {w}"), stacklevel=2)


class ExportBaselineWarning(pytest.PytestWarning):
    """A stale --export-baseline entry, reported as a warning under --export-baseline-warn-stale."""


def _tags(item: pytest.Item) -> list[str]:
    tags = item.get_closest_marker(MARKER).kwargs.get("tags", ())
    return [tags] if isinstance(tags, str) else [t for t in tags if isinstance(t, str)]


def _record(item: pytest.Item, result: "CaseResult") -> None:
    item.stash.setdefault(RESULTS_KEY, []).append(result)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    results = item.stash.get(RESULTS_KEY, None) if call.when == "call" else None
    if results:
        # on the item, like record_property: the call and teardown reports copy them (JUnit XML reads teardown's)
        for i, r in enumerate(results):
            prefix = "export" if i == 0 else f"export#{i + 1}"
            for name, stage in r.stages.items():
                item.user_properties.append((f"{prefix}.{name}", stage.status))
            item.user_properties.append((f"{prefix}.outcome", r.outcome))
    report = yield
    if call.when == "setup" and _session(item.config).check and item.get_closest_marker(MARKER) is not None:
        # sent ahead of the call, so the controller can report the case if its worker dies running it
        tags = item.get_closest_marker(MARKER).kwargs.get("tags") or []
        report.export_case = {"tags": [tags] if isinstance(tags, str) else [t for t in tags if isinstance(t, str)]}
    if results:
        report.export_results = [r.to_json() for r in results]
    return report


@pytest.fixture
def export_check(request: pytest.FixtureRequest, tmp_path: Path):
    """Check a module explicitly: ``export_check(module, args, kwargs=None, raise_on_failure=True, device="cpu",
    **keywords)``.

    Takes the marker's keywords, runs every stage, returns the result; raises a test failure on a failed
    stage unless ``raise_on_failure=False``.
    """
    es = _session(request.config)
    calls = []

    def check(module: Any, args: Any, kwargs: Any = None, *, raise_on_failure: bool = True, device: str = "cpu",
              **keywords: Any):
        where = request.node.nodeid
        from .options import UsageError, validate_keywords
        from .variants import is_device

        if not is_device(device):
            pytest.fail(f"{where}: export_check(device={device!r}): valid devices are cpu, cuda, cuda:N", pytrace=False)
        if device != "cpu" and not es.cuda_available():
            pytest.skip(f"export_check(device={device!r}): CUDA is not available on this machine")
        try:
            validate_keywords(where, (), keywords)
            from .case import Case

            case = Case.build(where, module, args, kwargs)
            problem = None
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        calls.append(None)
        nodeid = where if len(calls) == 1 else f"{where}#{len(calls)}"
        result = es.run(nodeid, case, keywords, tmp_path / f"export_check_{len(calls)}", device=device)
        _record(request.node, result)
        _warn(result)
        if raise_on_failure:
            action, text = es.gate(result)
            if action == "fail":
                pytest.fail(text, pytrace=False)
        return result

    return check


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    es = _session(config)
    if es.check:
        return [f"pytest-export: --export-check on (examples={es.options.examples}, report={es.options.report})"]
    return None


__all__ = ["export_check", "MARKER"]
