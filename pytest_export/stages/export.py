"""Stage ``export``: ``torch.export.export`` succeeds, once per case, and leaves the module's state unchanged.

A declaration that does not fit the case never gets here: it is the case's usage error (``runner``). A failed
export is diagnosed (its time reported apart, as ``diagnosis_s``, under a limit of its own: ``diagnose.limit_for``):
a constraint violation by the fix torch's message carries, built and checked; any other failure with
``draft_export``.
A limit that cuts the diagnosis never changes the verdict torch reached: the stage stays ``failed``.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from typing import Any

import torch

from ..context import Context, Stage, StageFailure
from ..explain.refusal import model_fix
from ..proof.guardsource import model_frames, record_of, symbol_labels, violation_sources
from ..torchside.frames import class_hint, frames_data, located
from ..torchside.modstate import changed_since, versions
from ..torchside.observe import clone_inputs, preserved_python_state
from ..torchside.timeout import CaseTimeout
from ..torchside.torchlog import quiet_trace_logs
from ..util import describe_exception, finite_int


def run(ctx: Context) -> dict[str, Any]:
    module = ctx.case.module
    _check_preserved(ctx)
    for name, (t, _) in versions(module).items():
        if name.startswith("buffer "):
            ctx.keeper.original(t)  # the values to compare with (buffers copied once per case; parameters never)
    before = versions(module)
    args, kwargs = clone_inputs((ctx.case.args, ctx.case.kwargs))
    dynamic_shapes = ctx.options.dynamic_shapes
    cpu_started = time.process_time()
    try:
        dynamic_shapes = ctx.export_dynamic_shapes()
        extra = {}
        if ctx.options.preserve_module_call_signature:
            extra["preserve_module_call_signature"] = tuple(ctx.options.preserve_module_call_signature)
        # tracing runs forward in Python: Python attributes it sets are put back (compare reports them)
        with quiet_trace_logs(), preserved_python_state(module), _stderr_once(), model_frames():
            ctx.ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=ctx.options.strict,
                                         **extra)
    except Exception as exc:
        # the diagnosis' limit counts CPU time as every limit does (``timeout``), so it is scaled by export's
        export_cpu_s = time.process_time() - cpu_started
        data: dict[str, Any] = {"exception": type(exc).__name__, **frames_data(exc)}
        ctx.torch_symbols = symbol_labels(exc)  # its messages name torch's symbols by the axes (#54)
        # the model's frames where torch's text does not show them; a class pytree does not know, named
        text = located(describe_exception(exc), exc) + _guard_lines(exc) + (_class_hint(ctx, exc) or export_hint(exc))
        if ctx.options.diagnose:
            text += "\n\n" + _diagnosis(ctx, exc, dynamic_shapes, data, export_cpu_s)
        elif ctx.options.diagnose_skipped:  # known or expected (--export-diagnose=auto: issue #26)
            text += "\n\n" + ctx.options.diagnose_skipped
            data["diagnosis_skipped"] = ctx.options.diagnose_skipped
        raise StageFailure(text.rstrip(), kind=type(exc).__name__, **data)
    record_of(ctx.ep)  # export's guards, read before later stages add their own to its shape environment (#33)
    changed = changed_since(before, ctx.keeper)
    data = {
        "nodes": sum(1 for _ in ctx.ep.graph.nodes),
        "range_constraints": {str(k): [finite_int(v.lower), finite_int(v.upper)] for k, v in ctx.ep.range_constraints.items()},
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


class _Once(io.TextIOBase):
    """A stderr that lets each long text through once: a failed export prints its partial graph to stderr from
    two nested frames of ``torch.export`` (torch 2.13), the same graph twice (#17)."""

    def __init__(self, stream: Any):
        self.stream = stream
        self.seen: set[int] = set()

    def write(self, text: str) -> int:
        if len(text) > 200:
            key = hash(text)
            if key in self.seen:
                return len(text)
            self.seen.add(key)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def _stderr_once():
    with contextlib.redirect_stderr(_Once(sys.stderr)):
        yield


def _diagnosis(ctx: Context, exc: BaseException, dynamic_shapes: Any, data: dict[str, Any], export_cpu_s: float) -> str:
    """The account of a failed export (``diagnose``), timed on its own and under its own limit (issue #23:
    draft_export ran for more than 12 minutes after an export that failed in 70 s): for a constraint violation
    whose message carries torch's suggested fixes, the fix built from it and checked, without draft_export
    (``_fix_data`` puts it in the stage's data); else draft_export's findings. A diagnosis that itself crashes or
    is cut is said so, and never hides the export failure.

    When the case's own time (``--export-timeout``) runs out here, torch's verdict stands: the stage stays
    ``failed``, and ``data["timeout"]`` tells the runner that the case's time is up (it skips the later stages as
    timed out)."""
    from ..explain.diagnose import cut_text, diagnose, diagnosis_text, limit_for

    t0 = time.perf_counter()
    try:
        try:
            a, k = clone_inputs((ctx.case.args, ctx.case.kwargs))
            with quiet_trace_logs():
                data["diagnosis"] = diagnose(exc, ctx.case.module, a, k, dynamic_shapes, ctx.options.strict,
                                             ctx.workdir / "draft_export", limit=limit_for(export_cpu_s))
        except CaseTimeout:  # the case's time ran out before draft_export started (copying the inputs)
            data["diagnosis"] = {"cut": True, "cut_by": "case timeout",
                                 "cut_after_s": round(time.perf_counter() - t0, 3)}
        if data["diagnosis"].get("cut_by") == "case timeout":
            data["timeout"] = ctx.options.timeout or True
            ctx.result.warnings.append(f"stopped after {ctx.options.timeout or 0:g} s in stage export, while "
                                       "diagnosing its failure: " + cut_text(data["diagnosis"]))
        _fix_data(data["diagnosis"], data)
        shown = data["diagnosis"]
        if (shown.get("draft_export_error") or "").splitlines()[:1] == describe_exception(exc).splitlines()[:1]:
            shown = {**shown, "draft_export_error": "the same error (above)"}  # each message once (#26)
        return diagnosis_text(shown)
    except Exception as crash:  # noqa: BLE001 - the diagnosis is extra: its crash must not replace the finding
        return f"(no diagnosis: draft_export could not run: {describe_exception(crash, 300)})"
    finally:
        data["diagnosis_s"] = round(time.perf_counter() - t0, 4)


def _fix_data(diagnosis: dict[str, Any], data: dict[str, Any]) -> None:
    """A fix built from torch's own message (no draft_export: issue #31) in the stage's data: ``diagnosis_skipped``
    (why draft_export did not run), ``fix_checked`` (whether exporting again with it succeeded) and, only when it
    did, ``dynamic_shapes_fix`` (Python to paste)."""
    if not diagnosis.get("draft_export_skipped"):
        return
    data["diagnosis_skipped"] = diagnosis["draft_export_skipped"]
    data["fix_checked"] = bool(diagnosis.get("dynamic_shapes_fix_checked") and diagnosis.get("dynamic_shapes_fix"))
    if data["fix_checked"]:
        data["dynamic_shapes_fix"] = diagnosis["dynamic_shapes_fix"]


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


_HINTS = {
    "GuardOnDataDependentSymNode": "data-dependent Python control flow: a branch on tensor values, or a tensor made "
    "a Python number (`.item()`, `int(t)`, `float(t)`, `bool(t)`, `if t:`); use torch.cond, or torch._check for "
    "the value's range",
    "UserError": "a declared dynamic_shapes promise does not hold",
    "Unsupported": "strict tracing (TorchDynamo) cannot trace this code; try strict=False or rewrite it",
    "ConstraintViolationError": "the declared Dim ranges conflict with the code's guards",
}
_SUGGESTED = ("UserError", "ConstraintViolationError")  # "see the suggested fixes" only where torch gave some (#41)


def _class_hint(ctx: Context, exc: BaseException) -> str:
    """``torch.export.register_dataclass(<Class>)`` where an output or input class is unknown to pytree (#26)."""
    try:
        outputs = ctx.reference().outputs  # eager ran (export needs it): its outputs are cached
    except Exception:  # noqa: BLE001 - the inputs alone then
        outputs = None
    return class_hint(exc, outputs, (ctx.case.args, ctx.case.kwargs))


def _guard_lines(exc: BaseException) -> str:
    """The model's lines that added the guards a constraint violation names, as torch recorded them (#33)."""
    lines = violation_sources(exc)
    if not lines:
        return ""
    hints = [h for h in dict.fromkeys(model_fix(ln.split(" (`", 1)[0]) for ln in lines) if h]
    return ("\nthe guards torch could not prove over the declared range were added at:\n"
            + "\n".join(f"  {ln}" for ln in lines) + "".join(f"\n{h}" for h in hints))


def export_hint(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        hint = _HINTS.get(cls.__name__)
        if hint:
            if cls.__name__ in _SUGGESTED and "Suggested fixes" in str(exc):
                hint += "; see the suggested fixes above"
            return f"\nhint: {hint}"
    return ""


STAGE = Stage("export", run, needs=("eager",))
