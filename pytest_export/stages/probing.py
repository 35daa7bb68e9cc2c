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


def in_range_problem(ctx: Context, got: Verdict, args: tuple, kwargs: dict, at: str = "",
                     wrong: str | None = None) -> str | None:
    """What is wrong with the program's verdict on an in-range input: refused or raised, eager raising
    (the declaration promises more than the model supports), or an output unlike eager's; None if right."""
    where = f" {at}" if at else ""
    if got.status != ACCEPTED:
        what = "refused" if got.status == REFUSED else "raised on"
        return f"the program {what} in-range sizes{where}: {got.message}"
    want = run_eager(ctx, args, kwargs)
    if want.status != ACCEPTED:
        return (f"eager raised on in-range sizes{where} (the declared range is wider than the model supports, "
                f"or the case needs an input_builder): {want.message}")
    bad = mismatch(ctx, got.observation, want.observation)
    if bad:
        return f"{wrong or f'accepted but wrong at in-range sizes{where}'}:\n{bad}"
    return None
