"""A probe's inputs at chosen sizes, and how it runs (issue #23): ``fake`` (shapes, guards and dtypes at any size,
nothing allocated) or ``numeric`` (real tensors, values compared), as its ``cost.Plan`` says; and what the
program or eager did with it: accepted (with its result), refused by a guard, or raised.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from ..audit import FuzzModel
from ..compare import Mismatch
from ..context import Context
from ..explain.frames import at_text
from ..observe import Observation, compare_observations, shape_mismatch
from ..results import HarnessError
from ..timeout import Expired, time_limit
from ..util import describe_exception, resident_is_live, trim_heap
from .cost import FAKE, NUMERIC, Plan
from .strategies import BuilderError, build_inputs, fake_inputs

ACCEPTED, REFUSED, RAISED = "accepted", "refused", "raised"
LIVE_AFTER = 16 * 2**20  # a numeric probe predicted this large (or measured) runs with resident what is alive (#43)
TRIM_AFTER = 128 * 2**20  # and this large, it hands the C heap's free pages back after it (#31)
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

        from .cost import format_bytes, input_bytes

        case, cap = self.ctx.case, self.ctx.calibration.costs().max_memory
        first = describe_exception(exc, 200).splitlines()[0]
        need = input_bytes(fake_inputs(mode, self.model, self.values, case.args, case.kwargs))
        if need > cap:
            raise InputsUnknown(f"the input_builder cannot run under fake tensors ({first}) and its real inputs "
                                f"would need ~{format_bytes(need)} > max_memory {format_bytes(cap)}")
        built = build_inputs(self.model, self.values, case.args, case.kwargs, self.seed, self.builder)
        return pytree.tree_map_only(torch.Tensor, mode.from_tensor, built)


def plan_for(ctx: Context, sized: Sized) -> Plan:
    """How ``sized`` runs, decided once: its fake eager run predicts its cost (``cost.Costs.plan``); where fake
    tensors cannot run the model, the example's measured cost scaled by the input size stands in."""
    if sized.plan is not None:
        return sized.plan
    costs = ctx.calibration.costs()
    with costs.probing():
        return _plan(ctx, sized, costs)


def measure_probe(ctx: Context, sized: Sized, costs: Any) -> tuple[Any, float, bool]:
    """The probe's fake eager run, counted (its ``cost.Measure``, None where not countable), its input bytes over
    the example's, and whether fake tensors can run it; once per probe."""
    if sized._measured is not None:
        return sized._measured
    from .cost import input_bytes

    measured, fake_ok = None, costs.fake_problem is None
    try:
        inputs = sized.fake()
    except InputsUnknown as exc:  # no size to scale by: unchecked, saying why (issue #32), never an infinite ratio
        sized.unknown = str(exc)
        sized._measured = (None, None, fake_ok)
        return sized._measured
    if fake_ok:
        try:
            obs, measured = ctx.calibration.eager_counted(*inputs)
            sized.eager_fake = Verdict(ACCEPTED, observation=obs, mode=FAKE)
        except HarnessError:
            raise
        except Exception as exc:  # noqa: BLE001 - eager's own verdict, or a limit of fake tensors
            # a limit of fake tensors (data-dependent code, no fake kernel): numerics decide, if affordable; any
            # other raise is eager's verdict on these sizes, as exact as a real run's
            fake_ok = not fake_limit(exc)
            sized.eager_fake = Verdict(RAISED, describe_exception(exc, 600) + at_text(exc), mode=FAKE)
    ratio = 1.0
    if costs.example is not None and costs.example.inputs:
        ratio = (measured.inputs if measured is not None else input_bytes(inputs)) / costs.example.inputs
    sized._measured = (measured, ratio, fake_ok)
    return sized._measured


