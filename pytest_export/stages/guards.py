"""Stage ``guards``: the declared ranges hold both ways, in the exported and the reloaded program.

The audit (declared vs achieved) fails the stage where a promise was narrowed or specialized. Then every
in-range boundary size must be accepted and computed right; every out-of-range size (max+1, min-1 where torch
checks the min, a broken derived relation, a wrong size on a static axis) must be refused by a guard, or, where
accepted, match eager. The reloaded programs must refuse and accept the same.

Sizes 0 and 1 (issue #18): a declared minimum of 0 or 1 puts size 1 inside the promise, so it is probed as in
range (a refusal or a wrong result fails the stage; where eager itself raises there, it is recorded, not
failed); size 0 is probed the same way where the minimum is 0, and its findings are warnings. Below an explicit
minimum of 2, and on a bare AUTO/DYNAMIC axis (no promise), torch lets 0 and 1 through by design (it checks a
minimum only above 2): they are probed, and what happened there (accepted but wrong, raised inside the program)
is recorded in the report (``below_min``), never a warning: torch does not check these sizes by design, so the
user has nothing to act on (issue #26).
"""

from __future__ import annotations

from typing import Any

from ..context import Context, Stage, StageFailure
from ..explain.fixes import check, propose, proved_fixes, tie_lines
from ..explain.refusal import Explanation, mark_refusal, model_fix
from ..probes.choose import (ACCEPTED, AT_EXAMPLE, CORNERS, EAGER_RAISED_IN_RANGE, EDGES, FAKE, RAISED,
                             REFUSED_IN_RANGE, REST, UNCHECKED, Probe, describe_values, in_range_probes,
                             in_range_problem, largest_probes, mismatch, out_of_range_probes,
                             outside_promise, plan_edges, plan_tier, run_eager, run_program, sized)
