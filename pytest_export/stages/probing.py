"""Run a program on one input and say what happened: accepted (with its result), refused by a guard, or raised."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..compare import Mismatch
from ..runner import Context, Observation, compare_observations, describe_exception

ACCEPTED, REFUSED, RAISED = "accepted", "refused", "raised"

_REFUSALS = ("Guard failed", "Expected input", "to be equal to", "to be <=", "to be >=", "is outside of",
             "Dynamic shape constraint violation", "input_constraints")


@dataclasses.dataclass
class Verdict:
    status: str
    message: str = ""
    observation: Observation | None = None


def run_program(ctx: Context, ep: Any, args: tuple, kwargs: dict) -> Verdict:
    try:
        return Verdict(ACCEPTED, observation=ctx.program_on(ep, args, kwargs))
    except Exception as exc:  # noqa: BLE001 - what the program does with an input is the finding
        text = describe_exception(exc, 600)
        refused = isinstance(exc, (AssertionError, RuntimeError, ValueError)) and any(r in str(exc) for r in _REFUSALS)
        return Verdict(REFUSED if refused else RAISED, text.splitlines()[0] if refused else text)


def run_eager(ctx: Context, args: tuple, kwargs: dict) -> Verdict:
    try:
        return Verdict(ACCEPTED, observation=ctx.eager_on(args, kwargs))
    except Exception as exc:  # noqa: BLE001
        return Verdict(RAISED, describe_exception(exc, 600))


def mismatch(ctx: Context, got: Observation, want: Observation) -> str | None:
    try:
        compare_observations(got, want, ctx.options)
    except Mismatch as exc:
        return str(exc)
    return None


def has_small_size(ctx: Context, model: Any, values: dict[str, int]) -> bool:
    """Whether a size assignment puts a declared-dynamic axis at 0 or 1 (where export's 0/1 specialization bites,
    and where many eager ops give up too)."""
    sizes = model.sizes(values)
    return any(not isinstance(model.shapes[flat][dim], int) and size <= 1
               for flat, axes in sizes.items() for dim, size in axes.items() if dim is not None)


def in_range_problem(ctx: Context, got: Verdict, args: tuple, kwargs: dict, at: str = "",
                     wrong: str | None = None, small: bool = False) -> str | None:
    """What is wrong with the program's verdict on an in-range input: refused or raised, eager raising
    (the declaration promises more than the model supports), or an output unlike eager's; None if right.

    ``small``: the input puts a dynamic axis at size 0 or 1. Where eager itself raises there, it is not the
    program's fault: recorded in ``ctx.eager_rejects``, no failure (issue #18).
    """
    where = f" {at}" if at else ""
    want: Verdict | None = None
    if got.status != ACCEPTED:
        if small:
            want = run_eager(ctx, args, kwargs)
            if want.status != ACCEPTED:
                _eager_rejects(ctx, where, want)
                return None
        what = "refused" if got.status == REFUSED else "raised on"
        return f"the program {what} in-range sizes{where}: {got.message}"
    want = run_eager(ctx, args, kwargs)
    if want.status != ACCEPTED:
        if small:
            _eager_rejects(ctx, where, want)
            return None
        return (f"eager raised on in-range sizes{where} (the declared range is wider than the model supports, "
                f"or the case needs an input_builder): {want.message}")
    bad = mismatch(ctx, got.observation, want.observation)
    if bad:
        return f"{wrong or f'accepted but wrong at in-range sizes{where}'}:\n{bad}"
    return None


def _eager_rejects(ctx: Context, where: str, want: Verdict) -> None:
    note = f"eager itself raises at{where or ' these sizes'} ({want.message.splitlines()[0][:200]}): not the program's fault"
    if note not in ctx.eager_rejects:
        ctx.eager_rejects.append(note)
