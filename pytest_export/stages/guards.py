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

from typing import Any

from ..context import Context, Stage, StageFailure
from ..util import plural
from ..probing import (ACCEPTED, RAISED, has_small_size, in_range_probes, in_range_problem, mismatch,
                       out_of_range_probes, probe_inputs, run_eager, run_program)


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
    # the reloaded programs on a representative subset (issue #16): the boundaries of every range, in and out
    subset = [i for i, p in enumerate(probes) if p.kind in ("max", "min")] + [
        i for i, p in enumerate(probes) if p.kind == "in-range"][:2]  # every dim at its min, every dim at its max
    for label, ep in ctx.loaded.items():
        for probe, expected, (args, kwargs) in [(probes[i], verdicts[i], inputs[i]) for i in sorted(subset)]:
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
    data["message"] = (f"{plural(len(probes), 'probe')}: {accepted} accepted, {data['refused']} refused"
                       + (f", {raised} raised inside" if raised else ""))
    return data


STAGE = Stage("guards", run, needs=("eager", "export", "compare"))
