"""Whether a suggested ``dynamic_shapes`` keeps the declared promise (issue #41): it turns no declared dynamic axis
into a constant (torch's own fix does, for a size-1 example), and export keeps every root the fix declares as
declared (``b = 2*_b`` with ``_b = Dim('_b', max=32)`` keeps ``_b`` in [2, 32], so its program refuses b=2).

torch and the package's helpers (``util``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..util import finite_int


finite = finite_int  # an int bound, or None where infinite


def dim_call(name: str, lo: Any, hi: Any) -> str:
    args = [repr(name)]
    lo, hi = finite(lo), finite(hi)
    if lo:
        args.append(f"min={lo}")
    if hi is not None:
        args.append(f"max={hi}")
    return f"Dim({', '.join(args)})"


def _constants(declared: Any, fixed: Any, path: str = "dynamic_shapes") -> list[tuple[str, Any, int]]:
    """Where ``fixed`` turns an axis ``declared`` dynamic into a constant: (its key path, the declared entry, the
    size)."""
    from torch.export import Dim

    if isinstance(fixed, int) and not isinstance(fixed, bool):
        kind = str(getattr(getattr(declared, "type", None), "name", "")).lower()
        dynamic = isinstance(declared, Dim) or (declared is not None and hasattr(declared, "type") and kind != "static")
        return [(path, declared, fixed)] if dynamic else []
    if isinstance(declared, dict) and isinstance(fixed, dict):
        return [c for k in declared for c in _constants(declared[k], fixed.get(k), f"{path}[{k!r}]")]
    if isinstance(declared, (list, tuple)) and isinstance(fixed, (list, tuple)) and len(declared) == len(fixed):
        return [c for i, (d, f) in enumerate(zip(declared, fixed)) for c in _constants(d, f, f"{path}[{i}]")]
    return []


def declared_box(spec: Any, ep: Any) -> tuple[dict[str, tuple[int, int]] | None, list[str], dict[str, str]]:
    """The box a fix declares, keyed by the program's root symbols: each root ``Dim`` of ``spec`` matched to the
    program's symbol by its range, or by its max where export keeps it narrower than written (``_b = Dim('_b',
    max=32)`` for ``b = 2*_b`` keeps ``_b`` in [2, 32]); sizes from 1 (size 0 is probed apart). Also the ``Dim``
    to write for each root kept narrower, and each matched symbol's ``Dim`` name. ``(None, [], {})`` where a range is
    unbounded or unmatched."""
    from torch.export.dynamic_shapes import _DerivedDim, Dim
    from torch.utils._pytree import tree_iter

    declared: dict[str, tuple[int, int | None]] = {}
    for d in tree_iter(spec, is_leaf=lambda x: isinstance(x, Dim)):
        root = d.root if isinstance(d, _DerivedDim) else d
        if isinstance(root, Dim):
            declared[root.__name__] = (finite(root.min) or 0, finite(root.max))
    kept: dict[str, tuple[int, int | None]] = {}
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for size in (list(val.shape) if isinstance(val, torch.Tensor) else []):
            for sym in size.node.expr.free_symbols if isinstance(size, torch.SymInt) else ():
                vr = ep.range_constraints.get(sym)
                if vr is not None:
                    kept[str(sym)] = (finite(vr.lower) or 0, finite(vr.upper))
    box: dict[str, tuple[int, int]] = {}
    hints: list[str] = []
    names: dict[str, str] = {}  # the program's symbol -> the fix's Dim: what messages call it (#54)
    left = dict(kept)
    for name, (lo, hi) in declared.items():
        match = [s for s, r in left.items() if r == (lo, hi)] or [s for s, r in left.items() if r[1] == hi]
        if not match or hi is None:
            return None, [], {}
        sym = match[0]
        k_lo, _ = left.pop(sym)
        if k_lo > lo:
            hints.append(f"export keeps {name} in [{k_lo}, {hi}] where the fix declares [{lo}, {hi}]: write "
                         f"{dim_call(name, k_lo, hi)} if {name} below {k_lo} is not wanted")
        box[sym] = (max(lo, 1), hi)
        names[sym] = name
    for sym, (lo, hi) in left.items():
        if hi is None:
            return None, [], {}
        box[sym] = (max(lo, 1), hi)
    return box, hints, names


def _entry_text(d: Any) -> str:
    name = getattr(d, "__name__", None)
    bounds = ", ".join(f"{k}={finite(getattr(d, k, None))}" for k in ("min", "max")
                       if finite(getattr(d, k, None)) is not None)
    if name is not None:
        return f"Dim({name!r}" + (f", {bounds})" if bounds else ")")
    kind = str(getattr(getattr(d, "type", None), "name", "")).upper()
    return f"Dim.{kind}" + (f"({bounds})" if bounds else "")


def constants(declared: Any, fixed: Any) -> list[tuple[str, Any, int]]:
    """Where ``fixed`` turns an axis ``declared`` dynamic into a constant: (its key path, the declared entry, the
    size), in the declaration's order."""
    return _constants(declared, fixed)


