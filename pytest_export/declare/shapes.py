"""The model of a ``dynamic_shapes`` declaration: what the user promised, read before export.

``parse`` reads every form ``torch.export.export`` accepts and returns the root symbols with their declared
ranges and, for every declared axis, its affine form ``a*root + b``. It rejects, before export, what torch
would ignore silently or report far from the key (an axis past the tensor's rank, one name defined twice, an
example outside its own declared range).

No pytest here; torch is imported lazily by the functions that need it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..util import finite_int
from .case import expand_var_inputs, input_names
from .options import UsageError

@dataclasses.dataclass
class Root:
    """A declared root symbol: a named Dim, or one AUTO / DYNAMIC / AdditionalInputs axis (named by its path)."""

    name: str
    kind: str  # "dim" | "auto" | "dynamic" | "additional"
    min: int
    max: int | None  # None: unbounded
    bounded: bool  # the user wrote the bounds (a promise); a bare AUTO is not one
    example: int | None = None
    declared: str = ""

    def contains(self, v: int) -> bool:
        return v >= self.min and (self.max is None or v <= self.max)

    def range_text(self) -> str:
        return f"[{self.min}, {'inf' if self.max is None else self.max}]"


@dataclasses.dataclass
class Axis:
    """One declared-dynamic axis of an input (``dim`` None for an int input): size = a * root + b."""

    path: str  # e.g. "x", "inputs['mask']", "batch.a"
    flat: int  # index in the flattened (args, kwargs)
    dim: int | None
    root: str
    a: int = 1
    b: int = 0
    example: int = 0
    declared: str = ""

    @property
    def label(self) -> str:
        return self.path if self.dim is None else f"{self.path}.shape[{self.dim}]"

    def size(self, root_value: int) -> int:
        return self.a * root_value + self.b


@dataclasses.dataclass
class Declaration:
    roots: dict[str, Root]
    axes: list[Axis]
    paths: list[str]  # display path of every flat input leaf
    keys: list[str]  # pytree keystr of every flat input leaf (to match the exported program's placeholders)
    additional: list[tuple[tuple, dict]] = dataclasses.field(default_factory=list)

    def axes_of(self, root: str) -> list[Axis]:
        return [ax for ax in self.axes if ax.root == root]


# ---- parsing -------------------------------------------------------------------------------

def _dim_classes():
    import torch.export.dynamic_shapes as ds

    return ds.Dim, ds._DerivedDim, ds._DimHint


def _hint_type(hint: Any) -> str:
    return str(getattr(hint.type, "name", hint.type)).lower()  # "auto" | "dynamic" | "static"


def _affine(d: Any) -> tuple[Any, int, int]:
    """A derived Dim as (root Dim, a, b): torch only admits increasing integer-linear forms."""
    fn = d.fn
    b = int(fn(0))
    a = int(fn(1)) - b
    return d.root, a, b


def describe_dim(d: Any) -> str:
    """A Dim, a derived Dim or a hint as Python source (what the user would write)."""
    Dim, Derived, Hint = _dim_classes()
    if d is None:
        return "None"
    if isinstance(d, Hint):
        bounds = ", ".join(f"{k}={getattr(d, k)}" for k in ("min", "max") if getattr(d, k, None) is not None)
        return f"Dim.{_hint_type(d).upper()}" + (f"({bounds})" if bounds else "")
    if isinstance(d, Derived):
        return str(d.__name__)
    if isinstance(d, Dim):
        parts = [repr(d.__name__)]
        if d.min not in (None, 0):
            parts.append(f"min={d.min}")
        if finite_int(d.max) is not None:
            parts.append(f"max={d.max}")
        return f"Dim({', '.join(parts)})"
    return repr(d)


def _max_of(d: Any) -> int | None:
    return finite_int(getattr(d, "max", None))


def resolve(dynamic_shapes: Any, module: Any, args: tuple, kwargs: dict) -> tuple[Any, list]:
    """ShapesCollection / AdditionalInputs to the plain form, plus AdditionalInputs' extra examples."""
    import torch.export

    if isinstance(dynamic_shapes, torch.export.ShapesCollection):
        return dynamic_shapes.dynamic_shapes(module, args, kwargs), []
    if isinstance(dynamic_shapes, torch.export.AdditionalInputs):
        extra = []
        # private: AdditionalInputs has no public accessor of the examples given to ``add``
        for ex in getattr(dynamic_shapes, "_examples", []):
            if isinstance(ex, tuple) and len(ex) == 2 and isinstance(ex[0], tuple) and (ex[1] is None or isinstance(ex[1], dict)):
                extra.append((ex[0], dict(ex[1] or {})))
            else:
                extra.append((tuple(ex), {}))
        return dynamic_shapes.dynamic_shapes(module, args, kwargs), extra
    return dynamic_shapes, []


