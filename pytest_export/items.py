"""A case's test, from case to result to gate.

A marked test (its return value is the case) and an ``export_check(...)`` call (its arguments are) take one
path: ``check`` runs the case through the session (``api.run``, as ``pytest_export.check`` does), and ``settle``
turns the gate's verdict into the test's outcome (fail, xfail, a baseline warning, or pass), so the fixture
honours ``xfail=`` and the baseline exactly as the marker does.

Loaded with the plugin; imports no torch, and the harness only when a case runs.
"""

from __future__ import annotations

import functools
import inspect
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from .session import session_of

if TYPE_CHECKING:
    from .declare.case import Case
    from .results import CaseResult

MARKER = "exportable"
VARIANT = "_pytest_export_variant"  # the hidden parameter of a case's mode/device items
RESULTS_KEY = pytest.StashKey[list]()  # the results of an item's cases, for its reports


class ExportBaselineWarning(pytest.PytestWarning):
    """A stale --export-baseline entry, reported as a warning under --export-baseline-warn-stale."""


def is_case(item: pytest.Item) -> bool:
    """Whether an item checks an export case: the marker, or the ``export_check`` fixture (a baseline names it)."""
    return item.get_closest_marker(MARKER) is not None or "export_check" in getattr(item, "fixturenames", ())


def variant_of(item: pytest.Item) -> Any:
    """The (mode, device) of this item of a marked case, or None where the case has one item."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(VARIANT) if callspec is not None else None


def record(item: pytest.Item, result: CaseResult) -> None:
    """Keep a result on its item: ``pytest_runtest_makereport`` sends it with the call's report."""
    item.stash.setdefault(RESULTS_KEY, []).append(result)


def location_of(item: pytest.Item) -> tuple[str, int] | None:
    """The test's file and the line its function starts on (its first decorator: the marker), or None."""
    func = getattr(item, "function", None)
    code = getattr(inspect.unwrap(func), "__code__", None) if callable(func) else None
    if code is not None:
        return code.co_filename, code.co_firstlineno
    try:
        path, line, _ = item.reportinfo()
    except Exception:  # noqa: BLE001 - an item of another plugin: the warning keeps its default origin
        return None
    return (str(path), (line or 0) + 1) if path else None


def call_site(item: pytest.Item) -> tuple[str, int] | None:
    """The line of the test's file that called into the harness (``export_check(...)``, directly or through a
    helper), else the test's own start."""
    where = location_of(item)
    frame = sys._getframe(1)
    for _ in range(32):
        if frame is None or where is None:
            break
        if frame.f_code.co_filename == where[0]:
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return where


def warn_at(item: pytest.Item, warning: Warning, at: tuple[str, int] | None = None) -> None:
    """Warn as raised at the test's file and line (``at``: a call site there), from the test's module (#26): so
    ``-W error::pytest_export.ExportWarning:<module>``, ``filterwarnings`` marks and the ini select it by module.
    A fresh registry each time: every case's warning is shown (pytest records them per test)."""
    where = at or location_of(item)
    if where is None:
        warnings.warn(warning, stacklevel=3)
        return
    module = getattr(item, "module", None)
    name = getattr(module, "__name__", None) or Path(where[0]).stem
    warnings.warn_explicit(warning, type(warning), where[0], where[1], module=name, registry={},
                           module_globals=vars(module) if module is not None else None)


def check(item: pytest.Item, case: Case, keywords: dict[str, Any], *, nodeid: str, workdir: Path,
          tmp_factory: pytest.TempPathFactory, device: str = "cpu", info: dict[str, Any] | None = None,
          act: bool = True, at: tuple[str, int] | None = None) -> CaseResult:
    """Run one case of ``item`` and settle the test (the marker's and the fixture's common path)."""
    result = session_of(item.config).run(nodeid, case, keywords, workdir, device=device, tmp_factory=tmp_factory)
    result.info.update(info or {})
    return settle(item, result, act=act, at=at)


def settle(item: pytest.Item, result: CaseResult, *, act: bool = True,
           at: tuple[str, int] | None = None) -> CaseResult:
    """Judge ``result`` (errors, baseline, xfail), record it for the report, show its warnings (at ``at``, else
    the test's first line) and, with ``act``, fail, xfail or warn the test as the gate says; a case whose failures
    were all expected xfails. Without ``act`` (``raise_on_failure=False``) the test decides: the case is not gated
    against the baseline, and counts as its test ends; an error still fails the test (there is nothing to decide)."""
    from .declare.options import ExportWarning
    from .gate.judge import FAIL, WARN, XFAIL, xfailed_text
    from .results import XFAILED

    if not act:  # export_check(raise_on_failure=False): its test decides; the gate keeps only an error (#32)
        result.info["raise_on_failure"] = False
    action, text = session_of(item.config).gate(result)
    act = act or action == FAIL
    if act:
        # what pytest reports for this item: the summary's `(case)` row counts the same (#17)
        result.info["item"] = ("failed" if action == FAIL else "xfailed" if action == XFAIL
                               else "xfailed" if result.outcome == XFAILED else "passed")
    record(item, result)
    for w in result.warnings:
        warn_at(item, ExportWarning(f"{result.nodeid}: {w}"), at)
    if not act:
        return result
    if action == FAIL:
        pytest.fail(text, pytrace=False)
    if action == WARN:
        warn_at(item, ExportBaselineWarning(f"{result.nodeid}: {text}"), at)
    if action == XFAIL:
        pytest.xfail(text)
    if result.outcome == XFAILED:
        pytest.xfail(xfailed_text(result))
    return result