def constant_problem(declared: Any, fixed: Any, cause: str | None = None) -> str:
    """Why a fix that makes a declared dynamic axis one size is none (issue #41): the declared range is the
    promise. A size-1 (or 0) example is the usual cause: export specializes it, whatever the declared min.
    ``cause``: what draft_export found makes it that size (``cause.cause_text``), said instead of a guess."""
    found = _constants(declared, fixed)
    if not found:
        return ""
    path, entry, size = found[0]
    why = (f"the example's size there is {size}, and export specializes a size-{size} example whatever the declared "
           f"min: give an example of size 2 or more there (size {size} stays inside the declared range, and "
           f"`guards` probes it)" if size in (0, 1) else cause or
           "the model needs that size exactly (a branch, an assert or int() on it): make the model take every "
           "declared size, or declare it static yourself")
    return (f"torch's suggested fix turns {path}, declared {_entry_text(entry)}, into the constant {size}, "
            f"which narrows the promise to one size: {why}")



_REFUSALS = ("Guard failed", "Expected input", "to be equal to", "to be <=", "to be >=", "is outside of",
             "Runtime assertion failed")


def _describe(err: BaseException) -> str:
    from ..util import describe_exception

    return describe_exception(err, 300).splitlines()[0]


def _input_path(module: Any, path: tuple) -> str:
    """A flat input's path as the user names it: ``x``, ``x['mask']``, ``args[2]``."""
    import inspect

    import torch.utils._pytree as pytree

    top, rest = path[1], pytree.keystr(path[2:])
    if path[0].idx == 1:
        return f"{top.key}{rest}"
    try:
        names = [n for n, p in inspect.signature(module.forward).parameters.items()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError, AttributeError):
        names = []
    return (names[top.idx] if top.idx < len(names) else f"args[{top.idx}]") + rest


def refused_sizes(ep: Any, args: tuple, kwargs: dict, module: Any = None) -> list[str]:
    """Sizes inside the ranges ``ep`` keeps that its module refuses, probed with fake tensors at each range's
    bounds and their neighbours (the other sizes at the example's), as ``name=size: why``."""
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensorMode

    keyed, spec = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    flat = [leaf for _, leaf in keyed]
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [nodes[s.arg.name].meta.get("val") if getattr(s.arg, "name", None) in nodes else None
            for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    if len(vals) != len(flat):
        return []
    hints: dict[Any, int] = {}
    labels: dict[Any, str] = {}
    for (path, leaf), val in zip(keyed, vals):
        sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
        actual = list(leaf.shape) if isinstance(leaf, torch.Tensor) else [leaf]
        for j, (s, n) in enumerate(zip(sizes, actual)):
            if isinstance(s, torch.SymInt) and s.node.expr.is_Symbol:
                hints[s.node.expr] = int(n)
                where = _input_path(module, path)
                labels.setdefault(s.node.expr, f"{where}.shape[{j}]" if isinstance(val, torch.Tensor) else where)
    out: list[str] = []
    module = ep.module()
    for sym, vr in ep.range_constraints.items():
        if sym not in hints:
            continue
        lo, hi = max(finite(vr.lower) or 0, 2), finite(vr.upper)
        for size in sorted({lo, lo + 1} | ({hi - 1, hi} if hi is not None else set())):
            if hi is not None and not lo <= size <= hi:
                continue
            values = {**hints, sym: size}
            mode = FakeTensorMode(allow_non_fake_inputs=True)
            new = []
            try:
                shapes = [[int(d.node.expr.xreplace(values)) if isinstance(d, torch.SymInt) else int(d)
                           for d in val.shape] if isinstance(val, torch.Tensor) else None for val in vals]
            except TypeError:  # an axis of a root no input carries alone (``2*_b``): the proof decides its guards
                continue
            with mode:
                for leaf, val in zip(flat, vals):
                    if isinstance(val, torch.Tensor):
                        shape = [int(d.node.expr.xreplace(values)) if isinstance(d, torch.SymInt) else int(d)
                                 for d in val.shape]
                        new.append(torch.empty(shape, dtype=leaf.dtype, device=leaf.device))
                    else:
                        new.append(int(val.node.expr.xreplace(values)) if isinstance(val, torch.SymInt) else leaf)
                a, k = pytree.tree_unflatten(new, spec)
                try:
                    module(*a, **k)
                except Exception as err:  # noqa: BLE001 - a refusal inside the kept range, or a limit of fakes
                    if any(r in str(err) for r in _REFUSALS):
                        out.append(f"{labels[sym]}={size} ({_describe(err)})")
    return out


# ---- printing a dynamic_shapes spec as Python ---------------------------------------------------

__all__ = ["dim_call", "finite", "constants", "constant_problem", "declared_box", "refused_sizes"]
