"""The audit of what export kept of a ``dynamic_shapes`` declaration, and the model the probes draw from.

``audit`` maps each declared axis to the exported program (user-input placeholder shapes looked up in
``range_constraints``) and classifies it as kept, narrowed or specialized: what export kept is measured
against the declaration, never the other way round. ``FuzzModel`` is what ``guards`` and ``fuzz`` sample from:
one variable per symbol, over the declared range (a bare ``Dim.AUTO``, which promises none, inside what export
kept).

No pytest here; torch is imported lazily by the functions that need it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .declare.shapes import Axis, Declaration, Root
from .proof.guardsource import refusing_guards
from .util import finite_int

KEPT, NARROWED, SPECIALIZED = "kept", "narrowed", "specialized"
REFUSED_IN_RANGE = "refused-in-range"  # the range was kept, yet the program refuses sizes in it (issue #18)

@dataclasses.dataclass
class Var:
    """One variable the fuzzer draws: a symbol export kept, in declared-and-achieved range."""

    symbol: str
    lo: int
    hi: int
    example: int
    names: list[str]  # declared roots (and axis labels) that take this value
    unbounded: bool = False
    # the declaration promises this range (a named Dim, bounds written on a hint, AdditionalInputs): sizes 1 (and
    # 0, where ``zero``) are inside the promise and probed as such (issue #18). A bare AUTO/DYNAMIC promises none.
    promised: bool = False
    zero: bool = False  # declared min 0: size 0 is probed as in range (its findings are warnings)
    # a bare Dim.DYNAMIC: no range promised, but dynamic and independent by declaration, so a relation the program
    # adds between such axes is a finding (issue #53); a bare AUTO lets export choose
    dynamic: bool = False


@dataclasses.dataclass
class FuzzModel:
    vars: list[Var]
    # per flat input: per axis, (sympy expr or int); for int inputs: key None
    shapes: dict[int, dict[int | None, Any]]
    symbols: dict[str, Any]  # symbol name -> sympy symbol
    # fresh symbol -> the program's symbol, where export tied axes the declaration keeps independent (issue #24)
    ties: dict[str, str] = dataclasses.field(default_factory=dict)
    # guards export kept between symbols, one of which promises no range: draws stay inside them (issue #24)
    relations: list[Any] = dataclasses.field(default_factory=list)

    def sizes(self, values: dict[str, int]) -> dict[int, dict[int | None, int]]:
        subs = {self.symbols[v.symbol]: values[v.symbol] for v in self.vars}
        out: dict[int, dict[int | None, int]] = {}
        for flat, axes in self.shapes.items():
            out[flat] = {ax: (int(e) if isinstance(e, int) else int(e.xreplace(subs))) for ax, e in axes.items()}
        return out

    def allowed(self, values: dict[str, int]) -> bool:
        """Whether ``values`` keep the relations export kept for symbols that promise no range."""
        if not self.relations:
            return True
        import sympy

        subs = {self.symbols[k]: sympy.Integer(v) for k, v in values.items() if k in self.symbols}
        try:
            return all(bool(r.xreplace(subs)) for r in self.relations)
        except TypeError:  # a relation over a symbol the values leave open: no limit known
            return True

    def fit(self, values: dict[str, int], keep: Any = ()) -> dict[str, int] | None:
        """``values``, or, where they break a kept relation, an assignment that keeps it by moving only symbols
        that promise no range, other than those in ``keep`` (to their example size, then their min); None where
        none does."""
        if self.allowed(values):
            return values
        free = [v for v in self.vars if not v.promised and v.symbol not in keep]
        for pick in (lambda v: v.example, lambda v: v.lo):
            moved = {**values, **{v.symbol: pick(v) for v in free}}
            if self.allowed(moved):
                return moved
        return None

    def example_values(self) -> dict[str, int]:
        return {v.symbol: v.example for v in self.vars}

    def named(self, values: dict[str, int]) -> dict[str, int]:
        return {n: values[v.symbol] for v in self.vars for n in v.names}


@dataclasses.dataclass
class Audit:
    rows: list[dict[str, Any]]
    failures: list[str]
    warnings: list[str]
    model: FuzzModel
    errors: list[str] = dataclasses.field(default_factory=list)  # axes the audit could not map (harness limits)
    row_symbols: list[str | None] = dataclasses.field(default_factory=list)  # per row, the symbol it maps to
    row_axes: list[tuple[int, int | None]] = dataclasses.field(default_factory=list)  # per row, (flat, dim)


def _placeholder_values(ep: Any) -> dict[str, Any]:
    """What the program holds for every user input leaf (placeholder ``meta["val"]``, or the constant), by keypath."""
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind

    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    vals = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.USER_INPUT:
            continue
        name = getattr(spec.arg, "name", None)
        node = nodes.get(name) if name is not None else None
        vals.append(node.meta.get("val") if node is not None else getattr(spec.arg, "value", None))
    tree = pytree.tree_unflatten(vals, ep.call_spec.in_spec)
    flat, _ = pytree.tree_flatten_with_path(tree)
    return {pytree.keystr(k): v for k, v in flat}


def _expr(v: Any) -> Any:
    """An int, or the sympy expression of a SymInt."""
    import torch

    if isinstance(v, torch.SymInt):
        e = v.node.expr
        return int(e) if e.is_number else e
    return int(v)


def kept_range(ep: Any, e: Any) -> tuple[int, int | None] | None:
    """What ``ep``'s range constraints keep for symbol or expression ``e``: ``(lo, hi)``, ``hi`` None for no
    bound; None where it has no constraint for it."""
    vr = ep.range_constraints.get(e)
    if vr is None:
        return None
    return finite_int(vr.lower) or 0, finite_int(vr.upper)


def audit(decl: Declaration, ep: Any, *, allow_static: bool = False, max_size: int = 64) -> Audit:
    """Declared vs achieved, per declared axis; the failures and warnings it implies; the model to fuzz."""
    import torch

    got = _placeholder_values(ep)
    rows, failures, warnings, errors = [], [], [], []
    row_symbols: list[str | None] = []
    row_axes: list[tuple[int, int | None]] = []
    promised: dict[str, bool] = {}
    zero: dict[str, bool] = {}
    dynamic: dict[str, bool] = {}
    shapes: dict[int, dict[int | None, Any]] = {}
    for i, key in enumerate(decl.keys):
        v = got.get(key)
        if isinstance(v, torch.Tensor):
            shapes[i] = {ax: _expr(s) for ax, s in enumerate(v.shape)}
        elif isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool):
            shapes[i] = {None: _expr(v)}
    model_shapes, ties = _untie(decl, shapes)
    symbols: dict[str, Any] = {}
    ranges: dict[str, list] = {}
    names: dict[str, list[str]] = {}
    examples: dict[str, int] = {}
    for ax in decl.axes:
        root = decl.roots[ax.root]
        e = shapes.get(ax.flat, {}).get(ax.dim)
        row = {"input": ax.path, "axis": ax.dim, "declared": ax.declared, "declared_range": [root.min, root.max]}
        row_symbols.append(None)
        row_axes.append((ax.flat, ax.dim))
        if e is None:
            row.update(achieved="?", achieved_range=None, status="error")
            rows.append(row)
            errors.append(f"{ax.label} (declared {ax.declared}) has no counterpart among the exported program's "
                          "inputs")
            continue
        if isinstance(e, int):
            row.update(achieved=e, achieved_range=[e, e], status=SPECIALIZED)
            rows.append(row)
            msg = (f"{ax.label} was declared {ax.declared} but export specialized it to {e} "
                   f"(code such as int(x.shape[...]), an assert on the size or a size-1 example fixes it)")
            if root.kind == "auto" and allow_static:
                row["note"] = "allowed by allow_static=True"  # the user's choice: recorded, no warning (#26)
            elif root.kind == "auto" and not root.bounded:
                failures.append(msg + "; pass allow_static=True if a static axis is what you want")
            else:
                failures.append(msg)
            continue
        free = sorted(e.free_symbols, key=str)
        sym = free[0] if len(free) == 1 else None
        achieved = kept_range(ep, sym) if sym is not None else None
        axis_range = kept_range(ep, e)
        row.update(achieved=str(e), achieved_range=list(achieved) if achieved else
                   (list(axis_range) if axis_range else None))
        status = KEPT
        if achieved is not None:
            lo, hi = achieved
            floor = root.min if ax.dim is None else max(root.min, 2)  # sizes 0 and 1 are specialized by design
            narrowed = lo > floor or (hi is not None and (root.max is None or hi < root.max))
            if narrowed:
                status = NARROWED
                msg = (f"{ax.label} was declared {ax.declared} with range {root.range_text()} but export kept only "
                       f"[{lo}, {'inf' if hi is None else hi}] (a branch or check on the size narrowed it)")
                culprits = refusing_guards(ep, str(sym), lo - 1 if lo > floor else hi + 1)
                if culprits:
                    msg += "; the guard" + (" that narrowed it: " if len(culprits) == 1 else "s that narrowed it: ") \
                        + "; ".join(culprits)
                if root.kind == "auto" and not root.bounded:
                    warnings.append(msg + "; fuzzing samples inside what export kept")
                else:
                    failures.append(msg)
        row["status"] = status
        rows.append(row)
        if sym is None:
            continue
        # the symbol fuzzing draws: the program's, or a fresh one where export tied axes the declaration does not
        e = model_shapes[ax.flat][ax.dim]
        sym = next(iter(e.free_symbols))
        row_symbols[-1] = str(sym)
        symbols[str(sym)] = sym
        # The declaration is the promise: a promised range is drawn and probed whole, whatever export kept (what
        # it kept is measured against the declaration, above). A bare AUTO/DYNAMIC promises nothing: draw inside
        # what export kept.
        is_promised = root.kind in ("dim", "additional") or root.bounded
        declared_in_sym = _root_range_in_symbol(e, sym, root, ax)
        zero_here = False
        if is_promised and declared_in_sym is not None:
            lo, hi = declared_in_sym
            if lo <= 0 and ax.dim is not None:
                lo, zero_here = 1, True  # size 0 is probed by `guards` alone (its findings are warnings)
        else:
            r_lo, r_hi = declared_in_sym or (0, None)
            lo, hi = achieved if achieved else (max(root.min, 2), root.max)
            lo = max(lo, r_lo)
            hi = r_hi if hi is None else (hi if r_hi is None else min(hi, r_hi))
            if e == sym:
                # sizes 0 and 1 are specialized by design, int inputs' too (issue #24); `guards` probes them (warnings)
                lo = max(lo, 2)
        key = str(sym)
        prev = ranges.get(key)
        if prev:
            lo, hi = max(lo, prev[0]), (hi if prev[1] is None else prev[1] if hi is None else min(hi, prev[1]))
        promised[key] = promised.get(key, True) and is_promised
        zero[key] = zero.get(key, True) and zero_here
        dynamic[key] = dynamic.get(key, True) and root.kind == "dynamic"
        ranges[key] = [lo, hi]
        names.setdefault(key, [])
        for n in (root.name,):
            if n not in names[key]:
                names[key].append(n)
        if key not in examples:
            examples[key] = _solve(e, sym, ax.example)
    out_vars = []
    for s, (lo, hi) in ranges.items():
        ex = examples.get(s, lo)
        unbounded = hi is None
        if unbounded:
            hi = max(max_size, lo, ex)
        if hi < lo:
            failures.append(f"no size satisfies both the declaration and what export kept for {', '.join(names[s])}")
            continue
        out_vars.append(Var(s, lo, hi, ex if ex is not None and lo <= ex <= hi else lo, names[s], unbounded,
                            promised=promised.get(s, False), zero=zero.get(s, False),
                            dynamic=dynamic.get(s, False) and not promised.get(s, False)))
    # tie AUTO axes that export unified: the table says so
    by_sym: dict[str, list[str]] = {}
    for row, ax in zip(rows, decl.axes):
        if row.get("status") in (KEPT, NARROWED) and isinstance(row.get("achieved"), str):
            by_sym.setdefault(row["achieved"], []).append(ax.label)
    for row, ax in zip(rows, decl.axes):
        peers = [lbl for lbl in by_sym.get(str(row.get("achieved")), []) if lbl != ax.label]
        if peers:
            row["equal_to"] = peers
    unpromised = {s for s, p in promised.items() if not p}
    model = FuzzModel(out_vars, model_shapes, symbols, ties, _relations(ep, symbols, unpromised))
    # the guards quoted in the lines above read torch's symbols (`s77 > 4`): in the declaration's names (#54)
    labels: dict[str, str] = {}
    for row in rows:
        if isinstance(row.get("achieved"), str) and re.fullmatch(r"s\d+", row["achieved"]):
            labels.setdefault(row["achieved"], row["input"] if row["axis"] is None else
                              f"{row['input']}.shape[{row['axis']}]")
    failures, warnings = ([_named(t, labels) for t in lines] for lines in (failures, warnings))
    return Audit(rows, failures, warnings, model, errors, row_symbols, row_axes)


def _named(text: str, labels: dict[str, str]) -> str:
    """``text`` with torch's symbols quoted in backticks as the axes they stand for."""
    return re.sub(r"`[^`]*`", lambda m: re.sub(r"(?<![\w.])s\d+\b", lambda s: labels.get(s.group(0), s.group(0)),
                                                 m.group(0)), text)


