"""The narrowings of a declaration that the program's guards accept whole (issue #41): per dim, the run of
accepted sizes around the example or the multiples ``m * k + r`` through it, chosen one dim at a time by what they
give up of the declared box (computed over every size with ``proof.solver``, not guessed).

Plain sympy and NumPy over a ``proof.prove.Proof``'s solution; nothing of the package above ``proof.solver``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Sequence

from .solver import ENUMERATE_LIMIT, ONE_SYMBOL_LIMIT

if TYPE_CHECKING:
    from .solver import Solution


@dataclasses.dataclass
class Narrowing:
    """One declared dim narrowed so that no guard refuses a size it keeps: to ``[lo, hi]``, or to the sizes
    ``m * k + r`` in it (a derived dim), with what it gives up of the declared box."""

    symbol: str
    lo: int
    hi: int | None  # None: no max (a dim declared without one, whose refusals all lie below ``lo``)
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
    ends = _windows(proof, model)
    if ends is None:
        if any(len(d.symbols) > 1 for d in proof.solution.refusing):
            return [], ("no Dim excludes a relation between dims: where the model needs it, tie them in the "
                        "declaration (one shared Dim, or a derived Dim such as b = a - 1); else make the model accept "
                        "every combination (each axis is independent by declaration)")
        return [], "a guard over a dim without a max could only be sampled"
    box.update({s: (box[s][0], end) for s, end in ends.items()})
    chosen: dict[str, Narrowing] = {}
    for _ in range(len(box) + 1):
        sol = solve(guards, box)
        if not sol.refusing:
            out = list(chosen.values())
            for n in out:  # a narrowing that reaches past every refusal of a dim without a max keeps it unbounded
                if n.symbol in ends and n.hi >= ends[n.symbol] - n.step + 1 and not any(
                        d.refused == math.inf for d in proof.solution.decided if n.symbol in d.symbols):
                    n.hi = None
            return out, ""
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


def _windows(proof: Any, model: Any) -> dict[str, int] | None:
    """For each dim without a max, a finite end past which each of its guards repeats with its period (a one-symbol
    closed form) and no refused size of the others' lies: narrowings are chosen in it. None where a guard on such a
    dim was only sampled."""
    sol = proof.solution
    caps = {v.symbol: v.hi for v in model.vars}
    out: dict[str, int] = {}
    for sym, (lo, hi) in sol.box.items():
        if hi is not None:
            continue
        mine = [d for d in sol.decided if sym in d.symbols]
        if any(not d.exact for d in mine):
            return None
        ends = [lo + 1, caps.get(sym, lo), *(d.tail[0] + d.tail[1] for d in mine if d.tail)]
        ends += [p[d.symbols.index(sym)] + 1 for d in mine for p in d.examples]
        out[sym] = max(ends)
    return out


def _stepped(guard: Any, sym: Any, step: int, offset: int) -> Any:
    from .solver import Guard

    return Guard(guard.expr.xreplace({sym: step * sym + offset}), guard.text, guard.source, guard.ok)


def bad_values(sol: Any, sym: str) -> Any:
    """Per size of ``sym`` in the box: whether some guard refuses it at some sizes of the others."""
    import numpy as np

    lo, hi = sol.box[sym]
    bad = np.zeros(hi - lo + 1, dtype=bool)
    for d in sol.refusing:
        if sym not in d.symbols:
            continue
        # one dim's sizes are held whole as far as a one-symbol guard is decided (a range of millions, #53)
        mask = refused_points(type(sol)([d], [], sol.box), d.symbols,
                              limit=ONE_SYMBOL_LIMIT if len(d.symbols) == 1 else ENUMERATE_LIMIT)
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



def refused_count(proof: Any, symbol: str) -> str:
    """``though the program refuses 1 of them`` for a dim without a max, from the guards on it alone."""
    alone = [d for d in proof.solution.decided if d.symbols == [symbol] and d.refused]
    if not alone:
        return "though the program refuses sizes of it only together with the others'"
    n = sum(d.refused for d in alone)
    return "though the program refuses " + ("infinitely many of them" if n == math.inf else
                                             f"{int(n)} size{'s' * (n != 1)} of it")


def refused_points(solution: Solution, symbols: Sequence[str], limit: int = ENUMERATE_LIMIT) -> Any:
    """A boolean NumPy array over the sub-box of ``symbols`` (row-major): True where some guard that reads only
    those symbols refuses. None where that sub-box is too large to hold."""
    import numpy as np

    from .solver import Unsupported, magnitude, grid, holds_at, evaluate

    ranges = [solution.box[s] for s in symbols]
    if any(hi is None for _, hi in ranges):
        return None
    total = math.prod(hi - lo + 1 for lo, hi in ranges)
    if total > limit:
        return None
    wide = any(magnitude(d.guard.expr, {s: solution.box[str(s)] for s in d.guard.expr.free_symbols
                                     if str(s) in solution.box}) >= 1 << 62 for d in solution.refusing)
    cols = grid(ranges, 0, total, object if wide else np.int64)
    env = {s: c for s, c in zip(symbols, cols)}
    refused = np.zeros(total, dtype=bool)
    for d in solution.decided:
        if not d.refused or not set(d.symbols) <= set(symbols):
            continue
        syms = {str(s): s for s in d.guard.expr.free_symbols}
        try:
            ok = evaluate(d.guard.expr, {syms[n]: env[n] for n in d.symbols})
        except Unsupported:
            ok = np.array([holds_at(d.guard.expr, {n: int(env[n][i]) for n in d.symbols}) is not False
                           for i in range(total)])
        refused |= ~np.broadcast_to(np.asarray(ok, dtype=bool), (total,))
    return refused


__all__ = ["Narrowing", "narrowings", "bad_values", "refused_count", "refused_points", "MAX_STEP"]
