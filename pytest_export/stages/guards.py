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

import math
import re
from typing import Any

from ..context import Context, Stage, StageFailure
from ..audit import kept_range
from ..guardsource import refusing_guards
from ..util import plural
from ..probing import (ACCEPTED, FAKE, RAISED, UNCHECKED, has_small_size, in_range_probes, in_range_problem,
                       mismatch, out_of_range_probes, run_eager, run_program, sized)


def _one_line(text: str, limit: int = 400) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    out = lines[0] if lines else ""
    if out.endswith(":") and len(lines) > 1:
        out += " " + lines[1]
    return out if len(out) <= limit else out[: limit - 3] + "..."


def run(ctx: Context) -> dict[str, Any]:
    audit = ctx.require_audit()
    model = audit.model
    failures = [(f, "declaration") for f in audit.failures]
    warnings: list[str] = []
    records: list[dict[str, Any]] = []
    probes = in_range_probes(ctx, model) + out_of_range_probes(ctx, model)
    base = model.example_values()
    verdicts: list[str] = []
    refused_in: dict[str, list[tuple[int, str]]] = {}  # in-range sizes the program refused, per symbol
    accepted_in: dict[str, set[int]] = {}
    inputs = [sized(ctx, model, p.values, p) for p in probes]
    for probe, probe_in in zip(probes, inputs):
        got = run_program(ctx, ctx.ep, probe_in)
        verdicts.append(got.status)
        rec = {"probe": probe.description, "kind": probe.kind, "program": got.status, "mode": got.mode or None}
        records.append(rec)
        if got.status == UNCHECKED:
            rec["why"] = got.message
            continue
        if probe.in_range:
            small = probe.kind != "additional" and has_small_size(ctx, model, probe.values)
            problem = in_range_problem(ctx, got, probe_in, at=probe.description, small=small)
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
                        refused_in.setdefault(v.symbol, []).append((probe.values[v.symbol], got.message))
            elif probe.kind == "in-range":
                for v in model.vars:
                    accepted_in.setdefault(v.symbol, set()).add(probe.values.get(v.symbol))
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
        want = run_eager(ctx, probe_in)
        if want.status == UNCHECKED:
            continue
        if want.status != ACCEPTED:
            problem = (f"accepted out-of-range sizes {probe.description}, which eager rejects "
                       f"({want.message.splitlines()[0]}): no guard checks this")
        else:
            bad = mismatch(ctx, got.observation, want.observation, fake=FAKE in (got.mode, want.mode))
            rec["eager"] = "matches" if not bad else "differs"
            if not bad:
                continue  # accepted and right
            problem = f"accepted but wrong at out-of-range sizes {probe.description}:\n{bad}"
        rec["finding"] = problem.splitlines()[0]
        if probe.kind == "small":
            warnings.append(problem)
        else:
            failures.append((problem, "accepted-out-of-range"))
    # the reloaded programs on a representative subset (issue #16): the boundaries of every range, in and out
    subset = [i for i, p in enumerate(probes) if p.kind in ("max", "min")] + [
        i for i, p in enumerate(probes) if p.kind == "in-range"][:2]  # every dim at its min, every dim at its max
    for label, ep in ctx.loaded.items():
        for probe, expected, probe_in in [(probes[i], verdicts[i], inputs[i]) for i in sorted(subset)]:
            got = run_program(ctx, ep, probe_in)
            if UNCHECKED in (got.status, expected):
                continue
            if (got.status == ACCEPTED) != (expected == ACCEPTED):
                failures.append((f"the reloaded ({label}) program {got.status} sizes {probe.description}, which the "
                                 f"exported program {expected}: save/load changed the guards", "reload-changed"))
    ctx.result.warnings.extend(_one_line(w) for w in warnings)
    accepted, raised = verdicts.count(ACCEPTED), verdicts.count(RAISED)
    unchecked = verdicts.count(UNCHECKED)
    data = {"probes": len(probes), "accepted": accepted, "refused": len(probes) - accepted - raised - unchecked,
            "raised": raised, "unchecked": unchecked, "findings": [r for r in records if "finding" in r],
            "warnings": warnings, "modes": {m: sum(1 for r in records if r["mode"] == m) for m in ("fake", "numeric")},
            "probe_list": records}
    if ctx.eager_rejects:
        data["eager_rejects"] = list(ctx.eager_rejects)
    for v in model.vars:
        if refused_in.get(v.symbol):
            size = refused_in[v.symbol][0][0]
            culprits = refusing_guards(ctx.ep, v.symbol, size)
            if culprits:
                data.setdefault("guard_sources", {})[v.symbol] = culprits
            if culprits and not any(c in f for f, _ in failures for c in culprits):  # not named by the audit
                failures.append((f"where: {'/'.join(v.names)}={size} is refused by "
                                 + "; ".join(culprits), "refused-in-range"))
    fix = suggested_fix(ctx, model, refused_in, accepted_in)
    if fix:
        data["dynamic_shapes_fix"] = fix
        failures.append((f"fix: what the program really accepts, ready to paste (or make the model accept the "
                         f"declared range):\n{fix}", failures[0][1] if failures else "refused-in-range"))
    if failures:
        raise StageFailure("\n".join(f"- {f}" for f, _ in failures), kind=failures[0][1], **data)
    modes = f" ({data['modes']['numeric']} numeric, {data['modes']['fake']} fake)" if data["modes"]["fake"] else ""
    data["message"] = (f"{plural(len(probes), 'probe')}{modes}: {accepted} accepted, {data['refused']} refused"
                       + (f", {raised} raised inside" if raised else "") + (f", {unchecked} not checked" if unchecked else ""))
    return data


