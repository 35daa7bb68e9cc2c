"""Shape guards decided over a whole box of sizes (issue #41): proved, or the exact set they refuse.

A program's shape guards are integer formulas over its symbols (``Ne(s77, 37)``, ``s0*s53 != 64``,
``Eq(Mod(s, 2), 0)``). ``solve`` decides each over every point of a box (one ``[lo, hi]`` per symbol): on its own
symbols only (most guards read one or two), evaluated vectorized with NumPy a chunk at a time, so that memory stays
small and a box of millions of points takes milliseconds. Where a guard's own box is too large to enumerate, it is
evaluated at the box's edges, powers of two and seeded random points, and marked sampled, never proved.

Plain sympy and NumPy: no torch, nothing of the package. torch's own integer functions (``FloorDiv``,
``PythonMod``, ``CleanDiv``, ...) are recognized by name, so that this module never imports torch.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from typing import Any, Iterable, Sequence

ENUMERATE_LIMIT = 1 << 22  # points of one guard's own box that are enumerated whole (exact)
ONE_SYMBOL_LIMIT = 1 << 24  # sizes of a one-symbol guard enumerated whole where it has no closed form
CHUNK = 1 << 18  # points evaluated at once
SAMPLES = 1 << 14  # points of a larger box that are evaluated (sampled, not proved)
EXAMPLES = 8  # refused points kept per guard, the smallest first


class Unsupported(Exception):
    """A formula this evaluator has no vectorized rule for."""


@dataclasses.dataclass
class Guard:
    """One guard: a sympy boolean over the box's symbols, how people read it, and where it came from."""

    expr: Any
    text: str = ""  # what it refuses, in the declaration's names: ``h*w == 64``
    source: str = ""
    ok: str = ""  # the guard itself, in the declaration's names: ``h*w != 64``


@dataclasses.dataclass
class Decided:
    """One guard decided over its own dims: how many of their points it refuses, the first few, and how."""

    guard: Guard
    symbols: list[str]  # the box's symbols it reads, in the box's order
    total: int | None  # points of its own dims (None: a dim without a max)
    refused: int | float  # of them, refused (a lower bound where sampled; math.inf: infinitely many)
    examples: list[tuple[int, ...]]  # refused points, in ``symbols``' order
    exact: bool  # every point decided
    checked: int  # points evaluated
    to: dict[str, int] | None = None  # where sampled over a dim without a max: how far each such dim was drawn
    tail: tuple[int, int] | None = None  # a one-symbol closed form: (start, period) of its periodic tail

    @property
    def how(self) -> str:
        if self.exact:
            return "every size"
        if self.to:
            return (f"sampled to {', '.join(f'{n}={v}' for n, v in self.to.items())} (of an unbounded range), "
                    "not proved")
        return f"sampled {self.checked} of {self.total} sizes"

    @property
    def count_text(self) -> str:
        """``3 of 841 sizes``, ``1 size of an unbounded range``, ``infinitely many sizes``."""
        if self.refused == math.inf:
            return "infinitely many sizes (of an unbounded range)"
        n = int(self.refused)
        if self.total is None:
            return f"{n} size{'s' * (n != 1)} of an unbounded range"
        return f"{n} of {self.total} sizes"


@dataclasses.dataclass
class Solution:
    """Every guard over the whole box: ``proved`` where each was decided exactly and none refuses a point."""

    decided: list[Decided]
    undecided: list[tuple[Guard, str]]  # guards that read symbols outside the box, or forms with no rule, and why
    box: dict[str, tuple[int, int]]

    @property
    def size(self) -> int | None:
        """Points of the box; None where a dim has no max."""
        if any(hi is None for _, hi in self.box.values()):
            return None
        return math.prod(hi - lo + 1 for lo, hi in self.box.values()) if self.box else 1

    @property
    def size_text(self) -> str:
        """``841 declared sizes``, or ``declared sizes (an unbounded range)``."""
        return "declared sizes (an unbounded range)" if self.size is None else f"{self.size} declared sizes"

    @property
    def refusing(self) -> list[Decided]:
        return [d for d in self.decided if d.refused]

    @property
    def sampled(self) -> list[Decided]:
        return [d for d in self.decided if not d.exact]

    @property
    def proved(self) -> bool:
        return not self.refusing and not self.sampled and not self.undecided

    def accepts(self, point: dict[str, int]) -> bool:
        """Whether every decided guard holds at ``point`` (symbol -> size)."""
        return all(holds_at(d.guard.expr, point) is not False for d in self.decided)


