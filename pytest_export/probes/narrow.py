"""The narrowings of a declaration that the program's guards accept whole (issue #41): per dim, the run of
accepted sizes around the example or the multiples ``m * k + r`` through it, chosen one dim at a time by what they
give up of the declared box (computed over every size with ``probes.solver``, not guessed).

Plain sympy and NumPy over a ``probes.proof.Proof``'s solution; nothing of the package above ``probes.solver``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

@dataclasses.dataclass
class Narrowing:
    """One declared dim narrowed so that no guard refuses a size it keeps: to ``[lo, hi]``, or to the sizes
    ``m * k + r`` in it (a derived dim), with what it gives up of the declared box."""

    symbol: str
    lo: int
    hi: int
    step: int = 1
    offset: int = 0
    kept: int = 0  # sizes of this dim it keeps
    lost: int = 0  # points of the declared box it gives up


MAX_STEP = 64  # the largest multiple a derived-dim fix is looked for with


def narrowings(proof: Any, model: Any) -> tuple[list[Narrowing], str]:
    """The per-dim narrowings, chosen one dim at a time by what they give up (the fewest declared sizes, computed
    over the whole box, not guessed), until the program's guards refuse nothing left in the box (issue #41). Each
    keeps the example's size. ``([], why)`` where none does: a dim narrowed to one size (a constant is no fix),
    a guard only sampled, or a guard that no narrowing of the dims it reads removes."""
    from .solver import solve

    box = dict(proof.solution.box)
    examples = model.example_values()
    guards = [d.guard for d in proof.solution.decided]
    chosen: dict[str, Narrowing] = {}
    for _ in range(len(box) + 1):
        sol = solve(guards, box)
        if not sol.refusing:
            return list(chosen.values()), ""
        if sol.sampled or sol.undecided:
            return [], "the program's guards could not all be decided over the declared sizes"
        best: Narrowing | None = None
        for sym in dict.fromkeys(s for d in sol.refusing for s in d.symbols):
            bad = bad_values(sol, sym) if sym not in chosen else None  # one narrowing per dim holds for all
            if bad is None:
                continue
            lo, hi = box[sym]
            others = math.prod(h - l + 1 for s, (l, h) in box.items() if s != sym)
            for cand in _candidates(sym, lo, hi, bad, examples[sym]):
                cand.lost = (hi - lo + 1 - cand.kept) * others
                if best is None or cand.lost < best.lost:
                    best = cand
        if best is None:
            return [], "no narrowing of one dim at a time removes every refused size"
        if best.kept < 2:
            return [], "the only narrowing keeps one size of a dim: a constant is no fix"
        chosen[best.symbol] = best
        box[best.symbol] = (best.lo, best.hi)
        if best.step > 1:  # a derived dim: the solver decides its multiples as k of ``m * k + r``
            guards = [_stepped(g, model.symbols[best.symbol], best.step, best.offset) for g in guards]
            box[best.symbol] = ((best.lo - best.offset) // best.step, (best.hi - best.offset) // best.step)
    return [], "no narrowing of one dim at a time removes every refused size"


def _stepped(guard: Any, sym: Any, step: int, offset: int) -> Any:
    from .solver import Guard

    return Guard(guard.expr.xreplace({sym: step * sym + offset}), guard.text, guard.source, guard.ok)


def bad_values(sol: Any, sym: str) -> Any:
    """Per size of ``sym`` in the box: whether some guard refuses it at some sizes of the others."""
    import numpy as np

    from .solver import refused_points

    lo, hi = sol.box[sym]
    bad = np.zeros(hi - lo + 1, dtype=bool)
    for d in sol.refusing:
        if sym not in d.symbols:
            continue
        mask = refused_points(type(sol)([d], [], sol.box), d.symbols)
        if mask is None:
            return None
        shape = [sol.box[s][1] - sol.box[s][0] + 1 for s in d.symbols]
        axes = tuple(i for i, s in enumerate(d.symbols) if s != sym)
        bad |= mask.reshape(shape).any(axis=axes) if axes else mask
    return bad


def _candidates(sym: str, lo: int, hi: int, bad: Any, example: int) -> list[Narrowing]:
    """The run of accepted sizes around the example, and every ``m * k + r`` through the example whose sizes are
    all accepted."""
    if not lo <= example <= hi or bad[example - lo]:
        return []
    a = b = example
    while a - 1 >= lo and not bad[a - 1 - lo]:
        a -= 1
    while b + 1 <= hi and not bad[b + 1 - lo]:
        b += 1
    out = [Narrowing(sym, a, b, kept=b - a + 1)]
    for m in range(2, min(MAX_STEP, hi - lo) + 1):
        r = example % m
        first = lo + (r - lo) % m
        sizes = range(first, hi + 1, m)
        if len(sizes) > out[0].kept and not bad[first - lo::m].any():
            out.append(Narrowing(sym, first, sizes[-1], m, r, kept=len(sizes)))
    return out



__all__ = ["Narrowing", "narrowings", "bad_values", "MAX_STEP"]
