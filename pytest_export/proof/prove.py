"""The program's own guards proved over the whole declared range, or the exact sizes they refuse (issue #41).

export records every shape guard it adds in the program's shape environment (``Ne(s77, 37)``, ``s0*s53 != 64``);
the program's ``_guards_fn`` checks them at every call. ``prove`` maps them onto the declared dims (derived dims
substituted to their roots, AUTO roots included; axes export tied that the declaration keeps independent get their
equality as a guard) and decides each over every size of the declared box with ``proof.solver``. A guard on a dim
that promises no range (a bare ``Dim.AUTO``) limits what is drawn, not the promise: it is recorded, not a finding.

``prove_program`` does the same for a program alone, over the ranges it keeps (a fix pasted back).

No pytest; torch only through the program's own records.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..util import finite_int
from .guardsource import record_of, substituted
from .solver import Decided, Guard, Solution, solve

RANGE_SOURCE = "the program's range_constraints"
TIE_SOURCE = "export made these axes one symbol"


def relation_text(expr: Any) -> str:
    """A relation as people write it: ``h*w == 64``."""
    import sympy

    if isinstance(expr, sympy.Eq):
        return f"{expr.lhs} == {expr.rhs}"
    if isinstance(expr, sympy.Ne):
        return f"{expr.lhs} != {expr.rhs}"
    return str(expr)


def _point_text(point: tuple[int, ...]) -> str:
    return str(point[0]) if len(point) == 1 else "(" + ", ".join(map(str, point)) + ")"


@dataclasses.dataclass
class Proof:
    """The program's guards over the declared box: what was proved, the sizes refused, what was only sampled."""

    solution: Solution
    names: dict[str, str]  # symbol -> the declared name(s) people read
    limits: list[Guard] = dataclasses.field(default_factory=list)  # guards on dims that promise no range

    @property
    def proved(self) -> bool:
        return self.solution.proved

    def refusals(self) -> list[Decided]:
        return self.solution.refusing

    def refused_text(self, d: Decided, limit: int = 6, more: int = 0) -> str:
        """``refused where h*w == 64: 3 of 841 sizes of (h, w): (4, 16), (8, 8), (16, 4)`` and where it came from."""
        dims = [self.names.get(s, s) for s in d.symbols]
        of = dims[0] if len(dims) == 1 else "(" + ", ".join(dims) + ")"
        count = d.count_text if d.exact else f"at least {d.count_text} ({self.how(d)})"
        shown = ", ".join(_point_text(p) for p in d.examples[:limit]) + (", ..." if d.refused > limit else "")
        alone = self._one_dim(d)
        if alone is not None:  # a guard over several dims that refuses by one of them alone (#54): said for it
            i, sizes = alone
            where = f"{dims[i]} == {sizes[0]}" if len(sizes) == 1 else f"{dims[i]} in {{{', '.join(map(str, sizes))}}}"
            others = ", ".join(n for j, n in enumerate(dims) if j != i)
            text = (f"refused where {where}, at every size of {others} (the guard `{d.guard.ok}`): {count} of {of}: "
                    f"{shown}")
        else:
            text = f"refused where {d.guard.text}: {count} of {of}: {shown}"
        if len(dims) > 1 and alone is None:
            text += f": a relation between {' and '.join(dims)}, no size of one alone"
        if more:
            text += f" (and {more} more guard{'s' * (more != 1)} of that line, refusing the same sizes)"
        if d.guard.source:
            text += f"; the guard was added at {d.guard.source}"
        return text

    def _one_dim(self, d: Decided, shown: int = 4) -> tuple[int, list[int]] | None:
        """``(i, sizes)`` where a guard over several dims refuses exactly the points whose ``i``-th dim is one of
        ``sizes`` (at most ``shown``), whatever the others: ``Mod(h*w, b*h*w) == 0`` refuses ``b == 1``. None
        otherwise, or where its box is not enumerated."""
        import numpy as np

        from .solver import ENUMERATE_LIMIT, evaluate, grid, magnitude

        if len(d.symbols) < 2 or not d.exact or d.total is None or d.total > ENUMERATE_LIMIT:
            return None
        ranges = [self.solution.box[s] for s in d.symbols]
        by_name = {str(s): s for s in d.guard.expr.free_symbols}
        syms = [by_name[n] for n in d.symbols]
        wide = magnitude(d.guard.expr, dict(zip(syms, ranges))) >= 1 << 62
        cols = grid(ranges, 0, d.total, object if wide else np.int64)
        ok = np.broadcast_to(np.asarray(evaluate(d.guard.expr, dict(zip(syms, cols))), dtype=bool), cols[0].shape)
        bad = ~ok.reshape([hi - lo + 1 for lo, hi in ranges])
        for i, (lo, _) in enumerate(ranges):
            axes = tuple(j for j in range(len(ranges)) if j != i)
            per = bad.any(axis=axes)
            if per.any() and (bad == np.expand_dims(per, axes)).all() and int(per.sum()) <= shown:
                return i, [lo + int(k) for k in np.flatnonzero(per)]
        return None

    def how(self, d: Decided) -> str:
        """How ``d`` was decided, its dims in the declaration's names."""
        text = d.how
        for sym in sorted(d.to or {}, key=len, reverse=True):
            text = text.replace(f"{sym}=", f"{self.names.get(sym, sym)}=")
        return text

    def grouped(self) -> list[tuple[Decided, int]]:
        """The refusing guards, one per line of the model and refused set: (the first, how many more)."""
        out: dict[tuple, list[Decided]] = {}
        for d in self.refusals():
            out.setdefault((d.guard.source, tuple(d.symbols), d.refused, tuple(d.examples)), []).append(d)
        return [(ds[0], len(ds) - 1) for ds in out.values()]

    def line(self) -> str:
        """The coverage line: ``guards: proved over all 841 sizes (1 guard)``, or what was refused or sampled."""
        sol = self.solution
        n = len(sol.decided)
        guards = f"{n} guard{'s' * (n != 1)}" if n else "no guards recorded"
        if not sol.box:  # only bare Dim.AUTO axes: nothing promised to prove over (issue #53)
            return ("guards: no declared range to prove over (bare Dim.AUTO lets export choose)" + self._limits_text()
                    if self.limits else "guards: no declared range to prove over, and no guards recorded")
        if sol.proved:
            every = f"all {sol.size_text}" if sol.size is not None else f"every one of the {sol.size_text}"
            return f"guards: proved over {every} ({guards})" + self._limits_text()
        parts = []
        if sol.refusing:
            parts.append(f"{sum(1 for _ in sol.refusing)} of {guards} refuse declared sizes")
        if sol.sampled:
            parts.append("sampled: " + "; ".join(f"`{d.guard.ok}` ({self.how(d)})" for d in sol.sampled[:3]))
        if sol.undecided:
            parts.append("not decided: " + "; ".join(f"`{g.ok}` ({why})" for g, why in sol.undecided[:3]))
        return f"guards over the {sol.size_text}: " + "; ".join(parts) + self._limits_text()

    def _limits_text(self) -> str:
        """What a bare ``Dim.AUTO`` let export choose: the relations its program accepts only within (issue #53)."""
        if not self.limits:
            return ""
        shown = "; ".join(f"`{g.ok}`" for g in self.limits[:3]) + (" ..." if len(self.limits) > 3 else "")
        return f"; the program accepts only where {shown} (bare Dim.AUTO: export's choice, not decided)"

    def to_dict(self) -> dict[str, Any]:
        sol = self.solution
        return {
            "proved": sol.proved, "sizes": sol.size, "guards": len(sol.decided),
            "box": {self.names.get(s, s): list(r) for s, r in sol.box.items()},
            "refused": [{"where": d.guard.text, "dims": [self.names.get(s, s) for s in d.symbols],
                         "count": None if d.refused == math.inf else int(d.refused), "of": d.total, "exact": d.exact,
                         "examples": [list(p) for p in d.examples], "source": d.guard.source} for d in sol.refusing],
            "sampled": [{"guard": d.guard.ok, "how": self.how(d)} for d in sol.sampled],
            "undecided": [{"guard": g.ok, "why": why} for g, why in sol.undecided],
            "limits": [g.ok for g in self.limits],
            "line": self.line(),
        }