class _Symbols:
    """The declaration's symbols as they are read: one root per named Dim (defined once), one per AUTO / DYNAMIC
    axis (export may tie them, the audit sees it), and every declared axis as ``a * root + b``; each example checked
    against its root's form and range."""

    def __init__(self, where: str):
        self.where = where
        self.roots: dict[str, Root] = {}
        self.axes: list[Axis] = []

    def fail(self, key: str, problem: str, fix: str) -> None:
        raise UsageError(f"{self.where}: dynamic_shapes{key}: {problem}. {fix}")

    def axis(self, key: str, d: Any, path: str, flat: int, dim: int | None, example: int) -> None:
        """One declared-dynamic axis of the input at ``path`` (``dim`` None for an int input)."""
        name, a, b = self.root_for(key, d, path if dim is None else f"{path}.shape[{dim}]", example)
        self.axes.append(Axis(path, flat, dim, name, a, b, example, describe_dim(d)))

    def root_for(self, key: str, d: Any, label: str, example: int) -> tuple[str, int, int]:
        Dim, Derived, Hint = _dim_classes()
        if isinstance(d, Hint):
            kind = _hint_type(d)
            lo, hi = getattr(d, "min", None), getattr(d, "max", None)
            bounded = lo is not None or hi is not None
            while label in self.roots:  # an input path that is also a Dim's name
                label += "'"
            root = Root(label, kind, int(lo) if lo is not None else 0, int(hi) if hi is not None else None,
                        bounded, example, describe_dim(d))
            self._check_example(key, root, label, example, 1, 0)
            self.roots[label] = root
            return label, 1, 0
        if isinstance(d, Derived):
            base, a, b = _affine(d)
        else:
            base, a, b = d, 1, 0
        name = str(base.__name__)
        lo = int(base.min) if base.min is not None else 0
        hi = _max_of(base)
        prev = self.roots.get(name)
        if prev is not None and prev.kind == "dim":
            if (prev.min, prev.max) != (lo, hi):
                self.fail(key, f"Dim {name!r} is defined twice with different ranges: {prev.declared} and "
                               f"{describe_dim(base)}",
                          "Define each Dim once and reuse the object (or give the second one its own name)")
        else:
            if prev is not None:  # an AUTO/DYNAMIC root named by an input path that is also this Dim's name
                moved = prev.name + "'"
                while moved in self.roots:
                    moved += "'"
                prev.name = moved
                self.roots[moved] = self.roots.pop(name)
                for ax in self.axes:
                    if ax.root == name:
                        ax.root = moved
            self.roots[name] = Root(name, "dim", lo, hi, True, None, describe_dim(base))
        root = self.roots[name]
        self._check_example(key, root, label, example, a, b)
        return name, a, b

    def _check_example(self, key: str, root: Root, label: str, example: int, a: int, b: int) -> None:
        form = root.name if (a, b) == (1, 0) else f"{a}*{root.name} + {b}" if b else f"{a}*{root.name}"
        if (example - b) % a:
            self.fail(key, f"the example's {label} is {example}, which is not of the declared form {form}",
                      "Change the example input or the derived Dim")
        value = (example - b) // a
        if root.example is not None and root.example != value and root.kind == "dim":
            self.fail(key, f"the example's {label} is {example}, so {root.name} = {value}, but another example "
                           f"input gives {root.name} = {root.example}",
                      "Make the example inputs agree with the declared relation between their axes")
        if not root.contains(value):
            where = f"{root.name} = {value}" if (a, b) != (1, 0) else str(example)
            self.fail(key, f"the example's {label} is {where}, outside its own declared range {root.range_text()} "
                           f"of {root.declared}",
                      "Use an example inside the declared range, or widen the range")
        root.example = value