def suggested_fix(ctx: Context, model: Any, refused: dict[str, list[tuple[int, str]]],
                  accepted: dict[str, set[int]]) -> str:
    """The ``Dim`` definitions that match what the program accepted, for each declared dim it refused sizes of:
    the range narrowed to the accepted sizes around the example, or, where a guard demands a multiple
    (``... % 4 == 0``), a derived dim (``b = 4 * _b``). Source to paste over the declared ``Dim``."""
    lines = []
    for v in model.vars:
        bad = refused.get(v.symbol)
        if not bad or not v.names or len(v.names) != 1:
            continue
        ok = sorted(x for x in accepted.get(v.symbol, set()) | {v.example} if x is not None)
        name = re.sub(r"\W", "_", v.names[0]).strip("_") or "d"  # a hint's root is named by its axis path
        multiple = _multiple(msg for _, msg in bad)
        below = [x for x, _ in bad if x < v.example]
        above = [x for x, _ in bad if x > v.example]
        lo = min((x for x in ok if x > max(below)), default=v.example) if below else v.lo
        hi = max((x for x in ok if x < min(above)), default=v.example) if above else (None if v.unbounded else v.hi)
        kept = kept_range(ctx.ep, model.symbols[v.symbol])  # the program's own bounds, where they sit between the probes
        if kept and below and max(below) < kept[0] < lo:
            lo = kept[0]
        if kept and above and kept[1] is not None and hi is not None and hi < kept[1] < min(above):
            hi = kept[1]
        if multiple:
            # the refusals are the guard's demand for whole multiples: the declared range, in multiples
            lo, hi = max(v.lo, 1), (None if v.unbounded else v.hi)
            k_lo, k_hi = -(-lo // multiple), (hi // multiple if hi is not None else None)
            bounds = f"min={k_lo}" + (f", max={k_hi}" if k_hi is not None else "")
            lines.append(f"_{name} = Dim('_{name}', {bounds})\n{name} = {multiple} * _{name}")
        else:
            bounds = f"min={lo}" + (f", max={hi}" if hi is not None else "")
            lines.append(f"{name} = Dim('{name}', {bounds})")
    return "\n".join(lines)


def _multiple(messages: Any) -> int | None:
    """``N`` of a refusing guard of the form ``... % N == 0`` (a reshape that needs whole groups of N)."""
    for msg in messages:
        m = re.search(r"% (\d+) == 0", msg or "")
        if m:
            n = int(m.group(1))
            # the guard is on the axis expression (``2 * x.size()[0] % 4``): the dim itself needs n / gcd
            coeff = re.search(r"(\d+) \* \w+\.size\(\)\[\d+\] % ", msg)
            if coeff:
                n //= math.gcd(n, int(coeff.group(1)))
            return n if n > 1 else None
    return None


STAGE = Stage("guards", run, needs=("eager", "export", "compare"))
