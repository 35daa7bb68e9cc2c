"""Runs the stages of one case: export once, then check the program every way, reusing it."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree

from .case import Case
from .compare import Mismatch, compare_trees
from .options import CaseOptions, xfail_for
from .timeout import CaseTimeout, time_limit
from .modstate import preserved_state, state_changes, state_snapshot
from .results import ERROR, FAILED, PASSED, SKIPPED, XFAILED, XPASSED, CaseResult, HarnessError, StageResult

RUN_SEED = 0x5EED
REFUSED_IN_RANGE = "refused-in-range"  # audit row status: the range was kept, yet the program refuses sizes in it


class StageSkip(Exception):
    """A stage does not apply to this case; the message says why."""


class StageFailure(Exception):
    """A stage found a defect in the model or its export: message for people, data for the report.

    ``kind`` names the defect in a word (``mismatch``, ``refused-in-range``, ...): with the stage it is the
    failure's signature, which the baseline compares (a different failure in a known-failing stage is new).
    """

    def __init__(self, message: str, /, kind: str | None = None, **data: Any):
        super().__init__(message)
        self.kind = kind
        self.data = data


@dataclasses.dataclass
class Observation:
    """What one forward call did: its outputs, its inputs afterwards, module buffers afterwards, and the plain
    Python attributes of the module tree it changed (restored after the call; see ``modstate``)."""

    outputs: Any
    inputs: Any
    buffers: dict[str, torch.Tensor]
    python_changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def clone_inputs(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def describe_exception(exc: BaseException, limit: int = 4000) -> str:
    text = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}".replace("builtins.", "")
    text = text.strip()
    if len(text) > limit:
        text = text[: limit - 20] + "\n... (truncated)"
    return text


@contextlib.contextmanager
def failing_as(label: str, kind: str | None = None, **data: Any):
    """The torch call a stage checks: whatever it raises is the stage's finding (``failed``), not a crash of
    the harness (``error``; issue #18)."""
    try:
        yield
    except (StageFailure, StageSkip, HarnessError):
        raise
    except Exception as exc:  # noqa: BLE001 - what the checked call raises is the finding
        raise StageFailure(f"{label} raised: {describe_exception(exc)}", kind=kind, exception=type(exc).__name__,
                           **data) from exc


def seed_all(seed: int) -> None:
    """``torch.manual_seed`` without its cost where no accelerator is initialized: there it queues a lazy
    seeding call per backend (CUDA, XPU, MTIA) with a formatted stack each time, which costs milliseconds
    per forward call. The CPU generator, and an accelerator's once it is initialized, are seeded alike."""
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def observe(module: Callable[..., Any], owner: torch.nn.Module, args: tuple, kwargs: dict) -> Observation:
    a, k = clone_inputs((args, kwargs))
    with preserved_state(owner) as record:
        seed_all(RUN_SEED)
        out = module(*a, **k)
        buffers = {n: b.detach().clone() for n, b in owner.named_buffers()}
    return Observation(out, (a, k), buffers, record.get("python_changes", []))


def compare_observations(actual: Observation, expected: Observation, options: CaseOptions) -> dict[str, float]:
    """Outputs, then inputs that forward mutated, then buffers; raise Mismatch on the first kind that differs."""
    tol = {"rtol": options.rtol, "atol": options.atol}  # compare_trees fills in the dtype default of one not given
    errs = compare_trees(actual.outputs, expected.outputs, root="output", **tol)
    in_errs = compare_trees(actual.inputs, expected.inputs, root="input (after forward)", **tol)
    common = sorted(set(actual.buffers) & set(expected.buffers))
    buf_errs = compare_trees(
        {n: actual.buffers[n] for n in common}, {n: expected.buffers[n] for n in common},
        root="buffer (after forward)", **tol,
    )
    return {k: max(errs[k], in_errs[k], buf_errs[k]) for k in errs}


@dataclasses.dataclass
class Stage:
    name: str
    fn: Callable[["Context"], dict[str, Any] | None]
    needs: tuple[str, ...] = ()
    enabled: Callable[["Context"], bool] = lambda ctx: True


class Context:
    """Everything a stage may use; the exported program lives here and is reused by every later stage."""

    def __init__(self, case: Case, options: CaseOptions, nodeid: str, workdir: Path, session: Any = None,
                 source: Case | None = None):
        self.case = case
        self.source = source or case  # the case as given (on cpu); ``case`` is its copy on options.device
        self.options = options
        self.nodeid = nodeid
        self.workdir = workdir
        self.session = session
        self.result = CaseResult(nodeid, tags=list(options.tags))
        self.ep = None
        self.loaded: dict[str, Any] = {}
        self.decomposed = None
        self._reference: Observation | None = None
        self._modules: dict[int, torch.nn.Module] = {}
        self.declaration = None  # shapes.Declaration, parsed before export
        self.audit_problem: str | None = None
        self.declaration_error: str | None = None
        self._audit = None
        # stages whose product later stages can use although the stage itself did not pass (eager ran, but its
        # outputs could not be compared: export must still be tried)
        self.usable: set[str] = set()
        self.python_changes: list[dict[str, Any]] = []  # what eager forward changed in the module's Python state
        self.eager_rejects: list[str] = []  # sizes 0/1 inside the promise where eager itself raises (no failure)

    # dynamic shapes ------------------------------------------------------------------------
    def audit(self):
        """Declared vs achieved for the exported program (``shapes.Audit``), computed once; None if unavailable
        (``audit_problem`` says why)."""
        if self._audit is None and self.ep is not None and self.declaration is not None:
            from .shapes import audit

            try:
                self._audit = audit(self.declaration, self.ep, allow_static=self.options.allow_static,
                                    max_size=self.options.max_size)
            except Exception as exc:  # noqa: BLE001 - guards and fuzz end as `error`; export stands
                self.audit_problem = f"could not map dynamic_shapes onto the exported program: {describe_exception(exc)}"
                self.declaration = None
        return self._audit

    def require_audit(self):
        """The audit, for a stage that cannot decide without it: a harness limit is an ``error`` (issue #18)."""
        au = self.audit()
        if au is None:
            raise HarnessError(f"cannot check the declared ranges: {self.audit_problem or 'no dynamic-shapes model'}")
        if au.errors:
            raise HarnessError("cannot check the declared ranges: " + "; ".join(au.errors))
        return au

    def mark_refused(self, symbol: str, values: dict[str, int]) -> None:
        """An in-range size the program refused: the audit table must not still say ``kept`` for its axes."""
        au = self._audit
        if au is None:
            return
        sizes = au.model.sizes(values)
        for row, sym, (flat, dim) in zip(au.rows, au.row_symbols, au.row_axes):
            if sym != symbol:
                continue
            size = sizes.get(flat, {}).get(dim)
            if size is None:
                continue
            if size < row.get("refused_at", size + 1):
                row["refused_at"] = size
            if row.get("status") == "kept":  # narrowed / specialized already say it is not kept
                row["status"] = REFUSED_IN_RANGE

    def in_range_inputs(self) -> list[tuple[dict[str, int], tuple, dict]]:
        """Boundary sizes inside the declared-and-kept ranges, as (sizes by name, args, kwargs)."""
        from .stages.guards import in_range_probes, probe_inputs

        au = self.audit()
        if au is None:
            return []
        return [(au.model.named(p.values), *probe_inputs(self, au.model, p, self.options.input_builder))
                for p in in_range_probes(self, au.model) if p.kind == "in-range"]

    def out_of_range_inputs(self) -> list[tuple[str, tuple, dict]]:
        """Inputs a program must refuse (max+1, min-1 where checked, broken relations, wrong static sizes)."""
        from .stages.guards import out_of_range_probes, probe_inputs

        au = self.audit()
        if au is None:
            return []
        return [(p.description, *probe_inputs(self, au.model, p)) for p in out_of_range_probes(self, au.model)
                if p.kind != "small"]

    def export_dynamic_shapes(self) -> Any:
        """``dynamic_shapes`` as handed to ``torch.export.export`` (every export of this case uses the same)."""
        dynamic_shapes = self.options.dynamic_shapes
        if isinstance(dynamic_shapes, torch.export.ShapesCollection):
            # keyed by the identity of the example tensors: resolve it on the case's own inputs, not the clones
            dynamic_shapes = dynamic_shapes.dynamic_shapes(self.source.module, self.source.args, self.source.kwargs)
        return dynamic_shapes

    # programs ------------------------------------------------------------------------------
    def module_of(self, ep) -> torch.nn.Module:
        """``ep.module()`` built once per program (it builds a new module on every call)."""
        mod = self._modules.get(id(ep))
        if mod is None:
            mod = self._modules[id(ep)] = ep.module()
        return mod

    def reference(self) -> Observation:
        if self._reference is None:
            self._reference = observe(self.case.module, self.case.module, self.case.args, self.case.kwargs)
        return self._reference

    def eager_on(self, args: tuple, kwargs: dict) -> Observation:
        return observe(self.case.module, self.case.module, args, kwargs)

    def program_on(self, ep, args: tuple, kwargs: dict) -> Observation:
        mod = self.module_of(ep)
        return observe(mod, mod, args, kwargs)

    def check_program(self, ep, label: str) -> dict[str, float]:
        """The program against eager on the example inputs.

        Where ``compare`` already found the exported program wrong, later programs are compared with the
        exported one instead, so each stage reports its own defect and not the same mismatch again.
        """
        try:
            got = self.program_on(ep, self.case.args, self.case.kwargs)
        except Exception as exc:
            raise StageFailure(f"the {label} program raised on the example inputs: {describe_exception(exc)}",
                               kind="raised", exception=type(exc).__name__)
        against, expected = "eager", None
        # only a failed compare moves the reference; a compare skipped on request still leaves eager the reference
        if ep is not self.ep and self.result.stage_status("compare") in (FAILED, XFAILED):
            against = "the exported program (compare failed, so eager is not the reference here)"
            expected = self.program_on(self.ep, self.case.args, self.case.kwargs)
        try:
            return compare_observations(got, expected or self.reference(), self.options)
        except Mismatch as exc:
            raise StageFailure(f"the {label} program disagrees with {against}:\n{exc}", kind="mismatch",
                               errors=exc.errors, **exc.worst())


# ---- the core stages ----------------------------------------------------------------------

def stage_eager(ctx: Context) -> dict[str, Any]:
    """The eager forward itself: it must run, and give the same result twice (else nothing can be compared)."""
    try:
        first = ctx.reference()
    except Exception as exc:
        raise StageFailure(
            f"eager forward raised on the example inputs (a bug in the model or its inputs, not in export): "
            f"{describe_exception(exc)}", kind="raised", exception=type(exc).__name__,
        )
    ctx.usable.add("eager")  # forward runs: export can be tried whatever the comparison below finds
    ctx.python_changes = list(first.python_changes)
    try:
        second = ctx.eager_on(ctx.case.args, ctx.case.kwargs)
    except Exception as exc:
        raise StageFailure(f"eager forward raised on its second call with the same inputs (the first call "
                           f"worked): {describe_exception(exc)}", kind="raised", exception=type(exc).__name__)
    try:
        compare_observations(second, first, ctx.options)
    except Mismatch as exc:
        ctx.usable.discard("eager")
        raise StageFailure(
            "eager forward is nondeterministic: two eager runs on the same inputs (same seed) disagree, so export "
            f"cannot be blamed for differences. Make forward deterministic (eval(), fixed dropout) or loosen rtol/atol.\n{exc}",
            kind="nondeterministic", errors=exc.errors,
        )
    if ctx.python_changes:
        more = len(ctx.python_changes) - 1
        return {"message": f"forward changes the module's Python state: {_python_change_text(ctx.python_changes[0])}"
                           f"{f' and {more} more' if more else ''} (see compare)"}
    return {}


def _python_change_text(change: dict[str, Any]) -> str:
    return f"`{change['path']}` (was {change['was']}, now {change['now']})"


def stage_export(ctx: Context) -> dict[str, Any]:
    if ctx.declaration_error:
        raise StageFailure(f"not exported: {ctx.declaration_error}", kind="usage", exception="UsageError")
    module = ctx.case.module
    _check_preserved(ctx)
    before = state_snapshot(module)
    args, kwargs = clone_inputs((ctx.case.args, ctx.case.kwargs))
    dynamic_shapes = ctx.options.dynamic_shapes
    try:
        dynamic_shapes = ctx.export_dynamic_shapes()
        extra = {}
        if ctx.options.preserve_module_call_signature:
            extra["preserve_module_call_signature"] = tuple(ctx.options.preserve_module_call_signature)
        # tracing runs forward in Python: Python attributes it sets are put back (compare reports them)
        with quiet_trace_logs(), preserved_python_state(module):
            ctx.ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=ctx.options.strict,
                                         **extra)
    except Exception as exc:
        data: dict[str, Any] = {"exception": type(exc).__name__}
        text = describe_exception(exc) + export_hint(exc)
        if ctx.options.diagnose:
            text += "\n\n" + _diagnosis(ctx, exc, dynamic_shapes, data)
        raise StageFailure(text.rstrip(), kind=type(exc).__name__, **data)
    changed = state_changes(module, before)
    data = {
        "nodes": sum(1 for _ in ctx.ep.graph.nodes),
        "range_constraints": {str(k): [_bound(v.lower), _bound(v.upper)] for k, v in ctx.ep.range_constraints.items()},
    }
    au = ctx.audit()
    if au is not None and au.rows:
        ctx.result.info["shapes"] = au.rows
        counts: dict[str, int] = {}
        for row in au.rows:
            counts[row["status"]] = counts.get(row["status"], 0) + 1
        data["message"] = "dynamic axes: " + ", ".join(f"{n} {k}" for k, n in counts.items())
        ctx.result.warnings.extend(au.warnings)
    if changed:
        raise StageFailure(
            "exporting changed the eager module's state: " + ", ".join(changed)
            + " (export must not run side effects on the model; check forward for in-place updates outside tensors)",
            kind="state-changed", **data,
        )
    return data