# ---- the marker ---------------------------------------------------------------------------------------


def wrap(item: pytest.Function, func: Callable[..., Any]) -> Callable[..., None]:
    """The marked test's function, made to check the case it returns."""

    @functools.wraps(func)
    def exportable_case(*args: Any, **kwargs: Any) -> None:
        variant = variant_of(item)
        es = session_of(item.config)
        if variant is not None and variant.on_cuda and not es.cuda_available():
            reason = (f"CUDA is not available (torch.cuda.is_available() is False): {item.nodeid} runs on "
                      f"{variant.device} (--export-devices)")
            from .results import SKIPPED, CaseResult
            from .declare.tags import case_tags

            record(item, CaseResult(item.nodeid, outcome=SKIPPED, tags=case_tags(item, MARKER),
                                    info={"mode": variant.mode, "device": variant.device, "reason": reason}))
            pytest.skip(reason)
        try:
            value = func(*args, **kwargs)
        except BaseException as exc:
            if es.check and isinstance(exc, Exception):
                from .results import ERROR, CaseResult
                from .declare.tags import case_tags

                record(item, CaseResult(  # with its tags: its conformance row is its own, not (untagged) (#32)
                    item.nodeid, outcome=ERROR, tags=case_tags(item, MARKER),
                    error=f"{item.nodeid}: the test raised while building its case: {type(exc).__name__}: {exc}",
                ))
            raise
        _run_marked(item, value)

    return exportable_case


def _run_marked(item: pytest.Function, value: Any) -> None:
    from .declare.options import ExportWarning, UsageError, validate_keywords
    from .results import ERROR, CaseResult

    es = session_of(item.config)
    marker = item.get_closest_marker(MARKER)
    try:
        validate_keywords(item.nodeid, marker.args, marker.kwargs)
        case = es.build_case(item.nodeid, value)
        problem = None
    except UsageError as exc:
        problem = str(exc)
    if problem is not None:
        if es.check:
            record(item, CaseResult(item.nodeid, outcome=ERROR, error=problem))
        pytest.fail(problem, pytrace=False)
    if not es.check:
        from .torchside.training import training_warning

        found = es.smoke(item.nodeid, case, marker.kwargs.get("dynamic_shapes"))
        note = None if marker.kwargs.get("train") else training_warning(case.module)
        for text in found + ([f"{item.nodeid}: {note}"] if note else []):
            warn_at(item, ExportWarning(text))
        return
    keywords, device, info = dict(marker.kwargs), "cpu", None
    variant = variant_of(item)
    if variant is not None:
        if variant.mode is not None:
            keywords["strict"] = variant.mode == "strict"  # --export-modes overrides the marker's strict
        device = variant.device or "cpu"
        info = {"mode": "strict" if keywords.get("strict") else "non-strict", "device": device}
    # both fixtures are added to every marked item at collection (plugin.pytest_collection_modifyitems)
    check(item, case, keywords, nodeid=item.nodeid, workdir=Path(item.funcargs["tmp_path"]),
          tmp_factory=item.funcargs["tmp_path_factory"], device=device, info=info)


# ---- the fixture --------------------------------------------------------------------------------------


def fixture_check(request: pytest.FixtureRequest, tmp_path: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Callable[..., CaseResult]:
    """The ``export_check`` fixture's function (see its docstring in ``plugin``)."""
    calls: list[None] = []
    item = request.node

    def export_check(module: Any, args: Any, kwargs: Any = None, *, raise_on_failure: bool = True,
                     device: str = "cpu", **keywords: Any) -> CaseResult:
        from .api import build
        from .declare.options import UsageError
        from .declare.variants import is_device

        where = item.nodeid
        if not is_device(device):
            pytest.fail(f"{where}: export_check(device={device!r}): valid devices are cpu, cuda, cuda:N", pytrace=False)
        if device != "cpu" and not session_of(item.config).cuda_available():
            pytest.skip(f"export_check(device={device!r}): CUDA is not available on this machine")
        try:
            case, problem = build(where, module, args, kwargs, keywords), None
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        calls.append(None)
        nodeid = where if len(calls) == 1 else f"{where}#{len(calls)}"
        return check(item, case, keywords, nodeid=nodeid, workdir=tmp_path / f"export_check_{len(calls)}",
                     tmp_factory=tmp_path_factory, device=device, act=raise_on_failure, at=call_site(item))

    return export_check


__all__ = ["MARKER", "VARIANT", "RESULTS_KEY", "ExportBaselineWarning", "check", "settle", "record", "wrap",
           "variant_of", "fixture_check", "is_case", "warn_at", "location_of"]