def _bounded(sized: Sized, costs: Any) -> Plan | None:
    """A numeric plan without a fake run of its own, where a probe already counted is at least as large in every
    dim and its predicted cost fits now: cost grows with size, so it bounds this one's (issue #31: planning each
    probe with a counted fake run cost more than running small models' probes). None: count it."""
    if sized.override or sized.given is not None or not sized.values or costs.fake_problem:
        return None
    if not costs.known and sized.model is not None and costs.example is not None:
        costs.known.append((sized.model.example_values(), *costs.predict(costs.example, 1.0)))
    if costs.stopped(sized.values):
        return None
    bounds = [(seconds, need) for values, seconds, need in costs.known
              if values.keys() >= sized.values.keys() and all(x <= values[k] for k, x in sized.values.items())]
    if not bounds:
        return None
    plan = costs.decide(*min(bounds), fake_ok=True, budgeted=sized.budgeted, edge=sized.edge)
    return plan if plan.mode == NUMERIC else None


def _plan(ctx: Context, sized: Sized, costs: Any) -> Plan:
    plan = _bounded(sized, costs)
    if plan is not None:
        sized.plan = plan
        costs.charge(plan, probe=sized)
        if sized.in_range:
            _record(costs, sized, plan)
        return plan
    measured, ratio, fake_ok = measure_probe(ctx, sized, costs)
    if ratio is None:
        sized.plan = plan = Plan(None, why=f"not checked: {sized.unknown}")
        if sized.in_range:
            costs.record(sized.dims, None, plan.why)
        return plan
    plan, bound = costs.plan(measured, ratio, fake_ok, sized.budgeted, edge=sized.edge), True
    if plan.mode == NUMERIC and measured is not None:  # what runs real is counted on the program's side too (#43)
        both = ctx.calibration.program_counted(*sized.fake(), measured)
        bound = both is not None  # a size the program refuses bounds no other; one in range not counted is said
        costs.program_problem = costs.program_problem or (None if bound or not sized.in_range else
                                                          f"at {sized.label}: {ctx.calibration.program_error}")
        if bound and both is not measured:
            measured = both
            plan = costs.plan(measured, ratio, fake_ok, sized.budgeted, edge=sized.edge)
    if bound and measured is not None and not sized.override and sized.given is None and sized.values:
        costs.known.append((dict(sized.values), *costs.predict(measured, ratio)))
    sized.plan = plan
    if plan.mode == NUMERIC and costs.stopped(sized.values):  # the guard refused a probe no larger (issue #43)
        sized.plan = plan = Plan(FAKE if fake_ok else None, plan.seconds, plan.bytes, costs.stopped(sized.values))
    costs.charge(plan, measured.ops if measured is not None else 0, sized)
    if not fake_ok and plan.mode is None:
        first = (sized.eager_fake.message.splitlines() or [""])[0][:200] if sized.eager_fake else costs.fake_problem
        plan.why = f"not checked: fake tensors cannot run it ({first}) and numerics do not fit ({plan.why})"
    if sized.in_range:  # an unchecked one too: the dim's coverage line says why numerics stopped (issue #32)
        _record(costs, sized, plan)
    return plan


def _record(costs: Any, sized: Sized, plan: Plan) -> None:
    """An in-range probe's coverage, and the report's ``ranges.largest``: the numeric one predicted to need most."""
    costs.record(sized.dims, plan.mode, plan.why)
    if plan.mode == NUMERIC and plan.bytes > costs.largest.get("predicted_bytes", 0):
        costs.largest = {"sizes": {n: size for n, (size, _, _) in sized.dims.items()}, "predicted_bytes": plan.bytes}


def plan_edges(ctx: Context, edges: list[Sized]) -> None:
    """Plan the edges (issue #31: every declared dim at its min and at its max, the others at their min) before
    any other probe: each is counted fake, a default budget is raised to afford those that fit the memory cap
    (``cost.Costs.size_for_edges``), and each runs numeric where the memory cap and the budget allow."""
    costs = ctx.calibration.costs()
    with costs.probing():
        total = 0.0
        for sized in edges:
            sized.edge = True
            measured, ratio, fake_ok = measure_probe(ctx, sized, costs)
            seconds, need = costs.predict(measured, ratio) if ratio is not None else (0.0, costs.max_memory + 1)
            if need <= costs.max_memory:
                total += seconds
        costs.size_for_edges(total)
        for sized in edges:
            plan_for(ctx, sized)