class _Walker:
    """The case's inputs walked beside their ``dynamic_shapes`` entries: each entry checked against the input it
    names (structure, keys, rank, axes, static sizes), each dynamic axis handed to the symbols."""

    def __init__(self, where: str, flat_index: dict[str, int]):
        self.symbols = _Symbols(where)
        self.fail = self.symbols.fail
        self.flat_index = flat_index  # the pytree key of every flat input leaf -> its index

    def walk(self, key: str, label: str, value: Any, spec: Any, prefix: tuple) -> None:
        import torch
        import torch.utils._pytree as pytree

        Dim, Derived, Hint = _dim_classes()
        if isinstance(value, torch.Tensor):
            self.tensor(key, label, value, spec, prefix)
            return
        if isinstance(value, int) and not isinstance(value, bool):
            if spec is None or (isinstance(spec, Hint) and _hint_type(spec) == "static") or isinstance(spec, int):
                return
            if not isinstance(spec, (Dim, Hint)):
                self.fail(key, f"{label} is an int input; its entry must be a Dim, Dim.AUTO/DYNAMIC/STATIC or None, "
                               f"got {spec!r}", "Write e.g. Dim('n', min=1, max=16) for it")
            self.symbols.axis(key, spec, label, self.flat_index[pytree.keystr(prefix)], None, value)
            return
        node = pytree._get_node_type(value)
        if node in pytree.SUPPORTED_NODES and not pytree.tree_is_leaf(value):
            entry = pytree.SUPPORTED_NODES[node]
            if entry.flatten_with_keys_fn is not None:
                keyed, _ = entry.flatten_with_keys_fn(value)
            else:
                children, _ = entry.flatten_fn(value)
                keyed = [(pytree.SequenceKey(i), c) for i, c in enumerate(children)]
            if spec is None:
                specs = [None] * len(keyed)
            elif isinstance(spec, dict) and isinstance(value, dict):
                missing = [k for k in spec if k not in value]
                if missing:
                    self.fail(f"{key}[{missing[0]!r}]", f"{label} has no key {missing[0]!r} (keys: "
                                                        f"{', '.join(map(repr, value))})", "Remove or rename the entry")
                specs = [spec.get(k.key if hasattr(k, "key") else k) for k, _ in keyed]
            elif isinstance(spec, (list, tuple)):
                if len(spec) != len(keyed):
                    self.fail(key, f"{label} has {len(keyed)} entries but its dynamic_shapes entry has {len(spec)}",
                              "Give one entry per element (None for static ones; dataclasses as a list in "
                              "field order)")
                specs = list(spec)
            else:
                self.fail(key, f"{label} is a {type(value).__name__}; its entry must be a "
                               f"{'dict by key' if isinstance(value, dict) else 'list/tuple by position'} or None, "
                               f"got {spec!r}", "Mirror the input's structure in dynamic_shapes")
            for (k, child), sub in zip(keyed, specs):
                self.walk(key + pytree.keystr((k,)), label + pytree.keystr((k,)), child, sub, prefix + (k,))
            return
        if spec is not None:
            self.fail(key, f"{label} is a {type(value).__name__} constant and cannot be dynamic, got {spec!r}",
                      "Use None for it")

    def tensor(self, key: str, label: str, t: Any, spec: Any, prefix: tuple) -> None:
        import torch.utils._pytree as pytree

        Dim, Derived, Hint = _dim_classes()
        if spec is None or (isinstance(spec, Hint) and _hint_type(spec) == "static"):
            return
        if isinstance(spec, (Dim, Hint)):
            self.fail(key, f"{label} is a tensor of rank {t.dim()}; its entry must map axes to Dims, got {spec!r}",
                      f"Write e.g. {{0: {describe_dim(spec)}}}")
        if isinstance(spec, dict):
            items = list(spec.items())
        elif isinstance(spec, (list, tuple)):
            if len(spec) != t.dim():
                self.fail(key, f"{label} has rank {t.dim()} (shape {tuple(t.shape)}) but its entry lists "
                               f"{len(spec)} axes", "Give one entry per axis (None for static axes) or a dict {axis: Dim}")
            items = list(enumerate(spec))
        else:
            self.fail(key, f"the entry for tensor {label} must be a dict {{axis: Dim}}, a list/tuple per axis or None, "
                           f"got {type(spec).__name__}", "Write e.g. {0: Dim('batch', max=64)}")
        for axis, d in items:
            if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < t.dim():
                self.fail(f"{key}[{axis!r}]", f"axis {axis!r} is past the rank of {label}, which has shape "
                                              f"{tuple(t.shape)} (axes 0..{t.dim() - 1})",
                          "torch.export would ignore this entry silently: fix the axis index")
            if d is None or (isinstance(d, Hint) and _hint_type(d) == "static"):
                continue
            if isinstance(d, int) and not isinstance(d, bool):
                if d != t.shape[axis]:
                    self.fail(f"{key}[{axis}]", f"static size {d} differs from the example's {label}.shape[{axis}] "
                                                f"= {t.shape[axis]}", "Fix the size or the example")
                continue
            if not isinstance(d, (Dim, Hint)):
                self.fail(f"{key}[{axis}]", f"expected a Dim, Dim.AUTO/DYNAMIC/STATIC or None, got {d!r}",
                          "Write e.g. Dim('batch', min=2, max=64)")
            self.symbols.axis(f"{key}[{axis}]", d, label, self.flat_index[pytree.keystr(prefix)], axis,
                              int(t.shape[axis]))