@contextlib.contextmanager
def preserved_python_state(module: torch.nn.Module):
    from .modstate import python_state, python_state_changes, restore_python_state

    before = python_state(module)
    try:
        yield
    finally:
        if python_state_changes(before, python_state(module)):
            restore_python_state(module, before)


def _diagnosis(ctx: Context, exc: BaseException, dynamic_shapes: Any, data: dict[str, Any]) -> str:
    """draft_export's account of a failed export, timed on its own; a diagnosis that itself crashes is said so,
    and never hides the export failure."""
    from .diagnose import diagnose, diagnosis_text

    t0 = time.perf_counter()
    try:
        a, k = clone_inputs((ctx.case.args, ctx.case.kwargs))
        with quiet_trace_logs():
            data["diagnosis"] = diagnose(exc, ctx.case.module, a, k, dynamic_shapes, ctx.options.strict,
                                         ctx.workdir / "draft_export")
        return diagnosis_text(data["diagnosis"])
    except Exception as crash:  # noqa: BLE001 - the diagnosis is extra: its crash must not replace the finding
        return f"(no diagnosis: draft_export could not run: {describe_exception(crash, 300)})"
    finally:
        data["diagnosis_s"] = round(time.perf_counter() - t0, 4)


def _check_preserved(ctx: Context) -> None:
    """Every ``preserve_module_call_signature`` name must be a submodule (torch raises a bare AttributeError)."""
    module = ctx.case.module
    names = [n for n, _ in module.named_modules() if n]
    for fqn in ctx.options.preserve_module_call_signature:
        try:
            module.get_submodule(fqn)
        except AttributeError:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") if names else "none"
            raise StageFailure(
                f"not exported: {ctx.nodeid}: preserve_module_call_signature names {fqn!r}, which is no submodule of "
                f"{type(module).__name__} (submodules: {shown}); give fully qualified submodule names",
                exception="UsageError",
            )