def _relations(ep: Any, symbols: dict[str, Any], unpromised: set[str]) -> list[Any]:
    """The guards export kept between symbols where one of them promises no range (issue #24: an int input
    declared ``Dim.AUTO`` used as ``x[:n]`` keeps ``n <= x.shape[0]``): what export kept, inside which such a
    symbol is drawn. A relation between promised symbols only is no limit on the draws: a refusal there is a
    finding."""
    from .proof.guardsource import shape_env_of

    env = shape_env_of(ep)
    known = set(symbols.values())
    out: list[Any] = []
    for guard in getattr(env, "guards", []) if env is not None else []:
        free = getattr(guard.expr, "free_symbols", set())
        if len(free) >= 2 and free <= known and any(str(s) in unpromised for s in free) and guard.expr not in out:
            out.append(guard.expr)
    return out


def _untie(decl: Declaration, shapes: dict[int, dict[int | None, Any]]) -> tuple[dict, dict[str, str]]:
    """The shapes fuzzing draws from, and the ties export made that the declaration does not (issue #24).

    The declaration is the promise: axes of different roots are independent where each root promises its own
    range (a named Dim, or a hint with bounds written on it). Where export made such axes one symbol (an
    ``if x.shape[0] == y.shape[0]:`` branch), each further root gets a fresh symbol, so that unequal sizes inside
    both ranges are drawn and probed; ``ties`` maps each fresh symbol to the program's. A bare ``Dim.AUTO`` promises
    nothing and follows the symbol export gave it; AdditionalInputs roots follow their examples."""
    import sympy

    model = {flat: dict(axes) for flat, axes in shapes.items()}
    roots_of: dict[Any, list[str]] = {}
    for ax in decl.axes:
        e = shapes.get(ax.flat, {}).get(ax.dim)
        root = decl.roots[ax.root]
        if e is None or isinstance(e, int) or len(e.free_symbols) != 1:
            continue
        if root.kind in ("dim", "auto", "dynamic") and (root.kind == "dim" or root.bounded):
            sym = next(iter(e.free_symbols))
            if ax.root not in roots_of.setdefault(sym, []):
                roots_of[sym].append(ax.root)
    ties: dict[str, str] = {}
    for sym, roots in roots_of.items():
        for i, name in enumerate(roots[1:], 1):
            fresh = sympy.Symbol(f"{sym}_{i}", integer=True, positive=True)
            ties[str(fresh)] = str(sym)
            for ax in decl.axes_of(name):
                e = model.get(ax.flat, {}).get(ax.dim)
                if e is not None and not isinstance(e, int) and sym in e.free_symbols:
                    model[ax.flat][ax.dim] = e.xreplace({sym: fresh})
    return model, ties


