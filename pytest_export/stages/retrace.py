"""Stage ``retrace``: the exported program can be exported again (``export(ep.module(), ...)``) and keeps its meaning.

A deployment pipeline often re-exports what it was given (to quantize, to partition, to lower): the module
``ep.module()`` must trace with the same example inputs and the same ``dynamic_shapes``, the program it gives
must agree with eager on the example (as ``compare`` does) and with the first program on in-range boundary sizes
(where the first program itself is wrong, ``guards`` and ``fuzz`` say so), and its inputs must keep the dynamic
axes (and ranges) of the first program. Python-level structure the first export consumed (a ``*args``
signature, for one) does not survive into ``ep.module()``, so a declaration by argument name can stop
fitting.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..context import Context, Stage, StageFailure
from ..probes.choose import ACCEPTED, FAKE, UNCHECKED, in_range_inputs, mismatch, run_program
from ..torchside.observe import clone_inputs
from ..torchside.torchlog import quiet_trace_logs
from ..util import describe_exception, finite_int, plural

MAX_SIZE_PROBES = 4


def input_axes(ep: Any) -> list[list[Any]]:
    """Per user-input tensor, each axis as its size (static) or its ``[lower, upper]`` range (dynamic)."""
    import torch

    specs = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    out: list[list[Any]] = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in specs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        axes: list[Any] = []
        for size in val.shape:
            if isinstance(size, int):
                axes.append(size)
                continue
            vr = ep.range_constraints.get(size.node.expr)
            axes.append([finite_int(vr.lower), finite_int(vr.upper)] if vr is not None else "dynamic")
        out.append(axes)
    return out


def run(ctx: Context) -> dict[str, Any]:
    import torch

    module = ctx.ep.module()
    args, kwargs = clone_inputs((ctx.case.args, ctx.case.kwargs))
    try:
        with quiet_trace_logs():
            again = torch.export.export(module, args, kwargs, dynamic_shapes=ctx.export_dynamic_shapes(),
                                        strict=ctx.options.strict)
    except Exception as exc:  # noqa: BLE001 - not re-exportable is this stage's finding
        try:
            sig = f"({', '.join(inspect.signature(module.forward).parameters)})"
        except (TypeError, ValueError):
            sig = "(unknown)"
        hint = ""
        if "dynamic_shapes" in str(exc):
            hint = (f"\nhint: ep.module().forward takes {sig}, not the original forward's signature; a program that "
                    f"is re-exported (quantized, partitioned, lowered) needs dynamic_shapes that fit that signature")
        raise StageFailure(
            f"ep.module() does not export again with the same inputs and dynamic_shapes: {describe_exception(exc)}"
            + hint,
            exception=type(exc).__name__,
        )
    data: dict[str, Any] = {"nodes": sum(1 for _ in again.graph.nodes)}
    first, second = input_axes(ctx.ep), input_axes(again)
    if first != second:
        raise StageFailure(
            f"the re-exported program's inputs differ from the first program's: {second} (per input, size or "
            f"[min, max] per axis), first export: {first}",
            input_axes=second, first_input_axes=first, **data,
        )
    data.update(ctx.check_program(again, "re-exported"))
    checked = 0
    # at other sizes the reference is the first program, not eager: where the first program is wrong there,
    # guards and fuzz report it; retrace reports only what re-exporting changed
    against = "the first exported program"
    modes = {"fake": 0, "numeric": 0}
    for named, probe in [p for p in in_range_inputs(ctx) if p[0]][:MAX_SIZE_PROBES]:
        got = run_program(ctx, again, probe)
        want = run_program(ctx, ctx.ep, probe)
        if UNCHECKED in (got.status, want.status) or want.status != ACCEPTED:
            continue  # not checkable here, or the first program refuses these sizes: guards reports it
        sizes = ", ".join(f"{n}={v}" for n, v in named.items())
        if got.status != ACCEPTED:
            raise StageFailure(f"the re-exported program rejects in-range sizes {sizes}: {got.message}", **data)
        bad = mismatch(ctx, got.observation, want.observation, fake=FAKE in (got.mode, want.mode))
        if bad:
            raise StageFailure(f"the re-exported program disagrees with {against} at sizes {sizes}:\n{bad}", **data)
        checked += 1
        modes[got.mode] += 1
    data["sizes_checked"] = checked
    data["modes"] = modes
    data["message"] = f"re-exported ({data['nodes']} nodes), checked on the example" + (
        f" and {plural(checked, 'boundary size')}" if checked else "")
    return data


STAGE = Stage("retrace", run, needs=("eager", "export"))
