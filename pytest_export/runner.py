"""Runs the stages of one case in their one order (``declare.options.ORDER``), exporting once: builds the context, runs
each stage, applies skip / xfail / timeout, returns the result. Nothing else lives here."""

from __future__ import annotations

import contextlib
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from .context import Context, Stage, StageFailure, StageSkip
from .declare.case import Case
from .declare.options import CaseOptions, xfail_for
from .results import ERROR, FAILED, PASSED, SKIPPED, XFAILED, XPASSED, CaseResult, HarnessError, StageResult
from .stages import REGISTRY
from .torchside.leftovers import closing_transforms
from .torchside.observe import observe
from .torchside.timeout import CaseTimeout, supported, time_limit
from .torchside.torchlog import captured_torch_output
from .util import describe_exception, plural

def _usable(ctx: Context, name: str) -> bool:
    """Whether a later stage may build on stage ``name``: it passed, it is not in this run, it was left out on
    request (``--export-skip-stages compare`` skips compare only), or its product exists although it did not pass."""
    status = ctx.result.stage_status(name)
    # an unexpected pass (XPASS) is a pass: later stages run and report what they find (issue #25)
    return (status in (PASSED, XPASSED, None) or name in ctx.usable
            or (status == SKIPPED and name in ctx.options.skip_stages))


def _run_stage(ctx: Context, stage: Stage, started: list[float]) -> StageResult:
    res = ctx.result
    if stage.name in ctx.options.skip_stages:
        return StageResult(stage.name, SKIPPED, "skipped: not requested (--export-skip-stages)")
    blocked = [n for n in stage.needs if not _usable(ctx, n)]
    if blocked:
        return StageResult(stage.name, SKIPPED, f"skipped: {blocked[0]} {res.stage_status(blocked[0])}")
    t0 = started[0] = time.perf_counter()
    try:
        data = closing_transforms(stage.run, ctx) or {}  # no transform a stage raised inside outlives it
        out = StageResult(stage.name, PASSED, data.pop("message", ""), data=data)
    except StageFailure as exc:
        data = {k: v for k, v in exc.data.items() if k not in ("status", "message")}
        data["signature"] = exc.kind or data.get("exception") or "failed"
        detail = ctx.failure_detail(stage.name, exc, data)
        if detail:  # what identifies this failure within its kind: the baseline compares both (issue #52)
            data["detail"] = detail
        out = StageResult(stage.name, FAILED, str(exc), data=data)
    except StageSkip as exc:
        out = StageResult(stage.name, SKIPPED, f"skipped: {exc}")
    except HarnessError as exc:  # the harness could not decide: said as it is, never blamed on the model
        out = StageResult(stage.name, ERROR, str(exc), data={"exception": type(exc).__name__})
    except Exception as exc:  # noqa: BLE001 - the harness's own crash: an `error` with its traceback, never a pass
        out = StageResult(stage.name, ERROR, "the harness crashed in this stage (please report it): "
                          + describe_exception(exc), data={"exception": type(exc).__name__})
        out.data["traceback"] = "".join(traceback.format_exception(exc)[-8:])[-4000:]
    # a failed export's draft-export diagnosis is reported as its own time (`diagnosis_s`), not as export's
    out.duration = time.perf_counter() - t0 - float(out.data.get("diagnosis_s") or 0.0)
    # an xfail entry expects a *failure*: an error is never expected (issue #18)
    reason = xfail_for(ctx.options.xfail, ctx.options.strict, ctx.options.device, _torch_version()).get(stage.name)
    if reason is not None:
        if out.status == FAILED:
            out.status, out.message = XFAILED, f"expected failure ({reason}): {out.message}"
        elif out.status == PASSED:
            out.status, out.message = XPASSED, (
                f"XPASS(strict): expected to fail ({reason}) but passed on torch {_torch_version()}; remove the xfail "
                "entry, or keep it for older torch as (reason, \"torch<X.Y\")")
    return ctx.in_names(out)


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


_TIMEOUT_WARNED: list[str] = []  # said once per process where --export-timeout cannot be enforced


