"""Stage ``eager``: eager forward runs on the example inputs and gives the same result twice.

A failure here is the model's, not export's, and nothing after it can be compared. An output the harness
cannot compare is an ``error`` (the harness's limit) and export is still tried. A forward that changes the
module's plain Python state on every call (a counter, a list it appends to) is recorded here and fails ``compare``;
a change the second call does not repeat is a lazy initialization, kept and no finding (see ``modstate``).
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure
from ..results import HarnessError
from ..torchside.compare import Mismatch
from ..torchside.frames import frames_data, located
from ..torchside.observe import compare_observations, python_change_text
from ..util import describe_exception


def run(ctx: Context) -> dict[str, Any]:
    """The eager forward itself: it must run, and give the same result twice (else nothing can be compared)."""
    from ..torchside.training import note_training; note_training(ctx)  # a module left in training mode warns (#26)
    try:
        first = ctx.reference()
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - what forward raises is the model's
        raise StageFailure(located(
            f"eager forward raised on the example inputs (a bug in the model or its inputs, not in export): "
            f"{describe_exception(exc)}", exc), kind="raised", exception=type(exc).__name__, **frames_data(exc),
        )
    ctx.usable.add("eager")  # forward runs: export can be tried whatever the comparison below finds
    try:
        second = ctx.eager_on(ctx.case.args, ctx.case.kwargs)
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(located(f"eager forward raised on its second call with the same inputs (the first call "
                                   f"worked): {describe_exception(exc)}", exc),
                           kind="raised", exception=type(exc).__name__, **frames_data(exc))
    repeated = {c["path"] for c in second.python_per_call}
    ctx.python_changes = [c for c in first.python_changes if c["path"] in repeated]
    try:
        try:
            compare_observations(second, first, ctx.options)
        except Mismatch:
            if not ctx.python_changes:
                raise
            # the second call saw the first call's per-call state; it is undone now: a third call starts where the
            # first did (a lazy initialization settled), so forward is deterministic to the harness if they agree
            compare_observations(ctx.eager_on(ctx.case.args, ctx.case.kwargs), first, ctx.options)
    except Mismatch as exc:
        ctx.usable.discard("eager")
        state = "".join(f"\nforward changes Python attribute {python_change_text(c)} on every call, and the "
                        f"second call saw the first call's value" for c in ctx.python_changes[:3])
        raise StageFailure(
            "eager forward is nondeterministic: two eager runs on the same inputs (same seed) disagree, so export "
            f"cannot be blamed for differences. Make forward deterministic (eval(), fixed dropout) or loosen "
            f"rtol/atol.{state}\n{exc}",
            kind="nondeterministic", errors=exc.errors,
        )
    if ctx.python_changes:
        more = len(ctx.python_changes) - 1
        return {"message": f"forward changes the module's Python state: {python_change_text(ctx.python_changes[0])}"
                           f"{f' and {more} more' if more else ''} (see compare)"}
    return {}


STAGE = Stage("eager", run)
