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
from .results import ERROR, FAILED, PASSED, SKIPPED, XFAILED, XPASSED, CaseResult, StageResult

RUN_SEED = 0x5EED


class StageSkip(Exception):
    """A stage does not apply to this case; the message says why."""


class StageFailure(Exception):
    """A stage found a defect: message for people, data for the report."""

    def __init__(self, message: str, **data: Any):
        super().__init__(message)
        self.data = data


@dataclasses.dataclass
class Observation:
    """What one forward call did: its outputs, its inputs afterwards, and module buffers afterwards."""

    outputs: Any
    inputs: Any
    buffers: dict[str, torch.Tensor]


def clone_inputs(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def describe_exception(exc: BaseException, limit: int = 4000) -> str:
    text = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}".replace("builtins.", "")
    text = text.strip()
    if len(text) > limit:
        text = text[: limit - 20] + "\n... (truncated)"
    return text


@contextlib.contextmanager
def preserved_buffers(module: torch.nn.Module):
    """Run forward without leaving traces: buffers (and parameters) are restored afterwards.

    ``ep.module()`` shares storage with ``ep.state_dict`` and so with the user's module: a forward that
    mutates a buffer would otherwise change every program and the eager module alike.
    """
    saved = [(t, t.detach().clone()) for t in _state_tensors(module)]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, copy in saved:
                if t.shape == copy.shape:
                    t.copy_(copy)


def _state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for t in list(module.buffers()) + list(module.parameters()):
        if isinstance(t, torch.Tensor):
            seen.setdefault(id(t), t)
    return list(seen.values())


def state_snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {f"parameter {n}": p.detach().clone() for n, p in module.named_parameters()}
    out.update({f"buffer {n}": b.detach().clone() for n, b in module.named_buffers()})
    return out


def state_changes(module: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    now = state_snapshot(module)
    changed = [k for k in before if k not in now or not _same(now[k], before[k])]
    changed += [k for k in now if k not in before]
    return changed


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


def seed_all(seed: int) -> None:
    """``torch.manual_seed`` without its cost where no accelerator is initialized: there it queues a lazy
    seeding call per backend (CUDA, XPU, MTIA) with a formatted stack each time, which costs milliseconds
    per forward call. The CPU generator, and an accelerator's once it is initialized, are seeded alike."""
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def observe(module: Callable[..., Any], owner: torch.nn.Module, args: tuple, kwargs: dict) -> Observation:
    a, k = clone_inputs((args, kwargs))
    with preserved_buffers(owner):
        seed_all(RUN_SEED)
        out = module(*a, **k)
        buffers = {n: b.detach().clone() for n, b in owner.named_buffers()}
    return Observation(out, (a, k), buffers)


def compare_observations(actual: Observation, expected: Observation, options: CaseOptions) -> dict[str, float]:
    """Outputs, then inputs that forward mutated, then buffers; raise Mismatch on the first kind that differs."""
    tol = {"rtol": options.rtol, "atol": options.atol}
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

    # dynamic shapes ------------------------------------------------------------------------
    def audit(self):
        """Declared vs achieved for the exported program (``shapes.Audit``), computed once; None if unavailable."""
        if self._audit is None and self.ep is not None and self.declaration is not None:
            from .shapes import audit

            try:
                self._audit = audit(self.declaration, self.ep, allow_static=self.options.allow_static,
                                    max_size=self.options.max_size)
            except Exception as exc:  # noqa: BLE001 - a gap in the model must not fail export itself
                self.audit_problem = f"could not map dynamic_shapes onto the exported program: {describe_exception(exc)}"
                self.result.warnings.append(self.audit_problem)
                self.declaration = None
        return self._audit

    def in_range_inputs(self) -> list[tuple[dict[str, int], tuple, dict]]:
        """Boundary sizes inside the declared-and-kept ranges, as (sizes by name, args, kwargs)."""
        from .stages.guards import in_range_probes, probe_inputs

        au = self.audit()
        if au is None:
            return []
        return [(au.model.named(p.values), *probe_inputs(self, au.model, p, self.options.input_builder))
                for p in in_range_probes(self, au.model) if p.inputs is None]

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
            raise StageFailure(f"the {label} program raised on the example inputs: {describe_exception(exc)}")
        against, expected = "eager", None
        if ep is not self.ep and self.result.stage_status("compare") not in ("passed", None):
            against = "the exported program (compare failed, so eager is not the reference here)"
            expected = self.program_on(self.ep, self.case.args, self.case.kwargs)
        try:
            return compare_observations(got, expected or self.reference(), self.options)
        except Mismatch as exc:
            raise StageFailure(f"the {label} program disagrees with {against}:\n{exc}", errors=exc.errors,
                               **exc.worst())


# ---- the core stages ----------------------------------------------------------------------

def stage_eager(ctx: Context) -> dict[str, Any]:
    """The eager forward itself: it must run, and give the same result twice (else nothing can be compared)."""
    try:
        first = ctx.reference()
    except Exception as exc:
        raise StageFailure(
            f"eager forward raised on the example inputs (a bug in the model or its inputs, not in export): "
            f"{describe_exception(exc)}"
        )
    second = ctx.eager_on(ctx.case.args, ctx.case.kwargs)
    try:
        compare_observations(second, first, ctx.options)
    except Mismatch as exc:
        raise StageFailure(
            "eager forward is nondeterministic: two eager runs on the same inputs (same seed) disagree, so export "
            f"cannot be blamed for differences. Make forward deterministic (eval(), fixed dropout) or loosen rtol/atol.\n{exc}",
            errors=exc.errors,
        )
    return {}


def stage_export(ctx: Context) -> dict[str, Any]:
    if ctx.declaration_error:
        raise StageFailure(f"not exported: {ctx.declaration_error}", exception="UsageError")
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
        with quiet_trace_logs():
            ctx.ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=ctx.options.strict,
                                         **extra)
    except Exception as exc:
        data: dict[str, Any] = {"exception": type(exc).__name__}
        text = describe_exception(exc) + export_hint(exc)
        if ctx.options.diagnose:
            from .diagnose import diagnose, diagnosis_text

            a, k = clone_inputs((ctx.case.args, ctx.case.kwargs))
            with quiet_trace_logs():
                data["diagnosis"] = diagnose(exc, module, a, k, dynamic_shapes, ctx.options.strict,
                                             ctx.workdir / "draft_export")
            text += "\n\n" + diagnosis_text(data["diagnosis"])
        raise StageFailure(text.rstrip(), **data)
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
            **data,
        )
    return data


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
    return ctx.check_program(ctx.ep, "exported")


