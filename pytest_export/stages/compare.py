"""Stage ``compare``: the exported program against eager on the example inputs (outputs, mutated inputs,
buffers), and forward's changes to the module's Python state, which the program freezes at its traced value.
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure
from ..torchside.observe import python_change_text


def run(ctx: Context) -> dict[str, Any]:
    mismatch: StageFailure | None = None
    try:
        data = ctx.check_program(ctx.ep, "exported")
    except StageFailure as exc:
        if not ctx.python_changes:
            raise
        mismatch, data = exc, {}
    if ctx.python_changes:
        lines = [f"forward changes Python attribute {python_change_text(c)}" for c in ctx.python_changes[:5]]
        more = len(ctx.python_changes) - 5
        text = (";\n".join(lines) + (f";\n... and {more} more" if more > 0 else "")
                + "; the exported program freezes it at its traced value, so it diverges from eager from the second "
                  "call on (keep such state in a buffer, or out of forward)")
        if mismatch is not None:
            text += f"\n{mismatch}"
        raise StageFailure(text, kind="python-state", python_changes=ctx.python_changes, **data)
    return data


STAGE = Stage("compare", run, needs=("eager", "export"))