def _is(e: Any, *names: str) -> bool:
    return type(e).__name__ in names


def _np() -> Any:
    import numpy

    return numpy


def _safe(b: Any) -> tuple[Any, Any]:
    """A divisor with its zeros replaced by 1, and where they were: a plain int stays a plain int (an int64
    array would wrap a divisor of 2**63 or more)."""
    np = _np()
    if isinstance(b, int):
        return (b or 1), (b == 0)
    bad = b == 0
    return np.where(bad, 1, b), bad


def _floordiv(a: Any, b: Any) -> Any:
    np = _np()
    safe, bad = _safe(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a // safe if isinstance(a, int) and isinstance(safe, int) else np.floor_divide(a, safe)
    return out, bad


def evaluate(expr: Any, env: dict[Any, Any]) -> Any:
    """``expr`` at every point of ``env`` (sympy symbol -> NumPy array, all of one length): a NumPy array of ints
    or bools. A point where it divides by zero is False for a relation (a guard that cannot hold)."""
    value, bad = _eval(expr, env)
    np = _np()
    if bad is not None and np.any(bad):
        value = np.where(bad, False, value)
    return value


def _eval(e: Any, env: dict[Any, Any]) -> tuple[Any, Any]:
    """(value, mask of points where it is undefined, or None)."""
    import sympy

    np = _np()
    if e in env:
        return env[e], None
    if e is sympy.true or e is sympy.false or isinstance(e, bool):
        return bool(e), None
    if getattr(e, "is_Integer", False):
        return int(e), None
    if getattr(e, "is_Symbol", False):
        raise Unsupported(f"symbol {e} is outside the box")
    parts = [_eval(a, env) for a in e.args]
    vals = [p[0] for p in parts]
    bads = [p[1] for p in parts if p[1] is not None]
    bad = None
    for b in bads:
        bad = b if bad is None else (bad | b)

    def join(extra: Any) -> Any:
        return extra if bad is None else (bad | extra)

    if e.is_Add:
        return sum(vals[1:], vals[0]), bad
    if e.is_Mul:
        if any(getattr(a, "is_Rational", False) and not getattr(a, "is_Integer", False) for a in e.args):
            raise Unsupported("a rational coefficient")
        out = vals[0]
        for v in vals[1:]:
            out = out * v
        return out, bad
    if e.is_Pow:
        exp = e.args[1]
        if not getattr(exp, "is_Integer", False) or int(exp) < 0:
            raise Unsupported("a power that is not a whole non-negative number")
        return vals[0] ** int(exp), bad
    if _is(e, "FloorDiv", "CleanDiv", "IntTrueDivFloor"):
        out, zero = _floordiv(vals[0], vals[1])
        return out, join(zero)
    if _is(e, "Mod", "PythonMod"):
        q, zero = _floordiv(vals[0], vals[1])
        return vals[0] - q * _safe(vals[1])[0], join(zero)
    if _is(e, "CeilDiv"):
        q, zero = _floordiv(-np.asarray(vals[0]), vals[1])
        return -q, join(zero)
    name = type(e).__name__
    if name in _FOLDS:  # n-ary: Max, Min, And, Or
        out = vals[0]
        for v in vals[1:]:
            out = getattr(np, _FOLDS[name])(out, v)
        return out, bad
    if name in _BINARY:  # relations
        return getattr(np, _BINARY[name])(vals[0], vals[1]), bad
    if name in ("Abs", "Not"):
        return (np.abs if name == "Abs" else np.logical_not)(vals[0]), bad
    raise Unsupported(type(e).__name__)


_FOLDS = {"Max": "maximum", "Min": "minimum", "And": "logical_and", "Or": "logical_or"}
_BINARY = {"Equality": "equal", "Unequality": "not_equal", "LessThan": "less_equal", "StrictLessThan": "less",
           "GreaterThan": "greater_equal", "StrictGreaterThan": "greater"}


def magnitude(e: Any, box: dict[Any, tuple[int, int]]) -> int:
    """An upper bound of ``|e|`` over the box (of every subterm too): whether int64 can hold the evaluation."""
    if e in box:
        lo, hi = box[e]
        return max(abs(lo), abs(hi))
    if getattr(e, "is_Integer", False):
        return abs(int(e))
    args = [magnitude(a, box) for a in getattr(e, "args", ())]
    if not args:
        return 1
    if getattr(e, "is_Mul", False):
        return math.prod(max(a, 1) for a in args)
    if getattr(e, "is_Pow", False) and getattr(e.args[1], "is_Integer", False):
        return max(args[0], 1) ** max(int(e.args[1]), 1)
    return sum(args) + max(args)


def holds_at(expr: Any, point: dict[str, int]) -> bool | None:
    import sympy

    subs = {s: sympy.Integer(point[str(s)]) for s in expr.free_symbols if str(s) in point}
    try:
        value = expr.xreplace(subs)
        if getattr(value, "free_symbols", None):
            return None
        return bool(value)
    except (TypeError, ZeroDivisionError, ValueError):
        return False


def grid(ranges: Sequence[tuple[int, int]], start: int, stop: int, dtype: Any) -> list[Any]:
    """The points ``start..stop-1`` of the box's row-major order, one array per dim."""
    np = _np()
    idx = np.arange(start, stop, dtype=np.int64)
    out = []
    for lo, hi in reversed(ranges):
        n = hi - lo + 1
        out.append((idx % n + lo).astype(dtype))
        idx //= n
    return out[::-1]


def _samples(ranges: Sequence[tuple[int, int]], count: int, seed: int) -> list[tuple[int, ...]]:
    """The box's corners and each dim's edges, powers of two and seeded random points: ``count`` at most."""
    rng = random.Random(seed)
    points: list[tuple[int, ...]] = list(itertools.islice(itertools.product(*ranges), count // 4))  # corners
    per_dim = []
    for lo, hi in ranges:
        vals = {lo, hi, min(lo + 1, hi), max(hi - 1, lo)}
        vals.update(1 << k for k in range(63) if lo <= (1 << k) <= hi)
        per_dim.append(sorted(vals))
    for combo in itertools.product(*per_dim):
        points.append(combo)
        if len(points) >= count // 2:
            break
    while len(points) < count:
        points.append(tuple(rng.randint(lo, hi) for lo, hi in ranges))
    return points


def _enumerate(guard: Guard, syms: list[Any], ranges: Sequence[tuple[int, int]], total: int,
               examples: list[tuple[int, ...]], keep: int = EXAMPLES) -> int:
    """Every point of the (finite) box, a chunk at a time: how many the guard refuses (the first ``keep`` into
    ``examples``)."""
    import numpy as np

    dtype = object if magnitude(guard.expr, {s: r for s, r in zip(syms, ranges)}) >= 1 << 62 else np.int64
    refused = 0
    for start in range(0, total, CHUNK):
        cols = grid(ranges, start, min(start + CHUNK, total), dtype)
        ok = np.broadcast_to(np.asarray(evaluate(guard.expr, dict(zip(syms, cols))), dtype=bool), cols[0].shape)
        bad = np.flatnonzero(~ok)
        refused += int(bad.size)
        for i in bad[: max(0, keep - len(examples))]:
            examples.append(tuple(int(c[i]) for c in cols))
    return refused


def _refused_in(guard: Guard, sym: Any) -> Any:
    """``(a, b, keep) -> (how many sizes of [a, b] the one-symbol guard refuses, the first keep of them)``."""
    def count(a: int, b: int, keep: int) -> tuple[int, list[int]]:
        found: list[tuple[int, ...]] = []
        n = _enumerate(guard, [sym], [(a, b)], b - a + 1, found, keep) if b >= a else 0
        return n, [p[0] for p in found]
    return count


def decide(guard: Guard, box: dict[str, tuple[int, int | None]], *, limit: int = ENUMERATE_LIMIT, seed: int = 0,
           caps: dict[str, int] | None = None) -> Decided:
    """``guard`` over its own dims of ``box`` (symbol name -> (lo, hi); hi None: no max, ``caps`` says how far such a
    dim is sampled where no closed form decides it). Raises ``Unsupported`` for a form with no vectorized rule,
    ``KeyError`` for a symbol outside the box."""
    import numpy as np

    from .closed import NoClosedForm, decide_one

    by_name = {str(s): s for s in guard.expr.free_symbols}
    names = [n for n in box if n in by_name]
    missing = sorted(set(by_name) - set(box))
    if missing:
        raise KeyError(", ".join(missing))
    syms = [by_name[n] for n in names]
    ranges = [box[n] for n in names]
    unbounded = [n for n, (_, hi) in zip(names, ranges) if hi is None]
    total = None if unbounded else (math.prod(hi - lo + 1 for lo, hi in ranges) if ranges else 1)
    examples: list[tuple[int, ...]] = []
    if not syms:  # a guard on no varied symbol: it holds everywhere or nowhere
        holds = holds_at(guard.expr, {}) is not False
        return Decided(guard, [], 1, 0 if holds else 1, [] if holds else [()], True, 1)
    if total is not None and total <= limit:
        refused = _enumerate(guard, syms, ranges, total, examples)
        return Decided(guard, names, total, refused, examples, True, total)
    if len(syms) == 1:  # one symbol: decided exactly over any range (issue #53)
        try:
            refused, found, tail = decide_one(guard.expr, syms[0], *ranges[0], _refused_in(guard, syms[0]), EXAMPLES)
            return Decided(guard, names, total, refused, [(v,) for v in found], True, tail[0] + tail[1], tail=tail)
        except NoClosedForm:
            if total is not None and total <= ONE_SYMBOL_LIMIT:
                refused = _enumerate(guard, syms, ranges, total, examples)
                return Decided(guard, names, total, refused, examples, True, total)
    capped = [(lo, hi if hi is not None else max(lo, (caps or {}).get(n, lo + SAMPLES)))
              for n, (lo, hi) in zip(names, ranges)]
    wide = magnitude(guard.expr, {s: r for s, r in zip(syms, capped)}) >= 1 << 62
    points = _samples(capped, SAMPLES, seed)
    cols = [np.array([p[i] for p in points], dtype=object if wide else np.int64) for i in range(len(syms))]
    ok = np.broadcast_to(np.asarray(evaluate(guard.expr, dict(zip(syms, cols))), dtype=bool), cols[0].shape)
    bad = sorted({points[i] for i in np.flatnonzero(~ok)})
    to = {n: capped[names.index(n)][1] for n in unbounded} or None
    return Decided(guard, names, total, len(bad), bad[:EXAMPLES], False, len(points), to=to)


def _decide_slowly(guard: Guard, box: dict[str, tuple[int, int]], limit: int) -> Decided:
    """A form with no vectorized rule, by sympy point by point: every point of a small box, else samples."""
    names = [n for n in box if n in {str(s) for s in guard.expr.free_symbols}]
    ranges = [box[n] for n in names]
    total = math.prod(hi - lo + 1 for lo, hi in ranges) if ranges else 1
    exact = total <= limit
    points: Iterable[tuple[int, ...]] = (itertools.product(*(range(lo, hi + 1) for lo, hi in ranges)) if exact
                                         else _samples(ranges, min(limit, SAMPLES), 0))
    refused, examples, checked = 0, [], 0
    for p in points:
        checked += 1
        if holds_at(guard.expr, dict(zip(names, p))) is False:
            refused += 1
            if len(examples) < EXAMPLES:
                examples.append(tuple(p))
    return Decided(guard, names, total, refused, sorted(examples), exact, checked)


SLOW_LIMIT = 4096  # points a form with no vectorized rule is evaluated at by sympy, one by one


def solve(guards: Sequence[Guard], box: dict[str, tuple[int, int | None]], *, limit: int = ENUMERATE_LIMIT,
          caps: dict[str, int] | None = None) -> Solution:
    """Every guard over ``box``: each decided on its own dims (exact where they can be enumerated, and a one-symbol
    guard over any range, one without a max included), or recorded as undecided with the reason (a symbol the box
    does not vary: unbacked, data-dependent). ``caps``: how far a dim without a max is sampled where a guard on
    several dims cannot be decided whole."""
    import sympy

    decided: list[Decided] = []
    undecided: list[tuple[Guard, str]] = []
    seen: set[Any] = set()
    for g in guards:
        if g.expr in seen or g.expr is sympy.true:
            continue
        seen.add(g.expr)
        try:
            decided.append(decide(g, box, limit=limit, caps=caps))
        except KeyError as exc:
            undecided.append((g, f"it reads {exc.args[0]}, which the declaration does not vary"))
        except Unsupported:
            decided.append(_decide_slowly(g, box, SLOW_LIMIT))
    return Solution(decided, undecided, dict(box))


__all__ = ["Guard", "Decided", "Solution", "Unsupported", "evaluate", "decide", "solve", "grid", "holds_at", "magnitude",
           "ENUMERATE_LIMIT"]