def run_case(case: Case, options: CaseOptions, nodeid: str = "<case>", workdir: Path | None = None,
             session: Any = None, keep: list[Context] | None = None,
             progress: Callable[[str, float], None] | None = None) -> CaseResult:
    """Run every enabled stage of one case and return its result (never raises for a stage failure); ``keep``
    receives the case's context (its one exported program) for work after the run, such as a repro script;
    ``progress(stage, seconds since the case started)`` is called before each stage and with ``""`` at the end."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pytest-export-")))
        source = case
        if options.device != "cpu":
            try:
                case = case.to(options.device)
            except Exception as exc:  # noqa: BLE001 - reported as the case's error, never a crash
                return CaseResult(nodeid, tags=list(options.tags), error=(
                    f"{nodeid}: could not move the case to {options.device}: {describe_exception(exc)}")).finish()
        ctx = Context(case, options, nodeid, workdir, session, source=source)
        if keep is not None:
            keep.append(ctx)
        stack.enter_context(captured_torch_output(ctx.result.info))  # torch's output: the report's (#26)
        ctx.read_declaration()
        if ctx.declaration_error:  # the test's mistake (#32): a usage error, as a marker typo is; never baselined
            ctx.result.error = ctx.declaration_error  # or xfailed, and nothing is run on a declaration that misfits
            return ctx.result.finish()
        stages = [s for s in REGISTRY if s.enabled(ctx)]
        current, started = None, [time.perf_counter()]
        begun = started[0]  # the case's start (started[0] moves to each stage's): for progress
        try:
            with time_limit(options.timeout):
                if options.timeout and not supported() and not _TIMEOUT_WARNED:
                    _TIMEOUT_WARNED.append(nodeid)
                    ctx.result.warnings.append(
                        f"--export-timeout {options.timeout:g} s is checked before each forward call here (no "
                        "SIGALRM off the main thread): a single call that hangs is not stopped")
                for stage in stages:
                    current = stage
                    if progress is not None:
                        progress(stage.name, time.perf_counter() - begun)
                    out = ctx.result.add(_run_stage(ctx, stage, started))
                    if out.data.get("timeout"):  # its verdict stands, but the case's time ran out in it (#23)
                        raise CaseTimeout(f"ran out in stage {stage.name}")
                current = None
        except CaseTimeout as exc:
            _record_timeout(ctx, stages, current, exc, time.perf_counter() - started[0])
        coverage = ctx.calibration.coverage()
        guards = ctx.result.stages.get("guards")
        proof = guards.data.get("proof") if guards is not None else None
        if proof:  # how the program's guards were decided over the declared sizes (issue #41)
            coverage = {**(coverage or {}), "guards": {k: proof[k] for k in ("proved", "sizes", "guards", "line")}}
        if coverage:
            ctx.result.info["ranges"] = coverage
            edges = coverage.get("edges_short")
            if edges:  # said at the case, not only in the summary (issue #50)
                ctx.result.warnings.append(edges_warning(edges, options.budget_auto))
        if progress is not None:
            progress("", time.perf_counter() - begun)
        return _require_numerics(ctx.finish(), options)


def edges_warning(edges: dict[str, Any], auto: bool) -> str:
    """The line that says the budget left edges of the declared box to shape checks, and the budget that runs them."""
    first, more = edges["edges"][0], len(edges["edges"]) - 1
    whose = "the default budget (raised for the edges to its cap)" if auto else "the budget"
    return (f"{whose} left {plural(len(edges['edges']), 'edge')} of the declared ranges checked by shape only, "
            f"without numerics: {first}" + (f" (and {more} more)" if more else "")
            + f"; --export-budget {edges['budget_needed']:g} runs every edge with real tensors")


def _require_numerics(result: CaseResult, options: CaseOptions) -> CaseResult:
    """``--export-require-numerics`` / ``require_numerics=True``: a case that would pass with numerics short of a
    declared max ends as ``error`` (issue #31): the harness could not decide there with real tensors."""
    from .memory.cost import short_of_max, short_text

    short = short_of_max(result.info.get("ranges"))
    ranges = result.info.get("ranges") or {}
    cut = (ranges.get("plan") or {}).get("cut")
    stopped = (ranges.get("opaque") or {}).get("stopped") or ranges.get("stopped")
    if not options.require_numerics or not (short or cut or stopped) or result.outcome not in (PASSED, XFAILED):
        return result
    if not short and stopped:  # the guard refused a size others reached: numerics there were not decided (#43)
        result.error = (f"{result.nodeid}: numerics were stopped (--export-require-numerics): "
                        f"{stopped[0]}; raise --export-max-memory, or declare the range the machine can check")
        return result.finish()
    if not short:  # the plan was cut by the safety net: some sizes it planned numeric ran by shape only (#43)
        result.error = (f"{result.nodeid}: numerics were cut short of the plan (--export-require-numerics): {cut}; "
                        "the model is far costlier than counted: raise --export-budget or make the case smaller")
        return result.finish()
    result.error = (f"{result.nodeid}: numerics (real tensors compared with eager) fell short of the declared max "
                    f"(--export-require-numerics): {short_text(short)}; raise --export-budget or "
                    "--export-max-memory, or declare the range the machine can check")
    return result.finish()


def _record_timeout(ctx: Context, stages: list[Stage], current: Stage | None, exc: CaseTimeout,
                    elapsed: float) -> None:
    """The stage that was running is an ``error`` (with the time it really ran); the ones after it are skipped;
    the result is kept."""
    for stage in stages:
        if stage.name in ctx.result.stages:
            continue
        if current is not None and stage.name == current.name:
            ctx.result.add(StageResult(
                stage.name, ERROR,
                f"timed out: the case {exc} (--export-timeout / timeout=) while running `{stage.name}` "
                f"(ran {elapsed:.1f} s); the stage hangs or is too slow: raise the limit or make the case smaller",
                duration=elapsed, data={"timeout": ctx.options.timeout},
            ))
            ctx.result.warnings.append(f"stopped after {ctx.options.timeout:g} s in stage {stage.name}")
        else:
            ctx.result.add(StageResult(stage.name, SKIPPED, "skipped: the case timed out"))


def smoke(case: Case) -> None:
    """Without --export-check: build and validate the case and run eager forward once."""
    observe(case.module, case.module, case.args, case.kwargs)


__all__ = ["run_case", "smoke", "describe_exception"]