def parse(where: str, dynamic_shapes: Any, module: Any, args: tuple, kwargs: dict) -> Declaration:
    """The declaration model of a case; UsageError (naming the key and the fix) for a declaration torch would
    misread or ignore."""
    import torch.utils._pytree as pytree

    import torch

    try:
        spec, additional = resolve(dynamic_shapes, module, args, kwargs)
    except ValueError as exc:  # a ShapesCollection keyed by tensors the case does not pass: the test's mistake
        if not isinstance(dynamic_shapes, torch.export.ShapesCollection):
            raise
        raise UsageError(f"{where}: dynamic_shapes (a ShapesCollection) does not fit the case's inputs: {exc} Key it "
                         "by the very tensors the case passes (not copies of them)") from None
    flat, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))
    keys = [pytree.keystr(k) for k, _ in flat]
    p = _Walker(where, {k: i for i, k in enumerate(keys)})
    names = input_names(module, args, kwargs)
    tops: list[tuple[str, Any, tuple]] = [(names[i] if i < len(names) else f"args[{i}]", a,
                                           (pytree.SequenceKey(0), pytree.SequenceKey(i)))
                                          for i, a in enumerate(args)]
    tops += [(k, v, (pytree.SequenceKey(1), pytree.MappingKey(k))) for k, v in kwargs.items()]
    paths = []
    for k, _ in flat:
        top = k[1].idx if k[0].idx == 0 else None
        head = tops[top][0] if top is not None else k[1].key
        paths.append(head + pytree.keystr(k[2:]))
    spec = expand_var_inputs(spec, module, args, kwargs)
    if spec is not None:
        if isinstance(spec, dict):
            valid = [t[0] for t in tops]
            for key in spec:
                if key not in valid:
                    raise UsageError(
                        f"{where}: dynamic_shapes key {key!r} is not an input of this case (inputs given: "
                        f"{', '.join(valid) or 'none'}). Use forward's argument names as keys, or a tuple by position"
                    )
            pairs = [(t, spec.get(t[0])) for t in tops]
            keyfmt = "[{!r}]"
        elif isinstance(spec, (list, tuple)):
            if len(spec) != len(tops):
                raise UsageError(
                    f"{where}: dynamic_shapes has {len(spec)} entries but the case gives {len(tops)} inputs "
                    f"({', '.join(t[0] for t in tops)}). Give one entry per input, None for static ones"
                )
            pairs = list(zip(tops, spec))
            keyfmt = None
        else:
            raise UsageError(f"{where}: dynamic_shapes must be a dict by argument name or a tuple by position, "
                             f"got {type(spec).__name__}")
        for i, ((name, value, prefix), sub) in enumerate(pairs):
            key = keyfmt.format(name) if keyfmt else f"[{i}]"
            p.walk(key, name, value, sub, prefix)
    if additional:
        _additional_ranges(p.symbols, additional, keys)
    return Declaration(p.symbols.roots, p.symbols.axes, paths, keys, additional)


def _additional_ranges(p: _Symbols, additional: list, keys: list[str]) -> None:
    """AdditionalInputs promise every given input works: each varying axis ranges over the sizes seen."""
    import torch
    import torch.utils._pytree as pytree

    for ex_args, ex_kwargs in additional:
        flat, _ = pytree.tree_flatten_with_path((tuple(ex_args), dict(ex_kwargs)))
        by_key = {pytree.keystr(k): v for k, v in flat}
        for ax in p.axes:
            v = by_key.get(keys[ax.flat])
            size = (int(v.shape[ax.dim]) if isinstance(v, torch.Tensor) and ax.dim is not None and ax.dim < v.dim()
                    else v if isinstance(v, int) else None)
            root = p.roots[ax.root]
            if size is None:
                continue
            root.kind, root.bounded = "additional", True
            root.min = min(root.min if root.declared != "Dim.DYNAMIC" or root.max is not None else size, size,
                           ax.example)
            root.max = max(root.max or 0, size, ax.example)
            root.declared = "AdditionalInputs"


__all__ = ["Root", "Axis", "Declaration", "parse", "resolve", "describe_dim"]
