"""The shape-guard solver (issue #41) agrees with brute force: sympy, one point at a time, over the whole box."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy
from hypothesis import given, settings, strategies as st
from torch.utils._sympy.functions import FloorDiv, Mod as TorchMod, PythonMod

from pytest_export.proof.narrow import refused_points
from pytest_export.proof.solver import Guard, decide, solve

SYMS = [sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(3)]
OUTSIDE = sympy.Symbol("u0", integer=True)  # in no box (unbacked, data-dependent); signless, so sympy decides nothing
RELATIONS = [sympy.Eq, sympy.Ne, sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt]
MAX_POINTS = 600  # brute force costs ~0.2 ms a point: keep each box small enough to stay fast


def holds(expr, point: dict) -> bool:
    """Brute force: ``expr`` at one point (symbol -> int). Division by zero, or anything but plain true, refuses."""
    try:
        value = expr.xreplace({s: sympy.Integer(v) for s, v in point.items()})
    except ZeroDivisionError:
        return False
    return value is sympy.true


def own_symbols(expr, box: dict) -> list[str]:
    names = {str(s) for s in expr.free_symbols}
    return [n for n in box if n in names]


def points(box: dict, names) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(box[n][0], box[n][1] + 1) for n in names)))


def brute(expr, box: dict) -> tuple[list[str], list[tuple[int, ...]], list[bool]]:
    """The guard's own symbols (in the box's order), their points (row-major) and, for each, whether it is refused."""
    names = own_symbols(expr, box)
    by_name = {str(s): s for s in expr.free_symbols}
    pts = points(box, names)
    return names, pts, [not holds(expr, {by_name[n]: v for n, v in zip(names, p)}) for p in pts]


@st.composite
def terms(draw, syms, depth=2):
    """An integer term of the kind torch's shape environment writes: sums, products, constants, floor division and
    mod (constant and symbolic divisors), Max and Min."""
    leaf = st.sampled_from(syms) | st.sampled_from([-3, -1, 1, 2, 3, 5, 8, 16, 37]).map(sympy.Integer)
    if depth == 0 or draw(st.sampled_from(["leaf", "op", "op"])) == "leaf":
        return draw(leaf)
    sub = terms(syms, depth - 1)
    kind = draw(st.sampled_from(["add", "mul", "floordiv", "floordiv_sym", "floordiv_half", "pythonmod",
                                 "pythonmod_sym", "mod", "torch_mod", "max", "min"]))
    if kind == "add":
        return draw(sub) + draw(sub)
    if kind == "mul":
        return draw(sub) * draw(sub)
    if kind == "floordiv":
        return FloorDiv(draw(sub), sympy.Integer(draw(st.integers(1, 9))))
    if kind == "floordiv_sym":  # a divisor that is zero (refused) or negative at some points
        divisor = draw(sub)
        if divisor.is_number:  # a constant divisor is the case above; a zero one cannot even be written
            divisor = draw(st.sampled_from(syms)) - divisor
        return FloorDiv(draw(sub), divisor)
    if kind == "floordiv_half":  # FloorDiv(s, FloorDiv(s, 2)): divides by zero where s < 2
        s = draw(st.sampled_from(syms))
        return FloorDiv(s, FloorDiv(s, sympy.Integer(draw(st.integers(2, 4)))))
    if kind == "pythonmod":
        return PythonMod(draw(sub), sympy.Integer(draw(st.integers(1, 7))))
    if kind == "pythonmod_sym":
        return PythonMod(draw(sub), draw(st.sampled_from(syms)) - sympy.Integer(draw(st.integers(0, 3))))
    if kind == "mod":
        return sympy.Mod(draw(sub), sympy.Integer(draw(st.integers(1, 7))))
    if kind == "torch_mod":  # torch's C-style Mod asserts a non-negative dividend: a product of sizes
        dividend = math.prod(draw(st.lists(st.sampled_from(syms), min_size=1, max_size=2)))
        return TorchMod(dividend, sympy.Integer(draw(st.integers(1, 7))))
    if kind == "max":
        return sympy.Max(draw(sub), draw(sub))
    return sympy.Min(draw(sub), draw(sub))


@st.composite
def relations(draw, syms):
    for _ in range(3):  # sympy decides many on its own (``s0 >= 1``, ``3 == 5``): some of those, not mostly those
        rel = draw(st.sampled_from(RELATIONS))
        rhs = terms(syms, 1) if draw(st.booleans()) else st.integers(1, 60).map(sympy.Integer)
        out = rel(draw(terms(syms)), draw(rhs))
        if out not in (sympy.true, sympy.false):
            break
    return out


@st.composite
def formulas(draw, syms):
    kind = draw(st.sampled_from(["rel", "rel", "rel", "and", "or", "not"]))
    if kind == "rel":
        return draw(relations(syms))
    if kind == "and":
        return sympy.And(draw(relations(syms)), draw(relations(syms)))
    if kind == "or":
        return sympy.Or(draw(relations(syms)), draw(relations(syms)))
    inner = draw(st.sampled_from([relations(syms), formulas(syms)]))
    return sympy.Not(draw(inner))


@st.composite
def problems(draw):
    """A box over 1-3 symbols (lo in 0..20, width 0..30, shrunk to at most MAX_POINTS points), 1-3 guards on them."""
    n = draw(st.integers(1, 3))
    syms = SYMS[:n]
    los = [draw(st.integers(0, 20)) for _ in syms]
    widths = [draw(st.integers(0, 30)) for _ in syms]
    while math.prod(w + 1 for w in widths) > MAX_POINTS:
        i = widths.index(max(widths))
        widths[i] //= 2
    box = {str(s): (lo, lo + w) for s, lo, w in zip(syms, los, widths)}
    exprs = draw(st.lists(formulas(syms), min_size=1, max_size=3))
    return box, exprs, draw(st.data())


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(problems())
def test_decide_and_solve_agree_with_brute_force(problem):
    box, exprs, data = problem
    names = list(box)
    every = points(box, names)
    refused_anywhere = np.zeros(len(every), dtype=bool)
    by_guard = []
    for expr in exprs:
        own, pts, refused = brute(expr, box)
        bad = [p for p, r in zip(pts, refused) if r]
        by_guard.append((expr, own, bad))

        d = decide(Guard(expr), box, limit=len(pts))  # total <= limit: every point, exactly
        assert d.symbols == own
        assert d.total == len(pts)
        assert d.exact and d.checked == d.total
        assert d.refused == len(bad), expr
        assert d.examples == bad[:8]  # the first refused points, row-major

        if len(own) == 1:  # one symbol: decided exactly whatever the limit (a closed form, or every size: #53)
            limit = data.draw(st.integers(0, len(pts) - 1), label="limit")
            s = decide(Guard(expr), box, limit=limit)
            assert s.exact and s.total == len(pts) and s.refused == len(bad) and s.examples == bad[:8], expr
        elif own:  # a limit below the box's size: sampled, never exact, never more refusals than there are
            limit = data.draw(st.integers(0, len(pts) - 1), label="limit")
            s = decide(Guard(expr), box, limit=limit)
            assert not s.exact and s.total == len(pts)
            assert s.refused <= len(bad)
            assert set(s.examples) <= set(bad) and s.examples == sorted(s.examples)
            assert len(s.examples) == min(s.refused, 8)

        bad_set, index = set(bad), [names.index(n) for n in own]  # a guard on no symbol refuses all or nothing
        refused_anywhere |= [tuple(p[i] for i in index) in bad_set for p in every]

    solution = solve([Guard(e) for e in exprs], box)
    assert not solution.undecided and not solution.sampled
    assert solution.proved == (not refused_anywhere.any())
    distinct = list(dict.fromkeys(e for e in exprs if e is not sympy.true))
    assert [d.guard.expr for d in solution.decided] == distinct
    counts = {expr: len(bad) for expr, _, bad in by_guard}
    assert [d.refused for d in solution.decided] == [counts[e] for e in distinct]

    got = refused_points(solution, names)
    assert got.shape == (len(every),) and got.dtype == bool
    assert got.tolist() == refused_anywhere.tolist()

    # a sub-box: only the guards that read nothing else count
    sub = [n for n in names if data.draw(st.booleans(), label=f"keep {n}")] or names[:1]
    sub_points = points(box, sub)
    want = np.zeros(len(sub_points), dtype=bool)
    for expr, own, bad in by_guard:
        if bad and set(own) <= set(sub):
            bad_set = set(bad)
            want |= [tuple(p[sub.index(n)] for n in own) in bad_set for p in sub_points]
    assert refused_points(solution, sub).tolist() == want.tolist()

    for i in data.draw(st.lists(st.integers(0, len(every) - 1), max_size=3), label="points"):
        assert solution.accepts(dict(zip(names, every[i]))) == (not refused_anywhere[i])

    # a guard that reads a symbol the box does not vary is undecided, not decided on the rest
    outside = sympy.Ne(data.draw(terms(SYMS[: len(names)], 1), label="term") + OUTSIDE, 3)
    with pytest.raises(KeyError, match="u0"):
        decide(Guard(outside), box)
    mixed = solve([Guard(outside)] + [Guard(e) for e in exprs], box)
    assert [g.expr for g, _ in mixed.undecided] == [outside] and "u0" in mixed.undecided[0][1]
    assert [d.guard.expr for d in mixed.decided] == distinct
    assert not mixed.proved


def test_ne_refuses_exactly_the_one_size():
    s = SYMS[0]
    d = decide(Guard(sympy.Ne(s, 37)), {"s0": (2, 64)})
    assert (d.refused, d.examples, d.exact, d.total) == (1, [(37,)], True, 63)
    solution = solve([Guard(sympy.Ne(s, 37))], {"s0": (2, 64)})
    assert not solution.proved and np.flatnonzero(refused_points(solution, ["s0"])).tolist() == [37 - 2]
    assert solve([Guard(sympy.Ne(s, 37))], {"s0": (38, 64)}).proved


def test_product_ne_refuses_the_factorizations():
    h, w = sympy.symbols("h w", integer=True, positive=True)
    box = {"h": (4, 32), "w": (4, 32)}
    d = decide(Guard(sympy.Ne(h * w, 64)), box)
    assert d.exact and d.symbols == ["h", "w"]
    assert (d.refused, d.examples) == (3, [(4, 16), (8, 8), (16, 4)])
    grid = refused_points(solve([Guard(sympy.Ne(h * w, 64))], box), ["h", "w"]).reshape(29, 29)
    assert [(int(i) + 4, int(j) + 4) for i, j in zip(*np.nonzero(grid))] == [(4, 16), (8, 8), (16, 4)]


def test_product_le_refuses_the_points_above_the_hyperbola():
    a, b = sympy.symbols("a b", integer=True, positive=True)
    box = {"a": (1, 16), "b": (1, 16)}
    want = [(i, j) for i in range(1, 17) for j in range(1, 17) if i * j > 64]
    d = decide(Guard(sympy.Le(a * b, 64)), box)
    assert d.exact and d.refused == len(want) == 256 - sum(min(16, 64 // i) for i in range(1, 17))
    assert d.examples == want[:8]
    sampled = decide(Guard(sympy.Le(a * b, 64)), box, limit=10)
    assert not sampled.exact and sampled.refused <= len(want) and set(sampled.examples) <= set(want)


def test_wide_products_are_decided_without_wrapping_around():
    """(2**30)**3 = 2**90 wraps around int64 (to 0): the solver must evaluate such a guard in Python ints."""
    a, b, c = SYMS
    top = 2**30
    box = {"s0": (top - 63, top), "s1": (top - 1, top), "s2": (top - 1, top)}  # 256 points: enumerated
    every = points(box, list(box))
    for expr in [sympy.Le(a * b * c, 2**90 - 1), sympy.Ne(a * b * c, 2**90), sympy.Gt(a * b * c, 2**89),
                 sympy.Ne(PythonMod(a * b * c, 2**62 + 1), 0), sympy.Lt(FloorDiv(a * b * c, 2**60), 2**30 - 1)]:
        want = [p for p in every if not holds(expr, dict(zip(SYMS, p)))]
        d = decide(Guard(expr), box)
        assert d.exact and d.total == 256
        assert (d.refused, d.examples) == (len(want), want[:8]), expr
    assert decide(Guard(sympy.Ne(a * b * c, 2**90)), box).examples == [(top, top, top)]
    assert solve([Guard(sympy.Gt(a * b * c, 2**89))], box).proved
    # too large to enumerate: sampled (corners included), and each refused point really refused
    huge = {"s0": (1, 2**40), "s1": (1, 2**40), "s2": (top, top)}
    d = decide(Guard(sympy.Le(a * b * c, 2**110 - 1)), huge)
    assert not d.exact and d.total == 2**80 and (d.refused, d.examples) == (1, [(2**40, 2**40, top)])
    d = decide(Guard(sympy.Le(a * b * c, 2**100)), huge)
    assert not d.exact and d.refused >= 1
    assert all(not holds(d.guard.expr, dict(zip(SYMS, p))) for p in d.examples)


def test_refused_points_of_a_wide_guard_do_not_wrap_around():
    a, b = SYMS[:2]
    box = {"s0": (0, 1), "s1": (2**32 - 1, 2**32)}
    guard = Guard(sympy.Ge(a * b**2, 2))  # refuses s0 == 0 only; in int64, b**2 wraps to 0 or below
    assert decide(guard, box).examples == [(0, 2**32 - 1), (0, 2**32)]
    assert refused_points(solve([guard], box), ["s0", "s1"]).tolist() == [True, True, False, False]


def test_a_sampled_box_includes_its_top_corner():
    a, b, c = SYMS
    huge = {"s0": (1, 2**40), "s1": (1, 2**40), "s2": (1, 2**40)}  # 44 edge values a dim: 44**3 > 8192
    d = decide(Guard(sympy.Le(a * b * c, 2**120 - 1)), huge)  # refuses the top corner only
    assert not d.exact and (d.refused, d.examples) == (1, [(2**40, 2**40, 2**40)])


@pytest.mark.parametrize("expr", [
    sympy.Ne(sympy.Mod(SYMS[0], 2**63), 1),  # refuses s0 == 1: the solver finds nothing (2**63 wraps to -2**63)
    sympy.Eq(FloorDiv(SYMS[0] + 2**63, 2**63), 1),  # holds everywhere: the solver refuses s0 = 1, 2, 3
    sympy.Ne(PythonMod(SYMS[0], 2**64), 1),  # refuses s0 == 1: the solver raises OverflowError
])
def test_a_constant_divisor_beyond_int64_is_not_cast_to_int64(expr):
    box = {"s0": (0, 3)}
    _, pts, refused = brute(expr, box)
    d = decide(Guard(expr), box)
    assert (d.refused, d.examples) == (sum(refused), [p for p, r in zip(pts, refused) if r])


# ---- one symbol over any range: unbounded and huge (issue #53) ----------------------------------------------------

S = SYMS[0]


@st.composite
def one_symbol_guards(draw):
    """A one-symbol guard as torch writes them: a relation between terms of ``s0`` and constants (``Eq``/``Ne`` on a
    size, an inequality, a ``Mod`` or floor division by a constant, a product), combined by And/Or."""
    const = st.sampled_from([2, 3, 4, 8, 37, 100, 333, 1000, 4096]).map(sympy.Integer)

    def term():
        kind = draw(st.sampled_from(["s", "lin", "mod", "floordiv", "square", "nested"]))
        c = draw(const)
        if kind == "s":
            return S
        if kind == "lin":
            return draw(st.sampled_from([1, 2, 3, 384])) * S + draw(st.integers(-5, 5))
        if kind == "mod":
            return PythonMod(draw(st.sampled_from([1, 2, 3])) * S + draw(st.integers(0, 3)), draw(st.sampled_from([2, 3, 4, 8])))
        if kind == "floordiv":
            return FloorDiv(S, draw(st.sampled_from([2, 4, 16])))
        if kind == "square":
            return S * S - c
        return PythonMod(FloorDiv(S, 2), draw(st.sampled_from([2, 3])))

    def relation():
        return draw(st.sampled_from(RELATIONS))(term(), draw(const) if draw(st.booleans()) else draw(st.integers(0, 7)))

    first = relation()
    how = draw(st.sampled_from(["one", "and", "or"]))
    return first if how == "one" else (sympy.And if how == "and" else sympy.Or)(first, relation())


def constants(expr) -> list[int]:
    return [abs(int(a)) for a in sympy.preorder_traversal(expr) if getattr(a, "is_Integer", False)]


@settings(max_examples=300, deadline=None)
@given(expr=one_symbol_guards(), lo=st.integers(0, 40), hi=st.sampled_from([None, 1 << 23, 5000]))
def test_one_symbol_guards_over_unbounded_and_huge_ranges_agree_with_brute_force(expr, lo, hi):
    """Decided exactly over ``[lo, hi]`` (no max, or 8M sizes), whatever the range: the refused sizes the solver names
    are, on a window past every constant of the guard, what brute force finds; and the count beyond the window
    follows the guard's period."""
    if expr is sympy.true or expr is sympy.false or not expr.free_symbols:
        return
    d = decide(Guard(expr), {"s0": (lo, hi)}, limit=0)
    assert d.exact, expr
    # the oracle: plain Python integers, one size at a time, on a window past every constant times every divisor
    # (torch's floor division and modulo are Python's)
    fast = sympy.lambdify(S, expr, modules=[{"FloorDiv": lambda a, b: a // b, "PythonMod": lambda a, b: a % b}])
    big = max(constants(expr) + [1])
    period = 3 * 16
    end = lo + 16 * 4 * (big + 8) + 4 * period
    if hi is not None:
        end = min(end, hi)
    refused = [v for v in range(lo, end + 1) if not fast(v)]
    assert [p[0] for p in d.examples] == [v for v in refused][:len(d.examples)], expr
    assert len(d.examples) == min(8, len(refused)) or (d.refused == math.inf or d.refused > len(refused)), expr
    if d.refused != math.inf and hi is not None:
        assert d.refused >= len(refused)
    if refused and refused[-1] > end - 2 * period and hi is None:  # refused all the way out: infinitely many
        assert d.refused == math.inf, expr
    if d.refused != math.inf and hi is None:  # finitely many: all of them lie in the window
        assert d.refused == len(refused), expr