def _numeric(ctx: Context, sized: Sized, call: Any, instead: Any) -> Any:
    """A numeric run under a time limit far above its prediction: a model that makes it far costlier is stopped
    as an ``error`` that names the probe, never left to run unbounded. A case with ops the count cannot see into
    runs it under the memory guard too (``guarded``); a probe the guard refuses runs ``instead()`` (fake)."""
    plan = sized.plan
    costs = ctx.calibration.costs()
    limit = costs.probe_timeout(plan)
    watch = _watched(costs, sized)
    live = resident_is_live() if plan.bytes >= LIVE_AFTER or watch is not None else contextlib.nullcontext()
    try:
        with time_limit(limit, error=Expired), live:
            if not costs.opaque:
                return call()
            return guarded(ctx, sized, call, instead)
    except Expired:
        raise HarnessError(f"the numeric probe at {sized.label or 'these sizes'} ran past {limit:g} s (predicted "
                           f"~{plan.seconds:.3g} s for eager and program together): the model is far costlier at "
                           "these sizes than its fake run predicts; lower --export-max-memory or the declared range")
    finally:
        if watch is not None:
            from .calibration import resident_high

            watch["measured_bytes"] = max(watch.get("measured_bytes", 0), resident_high() - sized.rss_base)
        if plan.bytes >= TRIM_AFTER:  # its freed heap goes back, else the next probe allocates beside it (#31)
            trim_heap()


def guarded(ctx: Context, sized: Sized, call: Any, instead: Any) -> Verdict:
    """``call()`` under the memory guard (``opaque.address_guard``: the process may grow by the memory cap and a
    slack, no more; issue #43). An allocation it refuses stops numerics at these sizes: the coverage says so, a
    probe no smaller is planned fake, and this one runs ``instead()`` (fake), never a crash or a pass."""
    from .cost import format_bytes
    from .opaque import GUARD_SLACK, address_guard, refused

    costs = ctx.calibration.costs()
    with address_guard(costs.max_memory) as limit:
        got = call()
    if limit is None or got.status not in (RAISED, REFUSED) or not refused(got.message):
        return got
    trim_heap()  # what the refused forward made before it failed goes back
    ops = ", ".join(sorted(costs.opaque))
    why = (f"stopped by the memory guard: an allocation past max_memory {format_bytes(costs.max_memory)} "
           f"(+{format_bytes(GUARD_SLACK)} slack) was refused, predicted ~{format_bytes(sized.plan.bytes)}; "
           f"the ops the count cannot see into ({ops}) take more here than their calibration says")
    fake = costs.fake_problem is None and sized.eager_fake is not None
    costs.stop(sized.values, sized.dims if sized.in_range else {}, why, fake, sized.label)
    sized.plan = Plan(FAKE if fake else None, sized.plan.seconds, sized.plan.bytes, why)
    return instead()


def _watched(costs: Any, sized: Sized) -> dict | None:
    """``ranges.largest`` where ``sized`` is that probe (the in-range numeric one predicted to need the most memory
    so far), its resident high-water mark reset: its measured growth goes beside its prediction (issue #43). The
    base is read before its first call, so its inputs, eager's outputs held and the program's peak all count."""
    from .calibration import resident_mark

    top = costs.largest
    if not sized.in_range or top.get("predicted_bytes") != sized.plan.bytes or top.get("sizes") != {
            n: size for n, (size, _, _) in sized.dims.items()}:
        return None
    base = resident_mark()
    if base is None:
        return None
    sized.rss_base = base if sized.rss_base is None else sized.rss_base
    return top


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


