"""Stage ``eager``: eager forward runs on the example inputs and gives the same result twice.

A failure here is the model's, not export's, and nothing after it can be compared. An output the harness
cannot compare is an ``error`` (the harness's limit) and export is still tried. A forward that changes the
module's plain Python state is recorded here (each call's changes are undone) and fails ``compare``.
"""

from __future__ import annotations

from typing import Any

from ..compare import Mismatch
from ..context import Context, Stage, StageFailure
from ..observe import compare_observations, python_change_text
from ..util import describe_exception


def run(ctx: Context) -> dict[str, Any]:
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
        return {"message": f"forward changes the module's Python state: {python_change_text(ctx.python_changes[0])}"
                           f"{f' and {more} more' if more else ''} (see compare)"}
    return {}


STAGE = Stage("eager", run)
