"""Stage ``decomp``: ``run_decompositions()`` with the default table; the decomposed program computes what
eager computes; the ATen ops before and after, and those left outside Core ATen, are recorded.
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure, failing_as
from ..torchside.ops import program_ops
from ..torchside.torchlog import quiet_trace_logs


def run(ctx: Context) -> dict[str, Any]:
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


STAGE = Stage("decomp", run, needs=("eager", "export"))
