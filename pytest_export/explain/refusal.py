"""Why a program refuses an in-range probe, from export's own guards (issue #33): the guards that fail at the
probe's sizes, in the declaration's names; the dims they involve (two together are a relation, and neither is
refused alone: the sizes each takes with the others elsewhere are named); the line that added each; and the change
to the model that would keep the promise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..audit import FuzzModel
from ..context import Context
from ..probes.choose import blame
from ..proof.guardsource import INSIDE_TORCH, NO_SOURCE, Recorded, holds, record_of, substituted
from ..proof.prove import relation_text as _relation_text


@dataclasses.dataclass
class Explanation:
    """Why the program refuses one probe: its failing guards (``where``: the refused relation in the
    declaration's names; ``source``: the line that added it), the dims they involve, and each dim's sizes alone."""

    where: list[str]
    sources: list[str]
    symbols: list[str]  # the fuzz model's symbols the failing guards involve
    # per dim of a relation: (its name, its refused size, the others' sizes it is accepted with, or None)
    accepted: list[tuple[str, int, str | None]] = dataclasses.field(default_factory=list)

    @property
    def relation(self) -> bool:
        return len(self.symbols) > 1

    @property
    def user_lines(self) -> list[str]:
        """The sources outside torch: a model's or a library's line."""
        return [src for src in self.sources if not src.startswith(INSIDE_TORCH)]

    @property
    def alone(self) -> list[str]:
        """``"h16=14 is accepted with w16=20"`` for each dim of a relation."""
        return [f"{name}={size} is accepted with {other}" if other else
                f"{name}={size} is refused with every other size tried" for name, size, other in self.accepted]

    def text(self, names: dict[str, str]) -> str:
        dims = " and ".join(names.get(s, s) for s in self.symbols)
        by_source: dict[str, list[str]] = {}
        for w, src in zip(self.where, self.sources):
            by_source.setdefault(src, []).append(w)
        parts = [f"refused where {ws[0]}" + (f" (and {len(ws) - 1} more guards of that line)" if len(ws) > 1 else "")
                 + (f": the guard was added at {src}" if src != NO_SOURCE else ": torch recorded no line for it")
                 for src, ws in by_source.items()]
        out = "; ".join(parts)
        if self.relation:
            out += f": a relation between {dims}, no size of one alone" + (
                f" ({'; '.join(self.alone)})" if self.alone else "")
        return out


def explain(ep: Any, model: Any, values: dict[str, int], limit: int = 3) -> Explanation | None:
    """The guards of ``ep``'s export that fail at the probe ``values`` (fuzz symbol -> size), or None where torch
    kept no record or none of its guards fails there (the refusal is a guard outside the shape environment)."""
    try:
        return _explain(ep, model, values, limit)
    except Exception:  # noqa: BLE001 - torch-internal records; the probe-based blame stands in
        return None


def _explain(ep: Any, model: Any, values: dict[str, int], limit: int) -> Explanation | None:
    import sympy

    rec = record_of(ep)
    if rec is None:
        return None
    syms = {name: model.symbols[name] for name in values if name in model.symbols}
    point = {syms[n]: sympy.Integer(v) for n, v in values.items() if n in syms}
    names = {syms[v.symbol]: sympy.Symbol(v.names[0], integer=True) for v in model.vars if v.symbol in syms}
    by_sym = {sym: name for name, sym in syms.items()}
    where: list[str] = []
    sources: list[str] = []
    involved: list[str] = []
    for expr, source in rec.guards:
        if holds(rec, expr, point) is not False:
            continue
        roots = substituted(rec, expr)
        text = _relation_text(sympy.Not(roots).xreplace(names))
        if text in where:
            continue
        where.append(text)
        sources.append(source)
        for sym in sorted(roots.free_symbols & set(point), key=str):
            if by_sym[sym] not in involved:
                involved.append(by_sym[sym])
        if len(where) == limit:
            break
    if not where:
        return None
    accepted: list[tuple[str, int, str | None]] = []
    if len(involved) > 1:
        var = {v.symbol: v for v in model.vars}
        failing = [e for e, _ in rec.guards if holds(rec, e, point) is False]
        for name in involved:
            others = [o for o in involved if o != name]
            found = _accepted_alone(rec, failing, point, syms, var, name, others)
            accepted.append((var[name].names[0], values[name], found))
    return Explanation(where, sources, involved, accepted)


def _accepted_alone(rec: Recorded, failing: list[Any], point: dict[Any, Any], syms: dict[str, Any], var: dict,
                    name: str, others: list[str]) -> str | None:
    """Sizes of ``others`` (their example, bounds and neighbours) at which the failing guards hold with ``name``
    kept at its refused size: "w16=20"; None where none of those does."""
    import itertools

    import sympy

    choices = []
    for o in others:
        v = var[o]
        choices.append([x for x in dict.fromkeys((v.example, v.hi, v.lo + 1, v.hi - 1, v.lo)) if v.lo <= x <= v.hi
                        and x != point[syms[o]]])
    for combo in itertools.islice(itertools.product(*choices), 64):
        moved = {**point, **{syms[o]: sympy.Integer(x) for o, x in zip(others, combo)}}
        if all(holds(rec, e, moved) is not False for e in failing):
            return ", ".join(f"{var[o].names[0]}={x}" for o, x in zip(others, combo))
    return None


def model_fix(line: str) -> str:
    """The change to the model that keeps the promise, where ``line`` (a guard's source: ``"file:12 in f: `code`"``)
    is a branch or a check on a size in the model or a library, with the idioms that keep every declared size;
    "" for any other line (an operator's requirement: the declaration's fix is the way)."""
    if ": `" not in line or line.startswith(INSIDE_TORCH):
        return ""
    where, code = line.split(": `", 1)
    code = code.split("`", 1)[0].strip()
    if code.startswith(("assert", "torch._check")):
        return (f"or change the model: {where} checks a size (`{code}`); widen or remove the check so that every "
                "declared size passes it")
    if code.startswith(("if ", "elif ", "while ")) or " if " in code:
        return (f"or change the model: {where} branches on a size (`{code}`): make it size-independent, or trace "
                "both branches with `torch.cond(pred, true_fn, false_fn, operands)`; where the branch only guards "
                "an impossible case, `torch._check(...)` states the fact")
    return ""


def mark_refusal(ctx: Context, model: FuzzModel, values: dict[str, int]) -> tuple[Any, list[str]]:
    """Mark the audit rows of the dims a refused in-range probe blames, and return torch's explanation (or None)
    and the symbols whose ranges a fix narrows. Where export's guards say, they decide (issue #33): a guard on
    two dims together is a relation, marked on both rows and blamed on neither alone (a fix narrows the last);
    else the probe-based ``blame``."""
    why = explain(ctx.ep, model, values)
    if why is not None and why.relation:
        ctx.mark_relation(why.symbols, why.where[0])
        return why, why.symbols[-1:]
    symbols = why.symbols if why is not None else blame(ctx, model, values)
    for symbol in symbols:
        ctx.mark_refused(symbol, values)
    return why, symbols


__all__ = ["Explanation", "explain", "mark_refusal", "model_fix"]