from ..proof.guardsource import refusing_guards
from ..proof.prove import RANGE_SOURCE, TIE_SOURCE, Proof, prove
from ..util import plural


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
    # the program's guards decided over every declared size (issue #41); each refused set gets a witness probe
    proof = prove(ctx.ep, model)
    witnesses = _witnesses(model, proof, bool(audit.failures))
    probes = in_range_probes(ctx, model)
    seen = [p.values for p in probes]
    probes += [w for w in witnesses.values() if w.values not in seen] + out_of_range_probes(ctx, model)
    inputs = [sized(ctx, model, p.values, p) for p in probes]
    costs = ctx.calibration.costs()
    # the order numerics are paid for in (issue #50): the edges first, before anything is set aside for the other
    # probes' shape checks (#43) so that no later probe takes their place; then each tier, the cheapest first
    plan_edges(ctx, [i for p, i in zip(probes, inputs) if p.tier == EDGES and p.kind == "in-range"])
    costs.set_aside(inputs)  # each other probe's check by shape, set aside before their numerics are planned (#43)
    for tier in (AT_EXAMPLE, CORNERS):
        plan_tier(ctx, [i for p, i in zip(probes, inputs) if p.tier == tier and p.kind == "in-range"])
    # the largest size numerics can afford, asked of what the tiers before it left (it spends nothing to ask)
    extra = largest_probes(ctx, model, [p.values for p in probes])
    at = next((k for k, p in enumerate(probes) if p.tier == REST), len(probes))
    probes[at:at] = extra
    inputs[at:at] = [sized(ctx, model, p.values, p) for p in extra]
    costs.set_aside(inputs[at:at + len(extra)])
    plan_tier(ctx, [i for p, i in zip(probes, inputs) if p.tier == REST and p.kind == "in-range"])
    verdicts: list[str] = []
    refused_in: dict[str, list[tuple[int, str]]] = {}  # in-range sizes the program refused, per symbol
    explained: list[Explanation] = []  # the guards behind each refused probe, as torch recorded them (#33)
    accepted_in: dict[str, set[int]] = {}
    eager_moved: set[str] = set()  # symbols moved by probes where eager itself raised
    for probe, probe_in in zip(probes, inputs):
        try:
            got = run_program(ctx, ctx.ep, probe_in)
            verdicts.append(got.status)
            rec = {"probe": probe.description, "kind": probe.kind, "program": got.status, "mode": got.mode or None}
            records.append(rec)
            if got.status == UNCHECKED:
                rec["why"] = got.message
                continue
            if probe.in_range:
                # sizes 0 and 1 excuse eager's errors only outside the declaration (issue #41)
                small = probe.kind != "additional" and outside_promise(model, probe.values)
                problem = in_range_problem(ctx, got, probe_in, at=probe.description, small=small)
                if problem:
                    rec["finding"] = problem.splitlines()[0]
                    if probe.kind == "zero":
                        warnings.append(problem)
                        continue
                    failures.append((problem, problem.kind))
                    if problem.kind == EAGER_RAISED_IN_RANGE:
                        eager_moved.update(s for s, x in probe.values.items() if x != model.example_values().get(s))
                    if problem.kind == REFUSED_IN_RANGE and probe.kind == "in-range":
                        # the dims whose sizes the program refuses: by torch's guards (a relation blames none
                        # alone), else each varied one at a time from the example
                        why, symbols = mark_refusal(ctx, model, probe.values)
                        if why is not None:
                            explained.append(why)
                        for symbol in symbols:
                            refused_in.setdefault(symbol, []).append((probe.values[symbol], got.message))
                elif probe.kind == "in-range":
                    for v in model.vars:
                        accepted_in.setdefault(v.symbol, set()).add(probe.values.get(v.symbol))
                continue
            if got.status == RAISED:
                # crashed inside a kernel: nothing checked the size at the program's input (issue #18)
                problem = (f"out-of-range sizes {probe.description} raised inside the program, not refused by a guard: "
                           f"{got.message.splitlines()[0] if got.message else ''}")
                if probe.kind == "small":  # a size torch checks by no guard (<= 2): recorded, no warning (#26)
                    rec["below_min"] = problem
                    continue
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
                bad = mismatch(ctx, got.observation, want.observation, fake=FAKE in (got.mode, want.mode),
                               inputs=probe_in)
                rec["eager"] = "matches" if not bad else "differs"
                if not bad:
                    continue  # accepted and right
                problem = f"accepted but wrong at out-of-range sizes {probe.description}:\n{bad}"
            if probe.kind == "small":  # below the min at a size no guard checks: recorded, no warning (#26)
                rec["below_min"] = _one_line(problem)
                continue
            rec["finding"] = problem.splitlines()[0]
            failures.append((problem, "accepted-out-of-range"))
        finally:
            probe_in.release()  # the outputs went with the loop; the inputs go now (issue #31)
            costs.release(probe_in)
    # the reloaded programs on a representative subset (issue #16): the boundaries of every range, in and out
    tops = {v.symbol: v.hi for v in model.vars}
    subset = [i for i, p in enumerate(probes) if p.kind in ("max", "min")] + [
        i for i, p in enumerate(probes) if p.kind == "in-range" and p.edge][:1] + [  # every dim at its min
        i for i, p in enumerate(probes) if p.kind == "in-range" and p.values == tops][:1]  # every dim at its max
    for label, ep in ctx.loaded.items():
        for probe, expected, probe_in in [(probes[i], verdicts[i], inputs[i]) for i in sorted(subset)]:
            got = run_program(ctx, ep, probe_in)
            probe_in.release()
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
    if any("below_min" in r for r in records):
        data["below_min"] = [{"probe": r["probe"], "what": r["below_min"]} for r in records if "below_min" in r]
    names = {v.symbol: "/".join(v.names) for v in model.vars}
    proved_lines = _proof_lines(proof, witnesses, verdicts, probes) if proof is not None else []
    if proof is not None:  # what this stage fails on every run; `fuzz` leaves those sizes to it (issue #51)
        ctx.refused_by_proof = _reported(proof, witnesses, verdicts, probes, bool(audit.failures))
    # where no proof could be built, the report says so: a harness limit is never read as a proof (#41); where no
    # axis is declared dynamic there is no range to prove, and nothing is said
    if proof is not None:
        data["proof"] = proof.to_dict()
    elif any(v.promised for v in model.vars):
        data["proof"] = {"proved": False, "sizes": None, "guards": None,
                         "line": "guards: not proved (torch's record of the program's guards could not be read): "
                                 "sampled by the probes only"}
    failures += [(line, REFUSED_IN_RANGE) for line in proved_lines]
    said: set[str] = set()
    for why in explained:
        text = why.text(names)
        data.setdefault("guard_sources", {}).update({w: src for w, src in zip(why.where, why.sources)})
        if text in said or any(w in f for f, _ in failures for w in why.where):  # named already (audit, proof)
            continue
        said.add(text)
        failures.append((text, REFUSED_IN_RANGE))
    for v in model.vars:
        if refused_in.get(v.symbol) and not any(v.symbol in why.symbols for why in explained):
            size = refused_in[v.symbol][0][0]
            culprits = refusing_guards(ctx.ep, v.symbol, size)
            if culprits:
                data.setdefault("guard_sources", {})[v.symbol] = culprits
            if culprits and not any(c in f for f, _ in failures for c in culprits):  # not named by the audit
                failures.append((f"where: {'/'.join(v.names)}={size} is refused by "
                                 + "; ".join(culprits), "refused-in-range"))
    kind = failures[0][1] if failures else REFUSED_IN_RANGE
    labels: dict[str, list[str]] = {}
    for row, sym in zip(audit.rows, audit.row_symbols):
        labels.setdefault(str(sym), []).append(row["input"] if row["axis"] is None else
                                               f"{row['input']}.shape[{row['axis']}]")
    failures += [(line, kind) for line in tie_lines(model, refused_in, labels, eager_moved)]
    notes: list[str] = []
    fixes = []
    if proved_lines:  # the proof's refused sets decide the fix: the narrowing that gives up the fewest (#41)
        fixes, notes = proved_fixes(proof, model)
        if not fixes and notes:
            data["fix_problem"] = notes[0]
            failures.append((f"no fix to paste: {notes[0]}", kind))
    if not fixes and not proved_lines:
        fixes = propose(ctx, model, refused_in, accepted_in)
    if fixes:
        # a fix is offered ready to paste only once it exported and its program took every probed size (issue #24)
        checked = check(ctx, model, fixes)
        if checked.ready:
            data["dynamic_shapes_fix"] = "\n".join(f.source for f in fixes)
        else:
            data["fix_problem"] = checked.text
        failures.append((checked.text + ("".join("\n" + n for n in notes) if checked.ready else "")
                         + ("" if notes else gives_up(explained, names, fixes)), kind))
    hints = [h for h in dict.fromkeys(model_fix(line) for why in explained for line in why.user_lines) if h]
    if hints:
        data["model_fix"] = hints
        failures += [(h, kind) for h in hints]
    if failures:
        raise StageFailure("\n".join(f"- {f}" for f, _ in failures), kind=failures[0][1], **data)
    modes = f" ({data['modes']['numeric']} numeric, {data['modes']['fake']} fake)" if data["modes"]["fake"] else ""
    data["message"] = (f"{plural(len(probes), 'probe')}{modes}: {accepted} accepted, {data['refused']} refused"
                       + (f", {raised} raised inside" if raised else "") + (f", {unchecked} not checked" if unchecked else ""))
    return data


