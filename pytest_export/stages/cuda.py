"""Stage ``cuda``: the program exported on CUDA computes what the program exported on CPU computes.

Runs in the items of a CUDA device (``--export-devices cuda``). Those items export and compare on the device
like any other (module and inputs moved there, eager on the device as the reference); this stage adds the
cross-device check: the case as given is exported on CPU too, and every output, mutated input and buffer of the
CUDA program (moved to CPU) must match the CPU program's at tolerances fit for the dtype: kernels differ between
devices (reduction order, TF32 convolutions), so bit equality is not expected. ``rtol`` / ``atol`` of the case
replace the table.
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure
from ..torchside.compare import Mismatch, compare_leaves
from ..torchside.observe import Observation, clone_inputs, observe, random_note, without_random
from ..torchside.ops import random_outputs
from ..torchside.torchlog import quiet_trace_logs
from ..util import describe_exception

CROSS_DEVICE_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-3, 1e-4),
    "complex64": (1e-3, 1e-4),
    "complex128": (1e-7, 1e-7),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
"""(rtol, atol) by dtype for CUDA against CPU; integer and bool leaves must be equal."""


def tolerance_for(dtype: Any) -> tuple[float, float]:
    name = str(dtype).replace("torch.", "")
    return CROSS_DEVICE_TOLERANCES.get(name, (0.0, 0.0))


def to_cpu(tree: Any) -> Any:
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.detach().to("cpu") if isinstance(x, torch.Tensor) else x, tree)


def compare_across_devices(device_obs: Observation, cpu_obs: Observation, rtol: float | None,
                           atol: float | None) -> dict[str, float]:
    """Leaf by leaf, each at its dtype's cross-device tolerance (or the case's rtol/atol); Mismatch lists them all."""
    import torch

    worst = {"max_abs_error": 0.0, "max_rel_error": 0.0}
    errors: list[dict[str, Any]] = []
    messages: list[str] = []
    common = sorted(set(device_obs.buffers) & set(cpu_obs.buffers))
    pairs = [
        ("output", device_obs.outputs, cpu_obs.outputs),
        ("input (after forward)", device_obs.inputs, cpu_obs.inputs),
        ("buffer (after forward)", {n: device_obs.buffers[n] for n in common}, {n: cpu_obs.buffers[n] for n in common}),
    ]

    def tolerance(w: Any) -> tuple[float | None, float | None]:
        if not isinstance(w, torch.Tensor):
            return rtol, atol
        # the case's rtol / atol replace the table's, each on its own (one given keeps the other's default)
        r, a = tolerance_for(w.dtype)
        return (r if rtol is None else rtol), (a if atol is None else atol)

    for root, got, want in pairs:
        try:
            errs = compare_leaves(to_cpu(got), to_cpu(want), tolerance, root=root)
            worst = {k: max(worst[k], errs[k]) for k in worst}
        except Mismatch as exc:
            errors += exc.errors
            messages.append(str(exc))
    if errors:
        raise Mismatch("\n".join(messages), errors)
    return worst


def run(ctx: Context) -> dict[str, Any]:
    import time

    import torch

    src = ctx.source
    t0 = time.perf_counter()
    args, kwargs = clone_inputs((src.args, src.kwargs))
    extra = {}
    if ctx.options.preserve_module_call_signature:
        extra["preserve_module_call_signature"] = tuple(ctx.options.preserve_module_call_signature)
    try:
        with quiet_trace_logs():
            cpu_ep = torch.export.export(src.module, args, kwargs, dynamic_shapes=ctx.export_dynamic_shapes(),
                                         strict=ctx.options.strict, **extra)
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"the case exports on {ctx.options.device} but not on cpu: {describe_exception(exc)}",
                           exception=type(exc).__name__)
    export_s = time.perf_counter() - t0
    cpu_mod = cpu_ep.module()
    try:
        cpu_obs = observe(cpu_mod, cpu_mod, src.args, src.kwargs, ctx.keeper, grad=ctx.options.grad)
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"the program exported on cpu raised on the example inputs: {describe_exception(exc)}")
    dev_obs = ctx.program_on(ctx.ep, ctx.case.args, ctx.case.kwargs)
    # values fed by random ops: each device has its own random stream, so they are held to their structure,
    # shapes and dtypes only, never called wrong (issue #24)
    random = random_outputs(ctx.ep)
    note = random_note(random, ctx.options.device)
    dev_obs, cpu_obs = without_random(dev_obs, random), without_random(cpu_obs, random)
    try:
        worst = compare_across_devices(dev_obs, cpu_obs, ctx.options.rtol, ctx.options.atol)
    except Mismatch as exc:
        raise StageFailure(f"the program exported on {ctx.options.device} disagrees with the one exported on cpu:\n"
                           f"{exc}", errors=exc.errors, **exc.worst())
    data = {"device": ctx.options.device, "cpu_export_s": round(export_s, 4), **worst,
            "message": f"{ctx.options.device} program matches the cpu program (max abs error "
                       f"{worst['max_abs_error']:.3g})" + (f"; {note}" if note else "")}
    if note:
        data.update(random_ops=random["ops"], not_compared=note)
    return data


def _enabled(ctx: Context) -> bool:
    return ctx.options.device.startswith("cuda")


STAGE = Stage("cuda", run, needs=("eager", "export"), enabled=_enabled)