@contextlib.contextmanager
def quiet_trace_logs():
    """torch.export logs structured-trace records at DEBUG; keep them out of pytest's captured log.

    torch's own logging set-up makes this logger non-propagating, but only once it first runs, which can be
    in the middle of the first export; set the intended state up front. pytest (9) also attaches its capture
    handlers to every non-propagating logger directly. torch builds a trace record (graph dumps, stacks)
    whenever the logger has any handler, so those handlers are detached while a case runs: no record is
    built for nobody. torch's own trace handlers (``TORCH_TRACE``; draft_export adds its own) stay.
    """
    import logging

    from torch._logging._internal import LazyTraceHandler

    logger = logging.getLogger("torch.__trace")
    logger.propagate = False
    detached = [h for h in logger.handlers if not isinstance(h, LazyTraceHandler)]
    for h in detached:
        logger.removeHandler(h)
    try:
        yield
    finally:
        for h in detached:
            if h not in logger.handlers:
                logger.addHandler(h)


_HINTS = {
    "GuardOnDataDependentSymNode": "data-dependent Python control flow (a branch on tensor values); "
    "use torch.cond, or torch._check for the value's range",
    "UserError": "a declared dynamic_shapes promise does not hold; see the suggested fixes above",
    "Unsupported": "strict tracing (TorchDynamo) cannot trace this code; try strict=False or rewrite it",
    "ConstraintViolationError": "the declared Dim ranges conflict with the code's guards; see the suggested fixes",
}


