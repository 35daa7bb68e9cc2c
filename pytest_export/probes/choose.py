"""Probing a program at chosen sizes: which inputs to try (in range, out of range, broken relations, wrong static
sizes), each one's ``sizing.Sized`` inputs (run ``fake`` or ``numeric`` as ``cost`` plans), and whether the program's
verdict on an in-range size is right. Shared by ``guards``, ``fuzz``, ``retrace``, ``aoti`` and the deployment stages.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..audit import FuzzModel
from ..context import Context
from .sizing import (ACCEPTED, FAKE, NUMERIC, RAISED, REFUSED, UNCHECKED, Sized, Verdict, fake_limit, mismatch,
                     measure_probe, plan_edges, plan_for, plan_tier, quote, run_eager, run_program)
from .strategies import build_inputs

def outside_promise(model: Any, values: dict[str, int]) -> bool:
    """Whether a size assignment puts a declared-dynamic axis at 0 or 1 outside what the declaration promises (a
    bare AUTO/DYNAMIC, or below a declared minimum): only there is an eager error excused as no fault of the
    program. A size of 0 or 1 inside the declared range is part of the promise like any other (issue #41)."""
    by_symbol = {v.symbol: v for v in model.vars}
    for flat, axes in model.sizes(values).items():
        for dim, size in axes.items():
            e = model.shapes[flat][dim]
            if dim is None or isinstance(e, int) or size > 1:
                continue
            for s in e.free_symbols:
                v, x = by_symbol.get(str(s)), values.get(str(s))
                if v is None or not v.promised or x is None or not (0 if v.zero else v.lo) <= x <= v.hi:
                    return True
    return False


REFUSED_IN_RANGE, WRONG_IN_RANGE = "refused-in-range", "wrong-in-range"
EAGER_RAISED_IN_RANGE = "eager-raised-in-range"  # the model itself: the declaration promises more than it supports


class Problem(str):
    """A finding on an in-range probe, with its signature in ``kind``: ``refused-in-range`` (the program refused
    or raised where eager runs), ``eager-raised-in-range`` (eager raises there too: the declaration promises more
    than the model supports, or the inputs need a builder; no fault of the program), ``wrong-in-range``."""

    kind: str

    def __new__(cls, text: str, kind: str) -> "Problem":
        out = super().__new__(cls, text)
        out.kind = kind
        return out


def in_range_problem(ctx: Context, got: Verdict, inputs: Sized | tuple, kwargs: dict | None = None, at: str = "",
                     wrong: str | None = None, small: bool = False) -> Problem | None:
    """What is wrong with the program's verdict on an in-range input: refused or raised where eager runs, eager
    raising (the declaration promises more than the model supports), or an output unlike eager's (values where
    the probe ran numeric; structure, shape and dtype where it ran fake); None if right, or not checked.

    Eager is asked whatever the program did (issue #24): a size the model itself cannot take is never blamed on
    the program. ``small``: the input puts a dynamic axis at size 0 or 1; where eager itself raises there, it is
    recorded in ``ctx.eager_rejects``, no failure (issue #18).
    """
    if got.status == UNCHECKED:
        return None
    where = f" {at}" if at else ""
    how = " (fake tensors: shapes and guards)" if got.mode == FAKE else ""
    want = run_eager(ctx, inputs, kwargs)
    if want.status not in (ACCEPTED, UNCHECKED):
        if small:
            _eager_rejects(ctx, where, want)
            return None
        also = "" if got.status == ACCEPTED else f", as the program {'refused' if got.status == REFUSED else 'did'}"
        return Problem(f"eager raised on in-range sizes{where}{how}{also} (the declared range is wider than the "
                       f"model supports, or the case needs an input_builder): {want.message}", EAGER_RAISED_IN_RANGE)
    if got.status != ACCEPTED:
        what = "refused" if got.status == REFUSED else "raised on"
        return Problem(f"the program {what} in-range sizes{where}{how}: {got.message}", REFUSED_IN_RANGE)
    if want.status == UNCHECKED:
        return None
    bad = mismatch(ctx, got.observation, want.observation, fake=FAKE in (got.mode, want.mode),
                   inputs=inputs if isinstance(inputs, Sized) else (inputs, kwargs or {}))
    if bad:
        return Problem(f"{wrong or f'accepted but wrong at in-range sizes{where}'}{how}:\n{bad}", WRONG_IN_RANGE)
    return None


def _eager_rejects(ctx: Context, where: str, want: Verdict) -> None:
    note = f"eager itself raises at{where or ' these sizes'} ({want.message.splitlines()[0][:200]}): not the program's fault"
    if note not in ctx.eager_rejects:
        ctx.eager_rejects.append(note)


def blame(ctx: Context, model: FuzzModel, values: dict[str, int], ep: Any = None) -> list[str]:
    """The symbols whose change makes the program refuse ``values`` (issue #24), each varied alone from an
    accepted point: first from the example's sizes (a symbol refused there on its own is the cause); where no
    change alone is refused (a relation between them, ``batch * seq <= N``), each symbol whose reset to the
    example's size makes ``values`` accepted. A size eager itself cannot take is no refusal of the program."""
    ep = ctx.ep if ep is None else ep
    base = model.example_values()
    moved = [v.symbol for v in model.vars if values.get(v.symbol) != base.get(v.symbol)]
    if len(moved) <= 1:
        return moved

    def verdict(point: dict[str, int]) -> tuple[str, Any]:
        probe = sized(ctx, model, point, record=False)
        return run_program(ctx, ep, probe).status, probe

    def refused(point: dict[str, int]) -> bool:
        status, probe = verdict(point)
        return status in (REFUSED, RAISED) and run_eager(ctx, probe).status == ACCEPTED

    alone = [s for s in moved if refused({**base, s: values[s]})]
    if alone:
        return alone
    return [s for s in moved if verdict({**values, s: base[s]})[0] == ACCEPTED] or moved


PROBE_SEED = 1234
MAX_RELATION_PROBES = 4
MAX_STATIC_PROBES = 6


@dataclasses.dataclass
class Probe:
    description: str
    values: dict[str, int]
    override: dict[tuple[int, int | None], int]
    kind: str  # "in-range" | "zero" | "max" | "min" | "small" | "relation" | "static" | "additional"
    inputs: tuple[tuple, dict] | None = None
    edge: bool = False  # an edge: every dim at its min, or one dim at its max and the others at their min (#31)
    # the order its numerics are paid for in (issue #50): 0 the edges, 1 each dim at its min and max with the others
    # at the example, 2 the corners, 3 the rest
    tier: int = 3

    @property
    def in_range(self) -> bool:
        return self.kind in ("in-range", "zero", "additional")


def _label(ctx: Context, flat: int, dim: int | None) -> str:
    path = ctx.declaration.paths[flat]
    return path if dim is None else f"{path}.shape[{dim}]"


def _describe(model: FuzzModel, values: dict[str, int]) -> str:
    named = model.named(values)
    return ", ".join(f"{k}={v}" for k, v in named.items()) or "the example sizes"


describe_values = _describe


MAX_SPREAD_PROBES = 8  # powers of two across a range, per dim


def spread(lo: int, hi: int, limit: int = MAX_SPREAD_PROBES) -> list[int]:
    """Powers of two strictly inside ``(lo, hi)``, at most ``limit`` of them, evenly spaced in log scale."""
    powers = [1 << k for k in range(1, 63) if lo < (1 << k) < hi]
    if len(powers) <= limit:
        return powers
    step = (len(powers) - 1) / (limit - 1)
    return sorted({powers[round(i * step)] for i in range(limit)})


EDGES, AT_EXAMPLE, CORNERS, REST = range(4)  # the tiers of the order numerics are paid for in (issue #50)
MAX_CORNER_DIMS = 4  # up to this many dims, every corner of the box; past it, the all-max corner alone


def in_range_probes(ctx: Context, model: FuzzModel, largest: bool = False) -> list[Probe]:
    """The in-range probes in the order their numerics are paid for (issue #50), each tagged with its ``tier``:

    0. the edges (issue #31): every dim at its min, and each dim at its max with the others at their min, where
       defects live and numerics are cheapest (batch 1 at the max sequence);
    1. each dim at its min and at its max with the others at the example's sizes;
    2. the corners of the declared box (every dim at its min or max; past ``MAX_CORNER_DIMS`` dims, all at the max);
    3. the rest: each dim at min+1 and max-1 with the others at the example, powers of two across each range, and
       with ``largest`` the largest size numerics can afford (``largest_probes``; guards asks for it once the tiers
       before it are planned), size 0 where promised, and the AdditionalInputs examples."""
    import itertools

    base = model.example_values()
    seen: list[dict[str, int]] = []
    out: list[Probe] = []

    def add(values: dict[str, int], tier: int, kind: str = "in-range") -> None:
        # inside the relations export kept for dims that promise no range (issue #24), moving only those dims
        values = model.fit(values, keep={s for s, x in values.items() if x != base.get(s)})
        if values is not None and values not in seen:
            seen.append(values)
            out.append(Probe(_describe(model, values), values, {}, kind, edge=tier == EDGES, tier=tier))

    lows = {v.symbol: v.lo for v in model.vars}
    add(lows, EDGES)
    for v in model.vars:
        add({**lows, v.symbol: v.hi}, EDGES)
    for v in model.vars:
        for size in (v.lo, v.hi):
            add({**base, v.symbol: size}, AT_EXAMPLE)
    if len(model.vars) <= MAX_CORNER_DIMS:
        for corner in itertools.product(*[(v.lo, v.hi) for v in model.vars]):
            add(dict(zip([v.symbol for v in model.vars], corner)), CORNERS)
    add({v.symbol: v.hi for v in model.vars}, CORNERS)
    for v in model.vars:
        for size in (v.lo + 1, v.hi - 1):
            if v.lo <= size <= v.hi:
                add({**base, v.symbol: size}, REST)
    for v in model.vars:
        for size in spread(v.lo, v.hi):
            add({**base, v.symbol: size}, REST)
    if largest:
        for probe in largest_probes(ctx, model, seen):
            seen.append(probe.values)
            out.append(probe)
    for v in model.vars:
        if v.zero:  # a declared min of 0: size 0 is in the promise (findings are warnings)
            values = {**base, v.symbol: 0}
            out.append(Probe(_describe(model, values), values, {}, "zero"))
    for args, kwargs in ctx.declaration.additional:
        out.append(Probe("an AdditionalInputs example", {}, {}, "additional", (tuple(args), dict(kwargs))))
    return out


def largest_probes(ctx: Context, model: FuzzModel, seen: list[dict[str, int]]) -> list[Probe]:
    """For each dim whose max numerics cannot afford, a probe at the largest size they can (the others at the
    example's), asked of what is left of the budget now without spending it (``largest_numeric``)."""
    base = model.example_values()
    out = []
    for v in model.vars:
        top = largest_numeric(ctx, model, v)
        if top is None:
            continue
        values = model.fit({**base, v.symbol: top}, keep={v.symbol})
        if values is not None and values not in seen and all(p.values != values for p in out):
            out.append(Probe(_describe(model, values), values, {}, "in-range", tier=REST))
    return out


def counted_need(ctx: Context, model: FuzzModel, values: dict[str, int]) -> int | None:
    """The bytes a numeric run at ``values`` is predicted to need (eager's forward, then the program's beside its
    outputs), from a fake count at those sizes; nothing is planned, recorded or charged to the budget. None where
    inputs at those sizes cannot be built."""
    costs = ctx.calibration.costs()
    measured, ratio, _ = measure_probe(ctx, sized(ctx, model, values, record=False), costs)
    return None if ratio is None else costs.predict(measured, ratio)[1]


def largest_numeric(ctx: Context, model: FuzzModel, v: Any) -> int | None:
    """The largest size of ``v`` (the others at the example's) whose numeric run the cost model affords now, found
    by bisection over fake runs; None where the example's own size is the largest, or the whole range is. Each
    size is only asked about (``sizing.quote``): nothing is charged to the budget (issue #50)."""
    base = model.example_values()

    def numeric(size: int) -> bool:
        return quote(ctx, sized(ctx, model, {**base, v.symbol: size}, record=False)).mode == NUMERIC

    if numeric(v.hi):
        return None  # the max itself runs numeric: the boundaries cover it
    lo, hi = v.example, v.hi  # numeric(lo) holds (the example ran), numeric(hi) does not
    if lo >= hi or not numeric(lo):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if numeric(mid) else (lo, mid)
    return lo if lo != v.example else None


def sized(ctx: Context, model: FuzzModel, values: dict[str, int], probe: Probe | None = None, *,
          record: bool = True, seed: int = 0) -> Sized:
    """The ``Sized`` inputs of a probe (or of bare size values, as fuzz draws them)."""
    if probe is None:
        return Sized(ctx, model, values, label=_describe(model, values), builder=ctx.options.input_builder,
                     seed=seed or PROBE_SEED, in_range=record)
    return Sized(ctx, model, probe.values, label=probe.description, override=probe.override, given=probe.inputs,
                 builder=ctx.options.input_builder if probe.in_range else None, seed=PROBE_SEED,
                 in_range=record and probe.in_range and probe.kind != "additional")


def out_of_range_probes(ctx: Context, model: FuzzModel) -> list[Probe]:
    base = model.example_values()
    example_sizes = model.sizes(base)
    out: list[Probe] = []
    axes_of: dict[str, list[tuple[int, int | None, Any]]] = {}
    for flat, axes in model.shapes.items():
        for dim, e in axes.items():
            if not isinstance(e, int):
                for s in e.free_symbols:
                    axes_of.setdefault(str(s), []).append((flat, dim, e))
    for v in model.vars:
        names = "/".join(v.names)
        if not v.unbounded:
            out.append(Probe(f"{names}={v.hi + 1} (max {v.hi} + 1)", {**base, v.symbol: v.hi + 1}, {}, "max"))
        if v.lo - 1 >= 2:
            out.append(Probe(f"{names}={v.lo - 1} (min {v.lo} - 1)", {**base, v.symbol: v.lo - 1}, {}, "min"))
        # an int input's 0 and 1 too: export specializes them as it does sizes (issue #24)
        plain = [(f, d) for f, d, e in axes_of.get(v.symbol, []) if e == model.symbols[v.symbol]]
        if plain and len(plain) == len(axes_of.get(v.symbol, [])):
            for small in (0, 1):
                if small < v.lo and not (small == 0 and v.zero):
                    out.append(Probe(f"{names}={small} (below the min; torch lets 0 and 1 through by design)",
                                     {**base, v.symbol: small}, {}, "small"))
        related = axes_of.get(v.symbol, [])
        if len(related) > 1 or any(e != model.symbols[v.symbol] for _, _, e in related):
            for flat, dim, e in related[:MAX_RELATION_PROBES]:
                size = example_sizes[flat][dim] + 1
                out.append(Probe(f"{_label(ctx, flat, dim)}={size}, breaking its relation {_declared_form(e, model)} "
                                 f"with {names}={base[v.symbol]}", base, {(flat, dim): size}, "relation"))
    static = 0
    for flat, axes in model.shapes.items():
        for dim, e in axes.items():
            if dim is not None and isinstance(e, int) and static < MAX_STATIC_PROBES:
                static += 1
                out.append(Probe(f"{_label(ctx, flat, dim)}={e + 1} (static axis of size {e})", base,
                                 {(flat, dim): e + 1}, "static"))
    return out


def _declared_form(e: Any, model: FuzzModel) -> str:
    """``2*s77`` as the user wrote it: ``2*n``."""
    import sympy

    subs = {model.symbols[v.symbol]: sympy.Symbol(v.names[0]) for v in model.vars if v.names}
    return str(e.xreplace(subs))


def probe_inputs(ctx: Context, model: FuzzModel, probe: Probe, builder: Any = None) -> tuple[tuple, dict]:
    if probe.inputs is not None:
        return probe.inputs
    if builder is not None and not probe.override:
        return build_inputs(model, probe.values, ctx.case.args, ctx.case.kwargs, PROBE_SEED, builder)
    return build_inputs(model, probe.values, ctx.case.args, ctx.case.kwargs, PROBE_SEED, override=probe.override)


def in_range_inputs(ctx: Context) -> list[tuple[dict[str, int], Sized]]:
    """Boundary sizes inside the declared-and-kept ranges, as (sizes by name, ``Sized`` inputs)."""
    au = ctx.audit()
    if au is None:
        return []
    return [(au.model.named(p.values), sized(ctx, au.model, p.values, p, record=False))
            for p in in_range_probes(ctx, au.model) if p.kind == "in-range"]


def out_of_range_inputs(ctx: Context) -> list[tuple[str, Sized]]:
    """Inputs a program must refuse (max+1, min-1 where checked, broken relations, wrong static sizes)."""
    au = ctx.audit()
    if au is None:
        return []
    return [(p.description, sized(ctx, au.model, p.values, p)) for p in out_of_range_probes(ctx, au.model)
            if p.kind != "small"]


__all__ = ["ACCEPTED", "REFUSED", "RAISED", "UNCHECKED", "Verdict", "Sized", "Probe", "plan_for", "plan_edges", "sized",
           "plan_tier", "quote", "spread", "EDGES", "AT_EXAMPLE", "CORNERS", "REST",
           "largest_numeric", "largest_probes", "counted_need", "fake_limit", "run_program", "run_eager", "mismatch",
           "outside_promise", "describe_values", "in_range_problem", "blame", "Problem", "REFUSED_IN_RANGE", "WRONG_IN_RANGE",
           "EAGER_RAISED_IN_RANGE", "in_range_probes", "out_of_range_probes", "probe_inputs",
           "in_range_inputs", "out_of_range_inputs"]
