"""One-symbol guards decided in closed form, over any range, a range without a max included (issue #53).

A guard over one size ``s`` built from integer constants, ``+``, ``*``, whole powers, ``Mod``/``FloorDiv`` (and
torch's ``PythonMod``, ``CleanDiv``, ``CeilDiv``, ``IntTrueDivFloor``) by constants, relations and ``And``/``Or``/
``Not`` is, on each residue class ``s = P*k + r`` (``P`` the product of its divisors), a boolean combination of
polynomial relations in ``k``. Past the largest root bound of those polynomials (Cauchy's: every real root of
``a_n k^n + ... + a_0`` lies within ``1 + max |a_i / a_n|``) each relation keeps its sign, so the guard's truth
is periodic with period ``P`` from ``P * (K + 1)`` on. ``window`` returns where that tail starts and its period;
the solver then evaluates every size below it and one period of the tail, and counts the rest by residue: exact,
whatever the range's size.

Plain sympy: no torch, nothing of the package.
"""

from __future__ import annotations

import math
from typing import Any

MAX_PERIOD = 4096  # the product of a guard's divisors past which no closed form is tried
MAX_WINDOW = 1 << 24  # sizes below the periodic tail that are evaluated, at most


class NoClosedForm(Exception):
    """The guard has a form this module has no rule for (a divisor that is no constant, ``Max``, ...)."""


def _name(e: Any) -> str:
    return type(e).__name__


def _divisors(e: Any, out: list[int]) -> None:
    if _name(e) in ("Mod", "PythonMod", "FloorDiv", "CleanDiv", "CeilDiv", "IntTrueDivFloor"):
        c = e.args[1]
        if not getattr(c, "is_Integer", False) or int(c) <= 0:
            raise NoClosedForm("a divisor that is no positive constant")
        out.append(int(c))
    for a in getattr(e, "args", ()):
        _divisors(a, out)


def _poly(e: Any, s: Any, k: Any, period: int, r: int) -> Any:
    """``e`` at ``s = period * k + r``, with every ``Mod``/division resolved: a polynomial in ``k`` (or a boolean
    combination of relations between such polynomials)."""
    import sympy

    if e == s:
        return period * k + r
    if getattr(e, "is_Integer", False) or e is sympy.true or e is sympy.false:
        return e
    if getattr(e, "is_Symbol", False):
        raise NoClosedForm(f"a second symbol {e}")
    name = _name(e)
    args = [_poly(a, s, k, period, r) for a in e.args]
    if e.is_Add:
        return sympy.Add(*args)
    if e.is_Mul:
        return sympy.Mul(*args)
    if e.is_Pow:
        if not getattr(e.args[1], "is_Integer", False) or int(e.args[1]) < 0:
            raise NoClosedForm("a power that is no whole number")
        return args[0] ** int(e.args[1])
    if name in ("Mod", "PythonMod", "FloorDiv", "CleanDiv", "CeilDiv", "IntTrueDivFloor"):
        c = int(e.args[1])
        num = -args[0] if name == "CeilDiv" else args[0]
        p = sympy.Poly(sympy.expand(num), k)
        coeffs = p.all_coeffs()
        if not all(getattr(a, "is_Integer", False) for a in coeffs):
            raise NoClosedForm("a coefficient that is no whole number")
        if any(int(a) % c for a in coeffs[:-1]):
            raise NoClosedForm("a period longer than the product of the divisors")
        rest = int(coeffs[-1]) % c  # Python's modulo: the sign of the divisor, as torch's sizes use
        if name in ("Mod", "PythonMod"):
            return sympy.Integer(rest)
        q = sympy.expand((num - rest) / c)
        return -q if name == "CeilDiv" else q
    if name in ("Equality", "Unequality", "LessThan", "StrictLessThan", "GreaterThan", "StrictGreaterThan"):
        return type(e)(args[0], args[1], evaluate=False)
    if name in ("And", "Or", "Not"):
        return type(e)(*args, evaluate=False) if name != "Not" else sympy.Not(args[0], evaluate=False)
    raise NoClosedForm(name)


def _bound(e: Any, k: Any) -> int:
    """Past which ``k`` every relation inside ``e`` keeps its sign (Cauchy's root bound of each difference)."""
    import sympy

    name = _name(e)
    if name in ("Equality", "Unequality", "LessThan", "StrictLessThan", "GreaterThan", "StrictGreaterThan"):
        diff = sympy.expand(e.args[0] - e.args[1])
        if not diff.free_symbols:
            return 0
        coeffs = sympy.Poly(diff, k).all_coeffs()
        lead = abs(coeffs[0])
        return int(math.ceil(1 + max((abs(a) / lead for a in coeffs[1:]), default=0)))
    return max((_bound(a, k) for a in getattr(e, "args", ()) if not getattr(a, "is_Integer", False)), default=0)


def window(expr: Any, s: Any) -> tuple[int, int]:
    """``(start, period)``: from ``start`` on, ``expr``'s truth at ``s`` depends only on ``s % period``. Raises
    ``NoClosedForm`` where the guard has no rule here, or its periodic tail starts too far out to reach."""
    import sympy

    found: list[int] = []
    _divisors(expr, found)
    period = math.prod(found) if found else 1
    if period > MAX_PERIOD:
        raise NoClosedForm(f"a period of {period}")
    k = sympy.Symbol("k", integer=True, nonnegative=True)
    bound = 0
    try:
        for r in range(period):
            bound = max(bound, _bound(_poly(expr, s, k, period, r), k))
    except (sympy.PolynomialError, sympy.polys.polyerrors.GeneratorsNeeded, TypeError, ValueError) as exc:
        raise NoClosedForm(str(exc)) from None
    start = period * (bound + 1)
    if start + period > MAX_WINDOW:
        raise NoClosedForm(f"its periodic tail starts at {start}")
    return start, period


def decide_one(expr: Any, s: Any, lo: int, hi: int | None, refused_in: Any, keep: int
               ) -> tuple[float, list[int], tuple[int, int]]:
    """``expr`` over the sizes ``[lo, hi]`` of ``s`` (``hi`` None: no max): ``(how many it refuses (math.inf:
    infinitely many), the smallest ``keep`` of them, (start, period) of its periodic tail)``. ``refused_in(a, b,
    keep)`` evaluates every size of a finite ``[a, b]``. Raises ``NoClosedForm``."""
    start, period = window(expr, s)
    end = start + period - 1 if hi is None else min(hi, start + period - 1)
    refused, found = refused_in(lo, end, keep)
    first = max(lo, end + 1)
    if hi is None or first <= hi:  # the tail: each residue refused in one period is refused all the way
        _, one_period = refused_in(start, start + period - 1, period)
        more: list[int] = []
        for size in one_period:
            residue = size % period
            refused += count_from(first, hi, residue, period)
            member = first + (residue - first) % period
            more += [m for m in range(member, member + period * keep, period) if hi is None or m <= hi]
        found = found + sorted(more)[:max(0, keep - len(found))]
    return refused, found, (start, period)


def count_from(first: int, hi: int | None, residue: int, period: int) -> float:
    """How many sizes ``s`` in ``[first, hi]`` have ``s % period == residue`` (``hi`` None: infinitely many)."""
    start = first + (residue - first) % period
    if hi is None:
        return math.inf
    return 0 if start > hi else (hi - start) // period + 1


__all__ = ["window", "decide_one", "count_from", "NoClosedForm", "MAX_WINDOW"]