def _witnesses(model: Any, proof: Proof | None, audited: bool) -> dict[int, Probe]:
    """For each guard the proof found refusing declared sizes: a probe at one of them (the first), so that the
    program's refusal is seen, explained and fixed like any probe's. Not for what the audit names already (a
    narrowed range) or the tie lines do (axes export made one)."""
    out: dict[int, Probe] = {}
    if proof is None:
        return out
    base = model.example_values()
    for i, d in enumerate(proof.refusals()):
        if d.guard.source == TIE_SOURCE or (d.guard.source == RANGE_SOURCE and audited) or not d.examples:
            continue
        values = {**base, **dict(zip(d.symbols, d.examples[0]))}
        out[i] = Probe(describe_values(model, values), values, {}, "in-range")
    return out


def _confirmed(proof: Proof, witnesses: dict[int, Probe], verdicts: list[str], probes: list[Probe]) -> set[int]:
    """The refusing guards (``id``) whose witness probe was not accepted (a guard the program does not check at run
    time is no refusal)."""
    status = {id(p): v for p, v in zip(probes, verdicts)}
    by_values = {str(p.values): status.get(id(p)) for p in probes}
    return {id(d) for i, d in enumerate(proof.refusals())
            if i in witnesses and by_values.get(str(witnesses[i].values)) != ACCEPTED}


def _reported(proof: Proof, witnesses: dict[int, Probe], verdicts: list[str], probes: list[Probe],
              audited: bool) -> list[Any]:
    """The refusing guards this stage fails on, whatever the draw: those its witness confirmed and, where the audit
    fails the declaration, the ranges export narrowed and the axes it tied (the audit names them)."""
    confirmed = _confirmed(proof, witnesses, verdicts, probes)
    return [d for d in proof.refusals() if id(d) in confirmed or (audited and d.guard.source in (RANGE_SOURCE,
                                                                                               TIE_SOURCE))]


def _proof_lines(proof: Proof, witnesses: dict[int, Probe], verdicts: list[str], probes: list[Probe]) -> list[str]:
    """A line per guard that refuses declared sizes, with the whole refused set, where its witness probe was not
    accepted (a guard the program does not check at run time is no refusal)."""
    confirmed = _confirmed(proof, witnesses, verdicts, probes)
    return [proof.refused_text(d, more=more) + (" (proved over every declared size, not sampled)" if d.exact else "")
            for d, more in proof.grouped() if id(d) in confirmed]


def gives_up(explained: list[Explanation], names: dict[str, str], fixes: list[Any]) -> str:
    """What a narrowing fix gives up where the program refuses only a relation between dims (torch's ``Dim``
    cannot exclude ``h16*w16 == 196``): the sizes it drops that the program accepts with other sizes elsewhere."""
    lines = []
    roots = {r for f in fixes for r in f.roots}
    for why in explained:
        if not why.relation:
            continue
        for name, size, other in why.accepted:
            if name in roots and other:
                lines.append(f"(this fix gives up {name}={size} at every size of the others, though the program "
                             f"refuses it only where {why.where[0]}: it accepts {name}={size} with {other}; no Dim "
                             "excludes a relation)")
    return "".join("\n" + ln for ln in dict.fromkeys(lines))


STAGE = Stage("guards", run, needs=("eager", "export", "compare"))