def stage_serde(ctx: Context) -> dict[str, Any]:
    from .torchlog import repaired_torch_logs

    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    import io

    buf = io.BytesIO()
    torch.export.save(ctx.ep, buf)
    size = len(buf.getvalue())
    buf.seek(0)
    ctx.loaded["memory"] = torch.export.load(buf)
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(ctx.ep, path)
    ctx.loaded["file"] = torch.export.load(path)
    worst: dict[str, float] = {}
    for label, ep in ctx.loaded.items():
        errs = ctx.check_program(ep, f"reloaded ({label})")
        worst = {k: max(worst.get(k, 0.0), v) for k, v in errs.items()}
    return {"bytes": size, **worst}


def stage_decomp(ctx: Context) -> dict[str, Any]:
    from .ops import program_ops

    before = program_ops(ctx.ep)
    with quiet_trace_logs():
        ctx.decomposed = ctx.ep.run_decompositions()
    after = program_ops(ctx.decomposed)
    non_core = [op for op, core in after.items() if not core]
    data = {"ops_before": list(before), "ops_after": list(after), "non_core": non_core}
    data.update(ctx.check_program(ctx.decomposed, "decomposed"))
    if non_core and ctx.options.core_aten:
        raise StageFailure(
            f"ops outside Core ATen survive run_decompositions(): {', '.join(non_core)} "
            "(core_aten=True asks for a Core ATen graph; decompose them or drop core_aten)",
            **data,
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


def _run_stage(ctx: Context, stage: Stage) -> StageResult:
    res = ctx.result
    if stage.name in ctx.options.skip_stages:
        return StageResult(stage.name, SKIPPED, "skipped: not requested (--export-skip-stages)")
    blocked = [n for n in stage.needs if res.stage_status(n) not in (PASSED, None)]
    if blocked:
        return StageResult(stage.name, SKIPPED, f"skipped: {blocked[0]} {res.stage_status(blocked[0])}")
    t0 = time.perf_counter()
    try:
        data = stage.fn(ctx) or {}
        out = StageResult(stage.name, PASSED, data.pop("message", ""), data=data)
    except StageFailure as exc:
        out = StageResult(stage.name, FAILED, str(exc), data=exc.data)
    except StageSkip as exc:
        out = StageResult(stage.name, SKIPPED, f"skipped: {exc}")
    except Exception as exc:  # noqa: BLE001 - every stage failure becomes a result, never a crash
        out = StageResult(stage.name, FAILED, describe_exception(exc), data={"exception": type(exc).__name__})
        out.data["traceback"] = "".join(traceback.format_exception(exc)[-6:])[-3000:]
    out.duration = time.perf_counter() - t0
    reason = xfail_for(ctx.options.xfail, ctx.options.strict, ctx.options.device).get(stage.name)
    if reason is not None:
        if out.status == FAILED:
            out.status, out.message = XFAILED, f"expected failure ({reason}): {out.message}"
        elif out.status == PASSED:
            out.status, out.message = XPASSED, f"XPASS(strict): expected to fail ({reason}) but passed; remove the xfail entry"
    return out


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
        timed_out = None
        try:
            with time_limit(options.timeout):
                for stage in stages:
                    timed_out = stage
                    ctx.result.add(_run_stage(ctx, stage))
                timed_out = None
        except CaseTimeout as exc:
            _record_timeout(ctx, stages, timed_out, exc)
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
    except Exception as exc:  # noqa: BLE001 - export reports the real problem; guards and fuzz stand aside
        ctx.audit_problem = f"could not model dynamic_shapes: {describe_exception(exc)}"


def _on(device: str, tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def _record_timeout(ctx: Context, stages: list[Stage], current: Stage | None, exc: CaseTimeout) -> None:
    """The stage that was running is an ``error``; the ones after it are skipped; the result is kept."""
    for stage in stages:
        if stage.name in ctx.result.stages:
            continue
        if current is not None and stage.name == current.name:
            ctx.result.add(StageResult(
                stage.name, ERROR,
                f"timed out: the case {exc} (--export-timeout / timeout=) while running `{stage.name}`; "
                "the stage hangs or is too slow: raise the limit or make the case smaller",
                data={"timeout": ctx.options.timeout},
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
