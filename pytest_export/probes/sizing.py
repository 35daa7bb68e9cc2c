"""How a probe runs (issue #23): planned ``fake`` (shapes, guards and dtypes at any size, nothing allocated) or
``numeric`` (real tensors, values compared), as its ``cost.Plan`` says, and charged to the budget in the order the
probes are planned (issue #50: only what runs is charged); then run, under a time limit and where needed the memory
guard, with what the program or eager did with it: accepted (with its result), refused by a guard, or raised. A
probe's inputs (``Sized``) and the verdicts' vocabulary live in ``sized``.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from ..context import Context
from ..memory.cost import Plan
from ..results import HarnessError
from ..torchside.compare import Mismatch, near_noise
from ..torchside.frames import at_text
from ..torchside.modstate import state_tensors
from ..torchside.observe import Observation, compare_observations, float64_observe, shape_mismatch
from ..torchside.timeout import Expired, time_limit
from ..util import describe_exception, resident_is_live, trim_heap
from .sized import (ACCEPTED, FAKE, NUMERIC, RAISED, REFUSED, UNCHECKED, InputsUnknown, Sized, Verdict, fake_limit,
                    program_verdict, refusal)

LIVE_AFTER = 16 * 2**20  # a numeric probe predicted this large (or measured) runs with resident what is alive (#43)
TRIM_AFTER = 128 * 2**20  # and this large, it hands the C heap's free pages back after it (#31)



def plan_for(ctx: Context, sized: Sized) -> Plan:
    """How ``sized`` runs, decided once: its fake eager run predicts its cost (``cost.Costs.plan``); where fake
    tensors cannot run the model, the example's measured cost scaled by the input size stands in. The plan is
    charged to the budget here, at the mode it runs in (issue #50): a probe is paid for once it is planned to run."""
    if sized.plan is not None:
        return sized.plan
    costs = ctx.calibration.costs()
    with costs.probing():
        plan, measured = _decide(ctx, sized, costs)
        sized.plan = plan
        _commit(costs, sized, plan, measured)
        return plan


def quote(ctx: Context, sized: Sized) -> Plan:
    """How ``sized`` would run if it were planned now, without planning it: nothing is charged to the budget, nothing
    recorded in the coverage, and ``sized`` keeps no plan (issue #50: the search for the largest affordable size
    had charged the budget for every size it asked about, and starved the edges). What its fake count taught
    about costs is kept (``Costs.known``): a fact about the model, not a spending."""
    if sized.plan is not None:
        return sized.plan
    costs = ctx.calibration.costs()
    with costs.probing():
        return _decide(ctx, sized, costs)[0]


def measure_probe(ctx: Context, sized: Sized, costs: Any) -> tuple[Any, float, bool]:
    """The probe's fake eager run, counted (its ``cost.Measure``, None where not countable), its input bytes over
    the example's, and whether fake tensors can run it; once per probe."""
    if sized._measured is not None:
        return sized._measured
    from ..memory.cost import input_bytes

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
    probe with a counted fake run cost more than running small models' probes). None: count it.

    Its memory is that bound. Its time is interpolated (issue #50: the bound alone had predicted fuzz's small draws
    at up to 8 times their wall time): the bound's cost beyond its operators' fixed overhead, scaled by this probe's
    input elements along the dynamic axes over the bound's (``elements``), and held between the bound and the
    largest cost counted at sizes no larger in any dim than this probe's."""
    if sized.override or sized.given is not None or not sized.values or costs.fake_problem:
        return None
    if not costs.known and sized.model is not None and costs.example is not None:
        costs.known.append((sized.model.example_values(), *costs.predict(costs.example, 1.0)))
    if costs.stopped(sized.values):
        return None
    mine = sized.values
    above = [(seconds, need, values) for values, seconds, need in costs.known
             if values.keys() >= mine.keys() and all(x <= values[k] for k, x in mine.items())]
    if not above:
        return None
    bound, _, at = min(above, key=lambda a: a[0])
    below = [seconds for values, seconds, _ in costs.known
             if values.keys() <= mine.keys() and all(x <= mine[k] for k, x in values.items())]
    seconds = bound
    if sized.model is not None and costs.example is not None:
        fixed = min(bound, costs.fixed_seconds())
        scaled = fixed + (bound - fixed) * min(1.0, elements(sized.model, mine) / max(1, elements(sized.model, at)))
        seconds = min(bound, max(scaled, *below, 0.0))
    plan = costs.decide(seconds, min(a[1] for a in above), fake_ok=True, budgeted=sized.budgeted, edge=sized.edge)
    return plan if plan.mode == NUMERIC else None


def elements(model: Any, values: dict[str, int]) -> int:
    """The inputs' elements at ``values`` counted along their dynamic axes only (each input's product of its
    dynamic sizes, added up): what a forward's cost grows with as the sizes move, where an input of large static
    axes would otherwise outweigh the one the work grows with (a speech model's features beside its token ids)."""
    sizes = model.sizes(values)
    return sum(math.prod(max(1, sizes[flat][ax]) for ax, e in axes.items() if not isinstance(e, int))
               for flat, axes in model.shapes.items() if any(not isinstance(e, int) for e in axes.values()))


def _decide(ctx: Context, sized: Sized, costs: Any) -> tuple[Plan, Any]:
    """(the plan of ``sized`` at what is left of the budget now, its counted ``Measure`` or None), without charging."""
    plan = _bounded(sized, costs)
    if plan is not None:
        return plan, None
    measured, ratio, fake_ok = measure_probe(ctx, sized, costs)
    if ratio is None:
        return Plan(None, why=f"not checked: {sized.unknown}"), None
    plan, bound = costs.plan(measured, ratio, fake_ok, sized.budgeted, edge=sized.edge), True
    if plan.mode == NUMERIC and measured is not None:  # what runs real is counted on the program's side too (#43)
        both = ctx.calibration.program_counted(*sized.fake(), measured)
        bound = both is not None  # a size the program refuses bounds no other; one in range not counted is said
        costs.program_problem = costs.program_problem or (None if bound or not sized.in_range else
                                                          f"at {sized.label}: {ctx.calibration.program_error}")
        if bound and both is not measured:
            measured = both
            plan = costs.plan(measured, ratio, fake_ok, sized.budgeted, edge=sized.edge)
        elif not bound and refusal(ctx.calibration.program_error):
            # a guard refuses it (exact under fake tensors): the program computes nothing, and eager runs only where
            # the size is in range (issue #50: out-of-range probes had been charged two forwards they never ran)
            eager = plan.seconds / 2 if sized.in_range else 0.0
            plan = costs.decide(eager + costs.input_seconds(measured), plan.bytes, fake_ok, sized.budgeted, sized.edge)
        sized._measured = (measured, ratio, fake_ok)  # the program's count too, for whoever asks again
    if bound and measured is not None and not sized.override and sized.given is None and sized.values:
        known = (dict(sized.values), *costs.predict(measured, ratio))
        if known not in costs.known:
            costs.known.append(known)
    if plan.mode == NUMERIC and costs.stopped(sized.values):  # the guard refused a probe no larger (issue #43)
        plan = Plan(FAKE if fake_ok else None, plan.seconds, plan.bytes, costs.stopped(sized.values))
    if not fake_ok and plan.mode is None:
        first = (sized.eager_fake.message.splitlines() or [""])[0][:200] if sized.eager_fake else costs.fake_problem
        plan.why = f"not checked: fake tensors cannot run it ({first}) and numerics do not fit ({plan.why})"
    return plan, measured


def _commit(costs: Any, sized: Sized, plan: Plan, measured: Any) -> None:
    """Charge a planned probe (what was set aside for its shape check goes back) and record its coverage."""
    if plan.mode is not None:  # a probe that cannot run at all costs nothing
        costs.charge(plan, measured.ops if measured is not None else 0, sized)
    else:
        costs.release(sized)
    if sized.in_range:  # an unchecked one too: the dim's coverage line says why numerics stopped (issue #32)
        _record(costs, sized, plan)


def _record(costs: Any, sized: Sized, plan: Plan) -> None:
    """An in-range probe's coverage, and the report's ``ranges.largest``: the numeric one predicted to need most."""
    costs.record(sized.dims, plan.mode, plan.why)
    if plan.mode == NUMERIC and plan.bytes > costs.largest.get("predicted_bytes", 0):
        costs.largest = {"sizes": {n: size for n, (size, _, _) in sized.dims.items()}, "predicted_bytes": plan.bytes}


def plan_edges(ctx: Context, edges: list[Sized]) -> None:
    """Plan the edges (issue #31: every declared dim at its min and at its max, the others at their min) before
    any other probe, and before anything is set aside for the other probes' shape checks (issue #50: a later probe
    never takes an edge's place): each is counted fake, a default budget is raised to afford those that fit the
    memory cap (``cost.Costs.size_for_edges``), and each runs numeric where the memory cap and the budget allow,
    the cheapest first. Where the budget left one by shape only, ``Costs.edges_short`` says which, and
    ``Costs.edges_budget`` the budget that would have run them all."""
    costs = ctx.calibration.costs()
    with costs.probing():
        for sized in edges:
            sized.edge = True
        start = costs.used() + costs.reserved
        total = sum(plan.seconds for plan in (quote(ctx, sized) for sized in edges) if plan.bytes <= costs.max_memory)
        costs.size_for_edges(total)
        costs.edges_budget = start + total
        for sized, planned in plan_tier(ctx, edges):
            if planned.mode != NUMERIC and planned.bytes <= costs.max_memory and "budget" in planned.why:
                costs.edges_short.append((sized.label, planned.why))


def plan_tier(ctx: Context, probes: list[Sized]) -> list[tuple[Sized, Plan]]:
    """Plan ``probes`` (one tier of the order: the edges, then each dim's min and max with the others at the
    example, the corners, the rest) before any later one, the cheapest first (issue #50); (probe, plan) each, in
    the order planned."""
    costs = ctx.calibration.costs()
    with costs.probing():
        quoted = sorted(range(len(probes)), key=lambda i: (quote(ctx, probes[i]).seconds, i))
        return [(probes[i], plan_for(ctx, probes[i])) for i in quoted]


def _numeric(ctx: Context, sized: Sized, call: Any, instead: Any) -> Any:
    """A numeric run under a time limit far above its prediction, in CPU time (``timeout``: the same on an idle and a
    loaded machine): a model that makes it far costlier than counted is stopped there and checked by shape instead
    (``instead()``, fake), and the coverage says so (issue #51: it had been an ``error`` that a loaded runner
    produced and an idle one did not). A case with ops the count cannot see into runs it under the memory guard too
    (``guarded``); a probe the guard refuses runs ``instead()`` as well."""
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
    except Expired as exc:
        spent = (f"waited {limit:g} s on the wall clock without working" if " waiting" in str(exc) else
                 f"used {limit:g} s of CPU time")
        why = (f"stopped by its time limit: the numeric run {spent}, predicted ~{plan.seconds:.3g} s for eager and "
               "program together; the model is far costlier at these sizes than counted")
        fake = costs.fake_problem is None and sized.eager_fake is not None
        costs.stop(sized.values, sized.dims if sized.in_range else {}, why, fake, sized.label)
        sized.plan = Plan(FAKE if fake else None, plan.seconds, plan.bytes, why)
    finally:
        if watch is not None:
            from ..memory.calibration import resident_high

            watch["measured_bytes"] = max(watch.get("measured_bytes", 0), resident_high() - sized.rss_base)
        if plan.bytes >= TRIM_AFTER:  # its freed heap goes back, else the next probe allocates beside it (#31)
            trim_heap()
    return instead()


def guarded(ctx: Context, sized: Sized, call: Any, instead: Any) -> Verdict:
    """``call()`` under the memory guard (``opaque.address_guard``: the process may grow by the memory cap and a
    slack, no more; issue #43). An allocation it refuses stops numerics at these sizes: the coverage says so, a
    probe no smaller is planned fake, and this one runs ``instead()`` (fake), never a crash or a pass."""
    from ..memory.cost import format_bytes
    from ..memory.opaque import GUARD_SLACK, address_guard, refused

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
    from ..memory.calibration import resident_mark

    top = costs.largest
    if not sized.in_range or top.get("predicted_bytes") != sized.plan.bytes or top.get("sizes") != {
            n: size for n, (size, _, _) in sized.dims.items()}:
        return None
    base = resident_mark()
    if base is None:
        return None
    sized.rss_base = base if sized.rss_base is None else sized.rss_base
    return top


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
        return program_verdict(exc, FAKE)


def _real_program(ctx: Context, ep: Any, args: tuple, kwargs: dict) -> Verdict:
    try:
        return Verdict(ACCEPTED, observation=ctx.program_on(ep, args, kwargs))
    except HarnessError:
        raise  # the harness could not run the probe: `error`, never a refusal blamed on the program
    except Exception as exc:  # noqa: BLE001 - what the program does with an input is the finding
        return program_verdict(exc, NUMERIC)


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


def mismatch(ctx: Context, got: Observation, want: Observation, fake: bool = False,
             inputs: Sized | tuple | None = None) -> str | None:
    """How ``got`` differs from ``want``: values where both ran numeric, structure, shapes and dtypes where
    either ran fake. ``inputs`` (a probe, or ``(args, kwargs)``): what eager ran on, for measuring its own noise
    where a float output misses the tolerances by little (``compare.near_noise``, issue #54)."""
    if fake:
        return shape_mismatch(got.outputs, want.outputs)
    try:
        compare_observations(got, want, ctx.options)
    except Mismatch as exc:
        if inputs is None or not near_noise(exc.errors):
            return str(exc)
        try:
            compare_observations(got, want, ctx.options, reference=float64_eager(ctx, inputs))
        except Mismatch as again:
            return str(again)
    return None


def float64_eager(ctx: Context, inputs: Sized | tuple) -> Observation | str:
    """Eager in float64 on a probe's inputs (the example's once per case), or why it does not run: it holds a
    float64 copy of the float weights and about twice a float32 run's memory, so it runs only where the probe ran
    numeric and that fits the memory cap."""
    if not isinstance(inputs, Sized) or inputs.plan is None:
        return ctx.float64_reference() if not isinstance(inputs, Sized) and inputs[0] is ctx.case.args else (
            _float64_on(ctx, *inputs) if not isinstance(inputs, Sized) else "the probe was not planned to run numeric")
    cap = ctx.calibration.costs().max_memory
    weights = sum(t.numel() * 8 for t in state_tensors(ctx.case.module) if t.is_floating_point())
    need = 2 * inputs.plan.bytes + weights
    if inputs.plan.mode != NUMERIC or need > cap:
        return (f"float64 eager would need about {need / 2**30:.2g} GiB of the {cap / 2**30:.2g} GiB memory cap"
                if inputs.plan.mode == NUMERIC else "the probe ran fake")
    return _float64_on(ctx, *inputs.real(), limit=ctx.calibration.costs().probe_timeout(inputs.plan))


def _float64_on(ctx: Context, args: tuple, kwargs: dict, limit: float | None = None) -> Observation | str:
    try:
        with time_limit(limit, error=Expired):  # a probe's own limit, in CPU time; the case's encloses it
            return float64_observe(ctx.case.module, ctx.case.module, args, kwargs)
    except HarnessError:
        raise
    except Expired:
        return f"float64 eager stopped by the probe's time limit ({limit:g} s of CPU time)"
    except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 has no such reference
        return f"float64 eager raised {describe_exception(exc, 200)}"


__all__ = ["ACCEPTED", "REFUSED", "RAISED", "UNCHECKED", "FAKE", "NUMERIC", "Verdict", "Sized", "plan_for", "plan_edges", "plan_tier", "quote",
           "measure_probe", "fake_limit", "run_program", "run_eager", "mismatch", "float64_eager"]