def _program_verdict(exc: Exception, mode: str) -> Verdict:
    text = describe_exception(exc, 600)
    refused = isinstance(exc, (AssertionError, RuntimeError, ValueError)) and any(r in str(exc) for r in _REFUSALS)
    return Verdict(REFUSED if refused else RAISED, text.splitlines()[0] if refused else text, mode=mode)


def run_program(ctx: Context, ep: Any, inputs: Sized | tuple, kwargs: dict | None = None) -> Verdict:
    """What ``ep`` does with the inputs: real ``(args, kwargs)``, or a ``Sized`` probe run as its plan says."""
    if not isinstance(inputs, Sized):
        return _real_program(ctx, ep, inputs, kwargs or {})
    with ctx.calibration.costs().probing():
        return _sized_program(ctx, ep, inputs)


def _sized_program(ctx: Context, ep: Any, inputs: Sized) -> Verdict:
    plan = plan_for(ctx, inputs)
    if plan.mode == NUMERIC:
        return _numeric(ctx, inputs, lambda: _real_program(ctx, ep, *inputs.real()),
                        lambda: _sized_program(ctx, ep, inputs))
    if plan.mode is None:
        return Verdict(UNCHECKED, plan.why, mode="")
    try:
        return Verdict(ACCEPTED, observation=ctx.program_on(ep, *inputs.fake(), fake=True), mode=FAKE)
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - a guard's refusal is exact under fake tensors
        if fake_limit(exc):
            first = describe_exception(exc, 200).splitlines()[0]
            return Verdict(UNCHECKED, f"not checked: fake tensors cannot run the program here ({first}) and "
                           f"numerics do not fit ({plan.why})", mode="")
        return _program_verdict(exc, FAKE)


def _real_program(ctx: Context, ep: Any, args: tuple, kwargs: dict) -> Verdict:
    try:
        return Verdict(ACCEPTED, observation=ctx.program_on(ep, args, kwargs))
    except HarnessError:
        raise  # the harness could not run the probe: `error`, never a refusal blamed on the program
    except Exception as exc:  # noqa: BLE001 - what the program does with an input is the finding
        return _program_verdict(exc, NUMERIC)


def run_eager(ctx: Context, inputs: Sized | tuple, kwargs: dict | None = None) -> Verdict:
    if isinstance(inputs, Sized):
        with ctx.calibration.costs().probing():
            plan = plan_for(ctx, inputs)
            if plan.mode == NUMERIC:
                return _numeric(ctx, inputs, lambda: _real_eager(ctx, *inputs.real()), lambda: run_eager(ctx, inputs))
            if plan.mode is None:
                return Verdict(UNCHECKED, plan.why, mode="")
            return inputs.eager_fake
    return _real_eager(ctx, inputs, kwargs or {})


def _real_eager(ctx: Context, args: tuple, kwargs: dict) -> Verdict:
    try:
        return Verdict(ACCEPTED, observation=ctx.eager_on(args, kwargs))
    except HarnessError:
        raise
    except Exception as exc:  # noqa: BLE001 - what eager does with an input is the finding
        return Verdict(RAISED, describe_exception(exc, 600) + at_text(exc))  # the model's line (#26)


def mismatch(ctx: Context, got: Observation, want: Observation, fake: bool = False) -> str | None:
    """How ``got`` differs from ``want``: values where both ran numeric, structure, shapes and dtypes where
    either ran fake."""
    if fake:
        return shape_mismatch(got.outputs, want.outputs)
    try:
        compare_observations(got, want, ctx.options)
    except Mismatch as exc:
        return str(exc)
    return None



__all__ = ["ACCEPTED", "REFUSED", "RAISED", "UNCHECKED", "FAKE", "NUMERIC", "Verdict", "Sized", "plan_for", "plan_edges",
           "measure_probe", "fake_limit", "run_program", "run_eager", "mismatch"]
