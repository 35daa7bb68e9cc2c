"""A probe's inputs at chosen sizes (``Sized``: fake on demand at any size, real where its plan runs numeric) and
the vocabulary of what a program or eager did with them (``Verdict``: accepted, refused by a guard, raised, or
unchecked); whether an error is a limit of fake tensors or a guard's refusal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..audit import FuzzModel
from ..context import Context
from ..memory.cost import FAKE, NUMERIC, Plan
from ..torchside.observe import Observation
from ..util import describe_exception
from .strategies import BuilderError, build_inputs, fake_inputs

ACCEPTED, REFUSED, RAISED = "accepted", "refused", "raised"
UNCHECKED = "unchecked"  # neither fake nor numeric could run it (``Verdict.message`` says why)

_REFUSALS = ("Guard failed", "Expected input", "to be equal to", "to be <=", "to be >=", "is outside of",
             "Dynamic shape constraint violation", "input_constraints")


class InputsUnknown(Exception):
    """A probe's inputs cannot be made, fake or real: it is ``unchecked`` with this reason (never a cost guessed)."""


@dataclasses.dataclass
class Verdict:
    status: str
    message: str = ""
    observation: Observation | None = None
    mode: str = NUMERIC  # how it ran: ``fake`` (shapes, guards, dtypes) or ``numeric`` (values too)


class Sized:
    """One probe's inputs, made on demand: fake (any size, nothing allocated) and, where its ``Plan`` says the
    probe is affordable, real. ``dims``: the declared dims it sets, name -> (size, min, max), for coverage;
    ``in_range``: whether those sizes are inside the promise."""

    def __init__(self, ctx: Context, model: FuzzModel | None, values: dict[str, int], *, label: str = "",
                 override: dict | None = None, given: tuple[tuple, dict] | None = None, builder: Any = None,
                 seed: int = 0, in_range: bool = True):
        self.ctx, self.model, self.values, self.label = ctx, model, values, label
        self.override, self.given, self.builder, self.seed, self.in_range = override or {}, given, builder, seed, in_range
        self.plan: Plan | None = None
        self.budgeted = True  # whether the case's time budget, besides the memory cap, decides numeric
        self.edge = False  # one of the edges: planned first, may take all that is left of the budget (#31)
        self.reserved = 0.0  # nominal seconds the budget set aside for it (``cost.Costs.reserve``)
        self._measured: tuple[Any, float | None, bool] | None = None  # (its fake count, input ratio, fake runs it)
        self.unknown = ""  # why its inputs cannot be made (``InputsUnknown``), where they cannot
        self.eager_fake: Verdict | None = None
        self._real: tuple[tuple, dict] | None = None
        self._fake: tuple[tuple, dict] | None = None
        self.rss_base: int | None = None  # resident bytes before its first numeric call, where it is measured

    @property
    def dims(self) -> dict[str, tuple[int, int, int | None]]:
        if self.model is None or not self.values:
            return {}
        return {n: (self.values[v.symbol], v.lo if not v.zero else 0, None if v.unbounded else v.hi)
                for v in self.model.vars if v.symbol in self.values for n in v.names}

    def real(self) -> tuple[tuple, dict]:
        if self._real is None:
            case = self.ctx.case
            if self.given is not None:
                self._real = self.given
            elif self.builder is not None and not self.override:
                self._real = build_inputs(self.model, self.values, case.args, case.kwargs, self.seed, self.builder)
            else:
                self._real = build_inputs(self.model, self.values, case.args, case.kwargs, self.seed,
                                          override=self.override)
        return self._real

    def release(self) -> None:
        """Drop the real inputs once the probe ran (they are rebuilt, the same, if asked again): the inputs of a
        stage's many probes are never all alive at once (issue #31)."""
        if self.given is None:
            self._real = None

    def fake(self) -> tuple[tuple, dict]:
        if self._fake is None:
            case, mode = self.ctx.case, self.ctx.calibration.fake_mode()
            try:
                self._fake = fake_inputs(mode, self.model, self.values, case.args, case.kwargs, self.override,
                                         self.given, self.builder)
            except Exception as exc:  # noqa: BLE001 - a builder fake tensors cannot run (``.numpy()``): built real
                if self.builder is None or self.override or self.given is not None or isinstance(exc, BuilderError):
                    raise
                self._fake = self._fake_from_real(mode, exc)
        return self._fake

    def _fake_from_real(self, mode: Any, exc: Exception) -> tuple[tuple, dict]:
        """The builder's inputs built for real, outside the fake mode, and converted to fake (issue #32), where
        they fit the memory cap (estimated as the example's inputs at these sizes); ``InputsUnknown`` elsewhere.
        A builder that raises for real too raises its own error."""
        import torch
        import torch.utils._pytree as pytree

        from ..memory.cost import format_bytes, input_bytes

        case, cap = self.ctx.case, self.ctx.calibration.costs().max_memory
        first = describe_exception(exc, 200).splitlines()[0]
        need = input_bytes(fake_inputs(mode, self.model, self.values, case.args, case.kwargs))
        if need > cap:
            raise InputsUnknown(f"the input_builder cannot run under fake tensors ({first}) and its real inputs "
                                f"would need ~{format_bytes(need)} > max_memory {format_bytes(cap)}")
        built = build_inputs(self.model, self.values, case.args, case.kwargs, self.seed, self.builder)
        return pytree.tree_map_only(torch.Tensor, mode.from_tensor, built)


def fake_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is a limit of fake tensors (data-dependent code, an op without a fake kernel), not a
    verdict on the inputs."""
    from torch._subclasses import fake_tensor

    limits = tuple(getattr(fake_tensor, n) for n in ("DataDependentOutputException", "DynamicOutputShapeException",
                                                     "UnsupportedOperatorException", "UnsupportedFakeTensorException")
                   if hasattr(fake_tensor, n))
    name = type(exc).__name__
    return isinstance(exc, limits) or name in ("GuardOnDataDependentSymNode", "DataDependentOutputException") or (
        "FakeTensor" in str(exc) and "Please convert all Tensors" in str(exc))


def refusal(text: str) -> bool:
    """Whether an error's text is a guard's refusal of the inputs (not a limit of fake tensors or a crash)."""
    return bool(text) and any(r in text for r in _REFUSALS)


def program_verdict(exc: Exception, mode: str) -> Verdict:
    text = describe_exception(exc, 600)
    refused = isinstance(exc, (AssertionError, RuntimeError, ValueError)) and refusal(str(exc))
    return Verdict(REFUSED if refused else RAISED, text.splitlines()[0] if refused else text, mode=mode)


__all__ = ["ACCEPTED", "REFUSED", "RAISED", "UNCHECKED", "FAKE", "NUMERIC", "InputsUnknown", "Verdict", "Sized",
           "fake_limit", "refusal", "program_verdict"]
