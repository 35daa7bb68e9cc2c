"""The state of the user's module around a forward call: its tensors (parameters, buffers) and its Python attributes.

Every forward the harness runs must leave no trace (``ep.module()`` shares storage with the user's module, and a
later stage must see the module as the user gave it). And a forward that changes the module's Python state is
itself a finding (issue #18): the exported program freezes such state at its traced value.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any, Iterator

import torch

# attributes every nn.Module carries for its own bookkeeping (hooks, registries, the training flag)
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module())) | {"training"}
_SCALARS = (int, float, complex, bool, str, bytes, type(None))
_MAX_ITEMS = 256


class _NotPlain(Exception):
    pass


def _plain(value: Any, depth: int = 0) -> Any:
    """A comparable copy of a plain Python value (numbers, strings, small containers of them); _NotPlain else."""
    if isinstance(value, _SCALARS):
        return value
    if depth >= 3:
        raise _NotPlain
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_ITEMS:
        return type(value)(_plain(v, depth + 1) for v in value) if isinstance(value, list) else \
            tuple(_plain(v, depth + 1) for v in value)
    if isinstance(value, (set, frozenset)) and len(value) <= _MAX_ITEMS:
        return type(value)(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict) and len(value) <= _MAX_ITEMS:
        return {_plain(k, depth + 1): _plain(v, depth + 1) for k, v in value.items()}
    raise _NotPlain


def python_state(module: torch.nn.Module, modules: list[tuple[str, torch.nn.Module]] | None = None
                 ) -> dict[str, tuple[Any, Any]]:
    """``{"path.attr": (the object, a plain copy)}`` for the plain Python attributes of every submodule
    (``modules``: the module tree's ``named_modules()``, where the caller keeps it)."""
    out: dict[str, tuple[Any, Any]] = {}
    for prefix, mod in modules if modules is not None else module.named_modules(remove_duplicate=True):
        for name, value in vars(mod).items():
            if name in _MODULE_INTERNALS or name.startswith("__"):
                continue
            try:
                out[f"{prefix}.{name}" if prefix else name] = (value, _plain(value))
            except _NotPlain:
                continue
    return out


def _equal(a: Any, b: Any) -> bool:
    if a == b:
        return True
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


_ABSENT = "<absent>"


def python_state_changes(before: dict[str, tuple[Any, Any]], after: dict[str, tuple[Any, Any]]) -> list[dict[str, Any]]:
    """Attributes forward set, changed or removed: ``[{"path", "was", "now"}]`` (values as reprs)."""
    out = []
    for path in list(before) + [p for p in after if p not in before]:
        was = before[path][1] if path in before else _ABSENT
        now = after[path][1] if path in after else _ABSENT
        if was is _ABSENT or now is _ABSENT or not _equal(was, now):
            out.append({"path": path, "was": _short(was), "now": _short(now)})
    return out


def _short(value: Any) -> str:
    text = value if value is _ABSENT else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def restore_python_state(module: torch.nn.Module, before: dict[str, tuple[Any, Any]],
                         paths: set[str] | None = None) -> None:
    """Put plain attributes back as they were in ``before`` (all, or those in ``paths``): the same object, with its
    contents as they were (containers are restored in place, so that other references to them see it too); an
    attribute absent from ``before`` is removed."""
    after = python_state(module)
    for path in (set(before) | set(after)) if paths is None else paths:
        owner, name = _owner(module, path)
        if path not in before:
            owner.__dict__.pop(name, None)
            continue
        obj, plain = before[path]
        owner.__dict__[name] = obj
        try:
            unchanged = _equal(_plain(obj), plain)
        except _NotPlain:
            unchanged = False
        if unchanged:
            continue
        if isinstance(obj, list):
            obj[:] = copy.deepcopy(plain)
        elif isinstance(obj, (dict, set)):
            obj.clear()
            obj.update(copy.deepcopy(plain))


class _PythonHistory:
    """What the forward calls of one case did to one module tree's plain Python attributes.

    A change that the next call does not repeat is a lazy initialization (``self._cache_built = True``, a flag
    that goes with hooks forward installs on its first call, as transformers' output capturing does): it is kept,
    as the user's own first call would keep it, and is no finding (the exported program sees the same settled
    value). Undoing it would undo the flag and not what goes with it. A change that calls repeat (a call
    counter, a list forward appends to) is per call: a finding, and undone after every call from then on.
    """

    def __init__(self) -> None:
        self.original: dict[str, tuple[Any, Any]] = {}  # path -> its (object, plain copy) before it changed
        self.pending: set[str] = set()    # changed by one call; the next call tells which kind
        self.per_call: set[str] = set()

    def after_call(self, module: torch.nn.Module, before: dict[str, tuple[Any, Any]],
                   changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Classify this call's changes, undo the per-call ones; return those that are per call."""
        changed = {c["path"] for c in changes}
        settled = self.pending - changed
        self.pending -= settled
        for path in settled:
            self.original.pop(path, None)
        repeated = self.pending & changed
        self.pending -= repeated
        self.per_call |= repeated
        for path in changed - self.per_call:
            self.pending.add(path)
            if path in before:
                self.original[path] = before[path]
            else:
                self.original.pop(path, None)
        undo = changed & self.per_call
        if undo:
            originals = {p: self.original[p] for p in undo if p in self.original}
            restore_python_state(module, originals, undo)
        return [c for c in changes if c["path"] in self.per_call]


def _owner(module: torch.nn.Module, path: str) -> tuple[torch.nn.Module, str]:
    prefix, _, name = path.rpartition(".")
    return (module.get_submodule(prefix) if prefix else module), name


def state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for t in list(module.buffers()) + list(module.parameters()):
        if isinstance(t, torch.Tensor):
            seen.setdefault(id(t), t)
    return list(seen.values())


# parameters totalling at most this many bytes are copied, so that a forward that writes one can be undone (a
# weight clipped in place); above it a copy would double a real-width model's memory (issue #31)
PARAMETER_COPY_LIMIT = 64 * 2**20


class ParameterWritten(RuntimeError):
    """Forward wrote parameters in place: the harness keeps no copy of the weights to undo it (issue #31), and an
    exported program cannot mutate parameters either."""

    def __init__(self, names: list[str]):
        shown = ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        super().__init__(f"forward wrote parameter{'s' if len(names) != 1 else ''} {shown} in place (its version "
                         "counter moved): keep state that forward updates in a buffer (register_buffer), not in a "
                         "parameter")
        self.names = names


class StateKeeper:
    """Keeps the state tensors (parameters and buffers) of the modules a case runs as they were, for the whole case.

    Each buffer is copied once per case, the first time a module that holds it runs (not before every forward:
    for a large-weight model that copy cost as much as the forward itself; issue #16), and put back after a
    forward that changed it: where its version counter moved (it moves with every in-place write and is shared by
    every view of the storage; ``ep.module()`` shares storage with the user's module) or its value differs (a
    kernel such as batch norm's writes its running stats without moving the counter).

    Parameters are copied only where they total at most ``PARAMETER_COPY_LIMIT`` bytes: a copy of the weights
    would double a real-width model's memory (issue #31: four copies of a 0.88 GB decoder were alive at once).
    Above it, a forward that writes a parameter in place (its version counter moved) cannot be undone, so it raises
    ``ParameterWritten``, which names the parameters: the call's own verdict, as any exception forward raises.
    """

    def __init__(self) -> None:
        self._copies: dict[tuple, torch.Tensor] = {}
        self._by_id: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (the tensor, its original)
        self._python: dict[int, tuple[torch.nn.Module, _PythonHistory]] = {}  # id of a module run -> its history

    def _plan(self, module: torch.nn.Module) -> tuple[list[tuple[torch.Tensor, torch.Tensor, bool]], list]:
        """The module's state tensors with their originals, and its submodules, as they are now (a swapped-in
        submodule brings its own)."""
        params = {id(p) for p in module.parameters()}
        small = sum(p.numel() * p.element_size() for p in module.parameters()) <= PARAMETER_COPY_LIMIT
        return ([(t, None if id(t) in params and not small else self.original(t), id(t) not in params)
                 for t in state_tensors(module)], list(module.named_modules(remove_duplicate=True)))

    @staticmethod
    def _key(t: torch.Tensor) -> tuple:
        # a sparse tensor, or a wrapper subclass (``__torch_dispatch__``) whose storage holds no data: by identity
        if t.layout != torch.strided or type(t.data) is not torch.Tensor:
            return ("id", id(t))
        return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)

    def original(self, t: torch.Tensor) -> torch.Tensor:
        """The tensor's value as it was when the case first ran its module (a copy; never written)."""
        seen = self._by_id.get(id(t))
        if seen is not None and seen[0] is t:
            return seen[1]
        key = self._key(t)
        copy = self._copies.get(key)
        if copy is None:
            copy = self._copies[key] = t.detach().clone()
        self._by_id[id(t)] = (t, copy)
        return copy

    @contextlib.contextmanager
    def around(self, module: torch.nn.Module) -> Iterator[dict[str, Any]]:
        """Run forward without leaving traces. The yielded dict has ``written(t)``: whether forward has changed
        state tensor ``t`` (valid once forward returned), and ``original(t)``, its value before; after the block,
        ``python_changes`` (what forward changed in the module's plain Python state) and ``python_per_call``
        (those of them that calls repeat, undone; see ``_PythonHistory``)."""
        plan, modules = self._plan(module)
        # private: Tensor._version has no public twin; it is how autograd itself detects in-place writes
        versions = [t._version for t, _, _ in plan]
        before = python_state(module, modules)
        slots = [(m, dict(m._parameters), dict(m._buffers)) for _, m in modules]
        found: list[set[int]] = []

        def changed() -> set[int]:
            if not found:
                found.append({id(t) for (t, orig, buffer), v in zip(plan, versions) if written(t, v, orig, buffer)})
            return found[0]

        record: dict[str, Any] = {"written": lambda t: id(t) in changed(),
                                  "original": self.original}
        try:
            yield record
        finally:
            done = changed()
            with torch.no_grad():
                for t, orig, _ in plan:
                    if orig is not None and id(t) in done and t.shape == orig.shape and t.layout == orig.layout:
                        t.copy_(orig)
            reassigned = _put_back(slots)
            changes = python_state_changes(before, python_state(module, modules))
            history = self._python.setdefault(id(module), (module, _PythonHistory()))[1]
            record["python_changes"] = changes
            record["reassigned"] = reassigned
            record["python_per_call"] = history.after_call(module, before, changes)
        written_params = [id(t) for t, orig, _ in plan if orig is None and id(t) in done]
        if written_params:
            names = [n for n, p in module.named_parameters() if id(p) in written_params]
            raise ParameterWritten(names)


def storage_of(t: torch.Tensor) -> tuple[Any, int]:
    """``(key, bytes)`` of the memory a tensor holds, one key per storage (views share it): a sparse tensor (COO,
    CSR, CSC, BSR, BSC) by its index and value tensors, which have storages where it has none (issue #58)."""
    if t.layout == torch.sparse_coo:
        parts = [t._indices(), t._values()]  # private: the uncoalesced parts; indices() needs a coalesced tensor
    elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = [t.crow_indices(), t.col_indices(), t.values()]
    elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = [t.ccol_indices(), t.row_indices(), t.values()]
    else:
        storage = t.untyped_storage()
        return ("storage", storage.data_ptr()), storage.nbytes()
    return ("sparse", id(t)), sum(p.untyped_storage().nbytes() for p in parts)


def _put_back(slots: list[tuple[torch.nn.Module, dict, dict]]) -> list[str]:
    """Every parameter and buffer a forward replaced, added or removed (``self.table = self._make(t)``: a table
    grown on demand, a cache) put back as it was, so that no probe leaves its tensors in the module (a fake
    tensor from a probe by shape, issue #58). Returns their names (``table``)."""
    out = []
    for m, params, buffers in slots:
        for table, saved in ((m._parameters, params), (m._buffers, buffers)):
            if table.keys() == saved.keys() and all(table[k] is v for k, v in saved.items()):
                continue
            out += [k for k in set(table) | set(saved) if table.get(k) is not saved.get(k)]
            table.clear()
            table.update(saved)
    return sorted(out)


@contextlib.contextmanager
def preserved_state(module: torch.nn.Module) -> Iterator[dict[str, Any]]:
    """``StateKeeper().around(module)`` for one call (a forward outside any case)."""
    with StateKeeper().around(module) as record:
        yield record


def named_state(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``("parameter w", tensor)`` / ``("buffer b", tensor)`` for every state tensor, as messages name them."""
    return ([(f"parameter {n}", p) for n, p in module.named_parameters()]
            + [(f"buffer {n}", b) for n, b in module.named_buffers()])


def versions(module: torch.nn.Module) -> dict[str, tuple[torch.Tensor, int]]:
    """Each state tensor with its version counter now (moves with every in-place write)."""
    # private: Tensor._version has no public twin; it is how autograd itself detects in-place writes
    return {name: (t, t._version) for name, t in named_state(module)}


def changed_since(before: dict[str, tuple[torch.Tensor, int]], keeper: StateKeeper) -> list[str]:
    """The state tensors written since ``versions(...)`` whose value is not the original any more; each is put
    back to its original."""
    changed = []
    for name, (t, v) in before.items():
        if not name.startswith("buffer "):  # parameters have no copy (issue #31): a moved counter is a write
            if t._version != v:
                changed.append(name)
            continue
        if written(t, v, keeper.original(t), True) and not same_tensor(t.detach(), keeper.original(t)):
            changed.append(name)
            with torch.no_grad():
                t.copy_(keeper.original(t))
    return changed


def written(t: torch.Tensor, version: int, original: torch.Tensor, buffer: bool) -> bool:
    """Whether state tensor ``t`` was written since its version counter read ``version``. Parameters by the
    counter alone (one int: no copy, no compare of large weights); buffers also by value against ``original``:
    a kernel that updates them in place (batch norm's running stats) moves no counter."""
    # private: Tensor._version has no public twin; it is how autograd itself detects in-place writes
    return t._version != version or (buffer and not same_tensor(t.detach(), original))


def widened(t: torch.Tensor) -> torch.Tensor:
    """A float8 tensor as float32 (every float8 value is one), quantized as its floats: the comparisons' kernels
    (``equal``, ``isclose``) have no float8 or quantized implementation (issue #58). Others as they are."""
    if t.is_quantized:
        return t.dequantize()
    return t.float() if t.dtype.is_floating_point and t.element_size() == 1 else t


def _widens(t: Any) -> bool:
    return (type(t) in (torch.Tensor, torch.nn.Parameter) and t.layout == torch.strided and not t.is_quantized
            and (t.is_floating_point() or t.is_complex()) and t.dtype not in (torch.float64, torch.complex128))


def as_float64(t: Any) -> Any:
    """A float (complex) tensor as float64 (complex128); anything else as it is."""
    return t.to(torch.complex128 if t.is_complex() else torch.float64) if _widens(t) else t


@contextlib.contextmanager
def in_float64(module: torch.nn.Module) -> Iterator[None]:
    """The module's float parameters and buffers as float64 for the block (eager's own noise is measured against
    it, issue #54), then the very tensors they were: the same storage, so what the case keeps by storage holds.
    The float64 copies live for the block only."""
    kept = [(t, t.data) for t in state_tensors(module) if _widens(t)]
    try:
        with torch.no_grad():
            for t, data in kept:
                t.data = as_float64(data)
        yield
    finally:
        for t, data in kept:
            t.data = data


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype, layout and values (NaN equal to NaN); sparse tensors compare densely."""
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.layout != torch.strided:  # sparse kernels lack the ops below (issue #18: aten::bitwise_and on SparseCPU)
        a, b = a.to_dense(), b.to_dense()
    a, b = widened(a), widened(b)
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


__all__ = ["StateKeeper", "ParameterWritten", "preserved_state", "written", "python_state", "python_state_changes", "restore_python_state",
           "named_state", "versions", "changed_since", "same_tensor", "state_tensors", "widened", "storage_of",
           "as_float64", "in_float64"]