def _root_range_in_symbol(e: Any, sym: Any, root: Root, ax: Axis) -> tuple[int, int | None] | None:
    """The declared root range expressed in the exported symbol (usually the symbol is the root); None where the
    axis is not linear in the symbol."""
    import sympy

    coeff = e.coeff(sym) if e.is_Add or e.is_Mul else sympy.Integer(1)
    const = e.subs(sym, 0)
    try:
        ca, cb = int(coeff), int(const)
    except TypeError:
        return None
    if ca <= 0:
        return None
    # e = ca*sym + cb  and  e = ax.a*root + ax.b  =>  sym = (ax.a*root + ax.b - cb) / ca
    def conv(v: int, up: bool) -> int:
        num = ax.a * v + ax.b - cb
        return -(-num // ca) if not up else num // ca

    lo = conv(root.min, False)
    hi = conv(root.max, True) if root.max is not None else None
    return lo, hi


def _solve(e: Any, sym: Any, size: int) -> int | None:
    import sympy

    if e == sym:
        return size
    try:
        sols = sympy.solve(sympy.Eq(e, size), sym)
    except Exception:  # noqa: BLE001 - a form sympy cannot invert: the lower bound stands in
        return None
    ints = [int(s) for s in sols if getattr(s, "is_integer", False)]
    return ints[0] if ints else None


__all__ = ["audit", "kept_range", "Audit", "FuzzModel", "Var", "KEPT", "NARROWED", "SPECIALIZED", "REFUSED_IN_RANGE"]
