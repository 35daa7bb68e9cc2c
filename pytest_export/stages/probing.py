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