def export_hint(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        hint = _HINTS.get(cls.__name__)
        if hint:
            return f"\nhint: {hint}"
    return ""


def _bound(v: Any) -> int | None:
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None  # infinity (sympy's int_oo raises AttributeError from int())
    return i if abs(i) < 2**62 else None


def stage_compare(ctx: Context) -> dict[str, Any]:
    mismatch: StageFailure | None = None
    try:
        data = ctx.check_program(ctx.ep, "exported")
    except StageFailure as exc:
        if not ctx.python_changes:
            raise
        mismatch, data = exc, {}
    if ctx.python_changes:
        lines = [f"forward changes Python attribute {_python_change_text(c)}" for c in ctx.python_changes[:5]]
        more = len(ctx.python_changes) - 5
        text = (";\n".join(lines) + (f";\n... and {more} more" if more > 0 else "")
                + "; the exported program freezes it at its traced value, so it diverges from eager from the second "
                  "call on (keep such state in a buffer, or out of forward)")
        if mismatch is not None:
            text += f"\n{mismatch}"
        raise StageFailure(text, kind="python-state", python_changes=ctx.python_changes, **data)
    return data


def stage_serde(ctx: Context) -> dict[str, Any]:
    from .torchlog import repaired_torch_logs

    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    import io

    buf = io.BytesIO()
    with failing_as("torch.export.save", kind="save"):
        torch.export.save(ctx.ep, buf)
    size = len(buf.getvalue())
    buf.seek(0)
    with failing_as("torch.export.load", kind="load"):
        ctx.loaded["memory"] = torch.export.load(buf)
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    with failing_as(f"torch.export.save to {path.name}", kind="save"):
        torch.export.save(ctx.ep, path)
    with failing_as(f"torch.export.load from {path.name}", kind="load"):
        ctx.loaded["file"] = torch.export.load(path)
    worst: dict[str, float] = {}
    for label, ep in ctx.loaded.items():
        errs = ctx.check_program(ep, f"reloaded ({label})")
        worst = {k: max(worst.get(k, 0.0), v) for k, v in errs.items()}
    return {"bytes": size, **worst}


def stage_decomp(ctx: Context) -> dict[str, Any]:
    from .ops import program_ops

    before = program_ops(ctx.ep)
    with quiet_trace_logs(), failing_as("run_decompositions()", kind="decompose"):
        ctx.decomposed = ctx.ep.run_decompositions()
    after = program_ops(ctx.decomposed)
    non_core = [op for op, core in after.items() if not core]
    data = {"ops_before": list(before), "ops_after": list(after), "non_core": non_core}
    data.update(ctx.check_program(ctx.decomposed, "decomposed"))
    if non_core and ctx.options.core_aten:
        raise StageFailure(
            f"ops outside Core ATen survive run_decompositions(): {', '.join(non_core)} "
            "(core_aten=True asks for a Core ATen graph; decompose them or drop core_aten)",
            kind="non-core", **data,
        )
    return data


STAGE_REGISTRY: list[Stage] = [
    Stage("eager", stage_eager),
    Stage("export", stage_export, needs=("eager",)),
    Stage("compare", stage_compare, needs=("eager", "export")),
    Stage("serde", stage_serde, needs=("eager", "export")),
    Stage("decomp", stage_decomp, needs=("eager", "export")),
]


def register_stage(stage: Stage, after: str | None = None) -> None:
    """Add a stage (later issues plug theirs in here); ``after`` places it behind a named stage."""
    names = [s.name for s in STAGE_REGISTRY]
    if stage.name in names:
        STAGE_REGISTRY[names.index(stage.name)] = stage
        return
    idx = names.index(after) + 1 if after in names else len(STAGE_REGISTRY)
    STAGE_REGISTRY.insert(idx, stage)


def _usable(ctx: Context, name: str) -> bool:
    """Whether a later stage may build on stage ``name``: it passed, it is not in this run, it was left out on
    request (``--export-skip-stages compare`` skips compare only), or its product exists although it did not pass."""
    status = ctx.result.stage_status(name)
    return status in (PASSED, None) or name in ctx.usable or (status == SKIPPED and name in ctx.options.skip_stages)


def _run_stage(ctx: Context, stage: Stage, started: list[float]) -> StageResult:
    res = ctx.result
    if stage.name in ctx.options.skip_stages:
        return StageResult(stage.name, SKIPPED, "skipped: not requested (--export-skip-stages)")
    blocked = [n for n in stage.needs if not _usable(ctx, n)]
    if blocked:
        return StageResult(stage.name, SKIPPED, f"skipped: {blocked[0]} {res.stage_status(blocked[0])}")
    t0 = started[0] = time.perf_counter()
    try:
        data = stage.fn(ctx) or {}
        out = StageResult(stage.name, PASSED, data.pop("message", ""), data=data)
    except StageFailure as exc:
        data = {k: v for k, v in exc.data.items() if k not in ("status", "message")}
        data["signature"] = exc.kind or data.get("exception") or "failed"
        out = StageResult(stage.name, FAILED, str(exc), data=data)
    except StageSkip as exc:
        out = StageResult(stage.name, SKIPPED, f"skipped: {exc}")
    except HarnessError as exc:  # the harness could not decide: said as it is, never blamed on the model
        out = StageResult(stage.name, ERROR, str(exc), data={"exception": type(exc).__name__})
    except Exception as exc:  # noqa: BLE001 - the harness's own crash: an `error` with its traceback, never a pass
        out = StageResult(stage.name, ERROR, "the harness crashed in this stage (please report it): "
                          + describe_exception(exc), data={"exception": type(exc).__name__})
        out.data["traceback"] = "".join(traceback.format_exception(exc)[-8:])[-4000:]
    out.duration = time.perf_counter() - t0
    # an xfail entry expects a *failure*: an error is never expected (issue #18)
    reason = xfail_for(ctx.options.xfail, ctx.options.strict, ctx.options.device).get(stage.name)
    if reason is not None:
        if out.status == FAILED:
            out.status, out.message = XFAILED, f"expected failure ({reason}): {out.message}"
        elif out.status == PASSED:
            out.status, out.message = XPASSED, f"XPASS(strict): expected to fail ({reason}) but passed; remove the xfail entry"
    return out


_TIMEOUT_WARNED: list[str] = []  # said once per process where --export-timeout cannot be enforced


def run_case(case: Case, options: CaseOptions, nodeid: str = "<case>", workdir: Path | None = None,
             session: Any = None) -> CaseResult:
    """Run every enabled stage of one case and return its result (never raises for a stage failure)."""
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
        stack.enter_context(quiet_trace_logs())
        _read_declaration(ctx)
        stages = [s for s in STAGE_REGISTRY if s.enabled(ctx)]
        current, started = None, [time.perf_counter()]
        try:
            with time_limit(options.timeout) as enforced:
                if options.timeout and not enforced and not _TIMEOUT_WARNED:
                    _TIMEOUT_WARNED.append(nodeid)
                    ctx.result.warnings.append(
                        f"--export-timeout {options.timeout:g} s is not enforced here (it needs SIGALRM and the "
                        "main thread); cases run without a time limit")
                for stage in stages:
                    current = stage
                    ctx.result.add(_run_stage(ctx, stage, started))
                current = None
        except CaseTimeout as exc:
            _record_timeout(ctx, stages, current, exc, time.perf_counter() - started[0])
        return ctx.result.finish()


def _read_declaration(ctx: Context) -> None:
    """The dynamic_shapes model, before export. A declaration that does not fit the case (an axis past the
    rank, a name defined twice, an example outside its own range, a key that is no argument) fails the
    ``export`` stage with a message that points at the key, without calling torch."""
    from .options import UsageError
    from .shapes import parse

    try:
        ctx.declaration = parse(ctx.nodeid, ctx.options.dynamic_shapes, ctx.source.module, ctx.source.args,
                                ctx.source.kwargs)
        if ctx.case is not ctx.source and ctx.declaration.additional:
            ctx.declaration.additional = [_on(ctx.options.device, a) for a in ctx.declaration.additional]
    except UsageError as exc:
        ctx.declaration_error = str(exc)
        ctx.audit_problem = "dynamic_shapes does not fit the case"
    except Exception as exc:  # noqa: BLE001 - export reports the real problem; guards and fuzz end as `error`
        ctx.audit_problem = f"could not read dynamic_shapes: {describe_exception(exc)}"


def _on(device: str, tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


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


from .stages import fuzz as _fuzz, guards as _guards  # noqa: E402,F401 - they register their stages
from .stages import retrace as _retrace, unflatten as _unflatten, cuda as _cuda, aoti as _aoti  # noqa: E402,F401

__all__ = ["run_case", "smoke", "register_stage", "Stage", "StageFailure", "Context", "ERROR"]