def refusing(decided: list[Decided], values: dict[str, int]) -> Decided | None:
    """The first of ``decided`` (guards that refuse declared sizes) whose guard fails at ``values`` (symbol -> size):
    the program refuses these sizes, as a fact of its guards; None where none of them does."""
    import sympy

    for d in decided:
        free = d.guard.expr.free_symbols
        if all(str(s) in values for s in free):
            if d.guard.expr.xreplace({s: sympy.Integer(values[str(s)]) for s in free}) == sympy.false:
                return d
    return None


def _guard(expr: Any, names: dict[Any, Any], source: str) -> Guard:
    import sympy

    return Guard(expr, relation_text(sympy.Not(expr).xreplace(names)), source, relation_text(expr.xreplace(names)))


def program_guards(ep: Any, symbols: dict[str, Any], shown: dict[Any, Any] | None = None) -> list[Guard] | None:
    """``ep``'s recorded shape guards as solver guards over ``symbols`` (name -> sympy symbol: the names the box is
    keyed by), derived dims substituted to their roots; None where torch kept no record (a loaded program)."""
    import sympy

    rec = record_of(ep)
    if rec is None:
        return None
    by_expr = shown or {sym: sym for sym in symbols.values()}
    out = []
    for expr, source in rec.guards:
        e = substituted(rec, expr)
        if e == sympy.true:
            continue
        out.append(_guard(e, by_expr, source))
    return out


