"""Stage ``guards``: the declared ranges hold both ways, in the exported and the reloaded program.

The audit (declared vs achieved) fails the stage where a promise was narrowed or specialized. Then every
in-range boundary size must be accepted and computed right; every out-of-range size (max+1, min-1 where torch
checks the min, a broken derived relation, a wrong size on a static axis) must be refused by a guard, or, where
accepted, match eager. The reloaded programs must refuse and accept the same.

Sizes 0 and 1 (issue #18): a declared minimum of 0 or 1 puts size 1 inside the promise, so it is probed as in
range (a refusal or a wrong result fails the stage; where eager itself raises there, it is recorded, not
failed); size 0 is probed the same way where the minimum is 0, and its findings are warnings. Below an explicit
minimum of 2, and on a bare AUTO/DYNAMIC axis (no promise), torch lets 0 and 1 through by design: they are
probed, and "accepted but wrong" there is a warning.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..runner import Context, Stage, StageFailure, register_stage
from ..shapes import FuzzModel
from ..strategies import build_inputs
from .probing import ACCEPTED, RAISED, has_small_size, in_range_problem, mismatch, run_eager, run_program

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

    @property
    def in_range(self) -> bool:
        return self.kind in ("in-range", "zero", "additional")


def _label(ctx: Context, flat: int, dim: int | None) -> str:
    path = ctx.declaration.paths[flat]
    return path if dim is None else f"{path}.shape[{dim}]"


def _describe(model: FuzzModel, values: dict[str, int]) -> str:
    named = model.named(values)
    return ", ".join(f"{k}={v}" for k, v in named.items()) or "the example sizes"


def in_range_probes(ctx: Context, model: FuzzModel) -> list[Probe]:
    base = model.example_values()
    seen: list[dict[str, int]] = []
    out: list[Probe] = []

    def add(values: dict[str, int]) -> None:
        if values not in seen:
            seen.append(values)
            out.append(Probe(_describe(model, values), values, {}, "in-range"))

    add({v.symbol: v.lo for v in model.vars})
    add({v.symbol: v.hi for v in model.vars})
    for v in model.vars:
        for size in sorted({v.lo, v.lo + 1, v.hi - 1, v.hi}):
            if v.lo <= size <= v.hi:
                add({**base, v.symbol: size})
    for v in model.vars:
        if v.zero:  # a declared min of 0: size 0 is in the promise (findings there are warnings)
            values = {**base, v.symbol: 0}
            out.append(Probe(_describe(model, values), values, {}, "zero"))
    for args, kwargs in ctx.declaration.additional:
        out.append(Probe("an AdditionalInputs example", {}, {}, "additional", (tuple(args), dict(kwargs))))
    return out


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
        plain = [(f, d) for f, d, e in axes_of.get(v.symbol, []) if d is not None and e == model.symbols[v.symbol]]
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


def _one_line(text: str, limit: int = 400) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    out = lines[0] if lines else ""
    if out.endswith(":") and len(lines) > 1:
        out += " " + lines[1]
    return out if len(out) <= limit else out[: limit - 3] + "..."


def probe_inputs(ctx: Context, model: FuzzModel, probe: Probe, builder: Any = None) -> tuple[tuple, dict]:
    if probe.inputs is not None:
        return probe.inputs
    if builder is not None and not probe.override:
        return build_inputs(model, probe.values, ctx.case.args, ctx.case.kwargs, PROBE_SEED, builder)
    return build_inputs(model, probe.values, ctx.case.args, ctx.case.kwargs, PROBE_SEED, override=probe.override)


def stage_guards(ctx: Context) -> dict[str, Any]:
    audit = ctx.require_audit()
    model = audit.model
    failures = [(f, "declaration") for f in audit.failures]
    warnings: list[str] = []
    records: list[dict[str, Any]] = []
    probes = in_range_probes(ctx, model) + out_of_range_probes(ctx, model)
    base = model.example_values()
    verdicts: list[str] = []
    inputs = [probe_inputs(ctx, model, p, ctx.options.input_builder if p.in_range else None) for p in probes]
    for probe, (args, kwargs) in zip(probes, inputs):
        got = run_program(ctx, ctx.ep, args, kwargs)
        verdicts.append(got.status)
        rec = {"probe": probe.description, "kind": probe.kind, "program": got.status}
        records.append(rec)
        if probe.in_range:
            small = probe.kind != "additional" and has_small_size(ctx, model, probe.values)
            problem = in_range_problem(ctx, got, args, kwargs, at=probe.description, small=small)
            if problem:
                rec["finding"] = problem.splitlines()[0]
                if probe.kind == "zero":
                    warnings.append(problem)
                    continue
                failures.append((problem, "refused-in-range" if got.status != ACCEPTED else "wrong-in-range"))
                if got.status != ACCEPTED and probe.kind == "in-range":
                    moved = [v for v in model.vars if probe.values.get(v.symbol) != base.get(v.symbol)]
                    for v in moved if len(moved) == 1 else []:
                        ctx.mark_refused(v.symbol, probe.values)
            continue
        if got.status == RAISED:
            # crashed inside a kernel: nothing checked the size at the program's input (issue #18)
            problem = (f"out-of-range sizes {probe.description} raised inside the program, not refused by a guard: "
                       f"{got.message.splitlines()[0] if got.message else ''}")
            rec["finding"] = problem
            warnings.append(problem)
            continue
        if got.status != ACCEPTED:
            continue  # refused by a guard: as promised
        want = run_eager(ctx, args, kwargs)
        if want.status != ACCEPTED:
            problem = (f"accepted out-of-range sizes {probe.description}, which eager rejects "
                       f"({want.message.splitlines()[0]}): no guard checks this")
        else:
            bad = mismatch(ctx, got.observation, want.observation)
            rec["eager"] = "matches" if not bad else "differs"
            if not bad:
                continue  # accepted and right
            problem = f"accepted but wrong at out-of-range sizes {probe.description}:\n{bad}"
        rec["finding"] = problem.splitlines()[0]
        if probe.kind == "small":
            warnings.append(problem)
        else:
            failures.append((problem, "accepted-out-of-range"))
    for label, ep in ctx.loaded.items():
        for probe, expected, (args, kwargs) in zip(probes, verdicts, inputs):
            got = run_program(ctx, ep, args, kwargs)
            if (got.status == ACCEPTED) != (expected == ACCEPTED):
                failures.append((f"the reloaded ({label}) program {got.status} sizes {probe.description}, which the "
                                 f"exported program {expected}: save/load changed the guards", "reload-changed"))
    ctx.result.warnings.extend(_one_line(w) for w in warnings)
    accepted, raised = verdicts.count(ACCEPTED), verdicts.count(RAISED)
    data = {"probes": len(probes), "accepted": accepted, "refused": len(probes) - accepted - raised, "raised": raised,
            "findings": [r for r in records if "finding" in r], "warnings": warnings}
    if ctx.eager_rejects:
        data["eager_rejects"] = list(ctx.eager_rejects)
    if failures:
        raise StageFailure("\n".join(f"- {f}" for f, _ in failures), kind=failures[0][1], **data)
    data["message"] = (f"{len(probes)} probes: {accepted} accepted, {data['refused']} refused"
                       + (f", {raised} raised inside" if raised else ""))
    return data


register_stage(Stage("guards", stage_guards, needs=("eager", "export", "compare")), after="decomp")

__all__ = ["stage_guards", "in_range_probes", "out_of_range_probes", "probe_inputs", "Probe"]