def prove(ep: Any, model: Any) -> Proof | None:
    """The program's guards over the declared box of ``model`` (an ``audit.FuzzModel``); None where torch kept no
    record of them. Never raises: a proof that cannot be built is None, and the probes decide alone."""
    try:
        return _prove(ep, model)
    except Exception:  # noqa: BLE001 - torch-internal records; the probes still run
        return None


def _prove(ep: Any, model: Any) -> Proof | None:
    import sympy

    rec_guards = program_guards(ep, model.symbols)
    if rec_guards is None:
        return None
    names = {v.symbol: "/".join(v.names) for v in model.vars}
    shown = {model.symbols[v.symbol]: sympy.Symbol(v.names[0] if v.names else v.symbol, integer=True)
             for v in model.vars}
    # a promised range, and a bare Dim.DYNAMIC (dynamic and independent by declaration: a relation between such
    # axes is a finding); a guard on a bare AUTO limits what is drawn: export's choice, shown, not decided (#53)
    promised = {v.symbol for v in model.vars if v.promised or v.dynamic}
    guards, limits = [], []
    for g in rec_guards:
        g = _guard(g.expr, shown, g.source)
        free = {str(s) for s in g.expr.free_symbols}
        (guards if not free - promised or not free & {v.symbol for v in model.vars} else limits).append(g)
    for fresh, origin in model.ties.items():
        if fresh in model.symbols and origin in model.symbols:
            guards.append(_guard(sympy.Eq(model.symbols[fresh], model.symbols[origin]), shown, TIE_SOURCE))
    for v in model.vars:  # what export kept, where narrower than the declaration (the audit names it too)
        sym = model.symbols[v.symbol]
        vr = ep.range_constraints.get(sym)
        if v.promised and vr is not None:
            lo, hi = finite_int(vr.lower), finite_int(vr.upper)
            kept = [sym >= lo] if lo is not None and lo > max(v.lo, 2) else []
            kept += [sym <= hi] if hi is not None and (v.unbounded or hi < v.hi) else []
            if kept:
                guards.append(_guard(sympy.And(*kept) if len(kept) > 1 else kept[0], shown, RANGE_SOURCE))
    # the declared box: a dim without a max is decided over its whole range (``v.hi`` is only how far it is drawn)
    decided = [v for v in model.vars if v.symbol in promised]
    box = {v.symbol: (v.lo, None if v.unbounded else v.hi) for v in decided}
    sol = solve(guards, box, caps={v.symbol: v.hi for v in decided if v.unbounded})
    return Proof(sol, names, limits)


def _labels(ep: Any, syms: dict[str, Any]) -> dict[str, str]:
    """Each symbol as the input axis it came from (``x.shape[0]``), where torch recorded one; else its name."""
    from .guardsource import axis_label, shape_env_of

    env = shape_env_of(ep)
    sources = getattr(env, "var_to_sources", {}) if env is not None else {}
    return {n: next(filter(None, map(axis_label, sources.get(s, []))), n) for n, s in syms.items()}


def prove_program(ep: Any, box: dict[str, tuple[int, int]] | None = None,
                  names: dict[str, str] | None = None) -> Proof | None:
    """A program's own guards over the ranges it keeps (its ``range_constraints`` for the symbols of its inputs,
    or ``box``): what a fix pasted back is held to. None where torch kept no record. ``names``: a symbol -> the
    ``Dim`` it stands for, where no input axis is it alone (a derived dim's root)."""
    try:
        import sympy
        import torch

        syms: dict[str, Any] = {}
        for node in ep.graph.nodes:
            val = node.meta.get("val") if node.op == "placeholder" else None
            for s in (list(val.shape) if isinstance(val, torch.Tensor) else [val]):
                if isinstance(s, torch.SymInt):
                    for f in s.node.expr.free_symbols:
                        syms[str(f)] = f
        if box is None:
            box = {}
            for name, sym in syms.items():
                vr = ep.range_constraints.get(sym)
                lo, hi = (finite_int(vr.lower), finite_int(vr.upper)) if vr is not None else (None, None)
                box[name] = (max(lo or 0, 0), hi)  # hi None: decided over the whole unbounded range
        labels = _labels(ep, syms)
        labels.update({k: v for k, v in (names or {}).items() if labels.get(k) == k})
        guards = program_guards(ep, syms, {s: sympy.Symbol(labels[n], integer=True) for n, s in syms.items()})
        if guards is None:
            return None
        sol = solve(guards, box, caps={n: max(lo, 64) for n, (lo, hi) in box.items() if hi is None})
        return Proof(sol, labels)
    except Exception:  # noqa: BLE001 - torch-internal records
        return None


__all__ = ["Proof", "prove", "prove_program", "program_guards", "relation_text", "RANGE_SOURCE", "TIE_SOURCE"]
