"""The state of the user's module around a forward call: its tensors (parameters, buffers) and its Python attributes.

Every forward the harness runs must leave no trace (``ep.module()`` shares storage with the user's module, and a
later stage must see the module as the user gave it). And a forward that changes the module's Python state is
itself a finding (issue #18): the exported program freezes such state at its traced value.
"""

from __future__ import annotations

import contextlib
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


def python_state(module: torch.nn.Module) -> dict[str, tuple[Any, Any]]:
    """``{"path.attr": (the object, a plain copy)}`` for the plain Python attributes of every submodule."""
    out: dict[str, tuple[Any, Any]] = {}
    for prefix, mod in module.named_modules(remove_duplicate=True):
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


def restore_python_state(module: torch.nn.Module, before: dict[str, tuple[Any, Any]]) -> None:
    """Put every plain attribute back as it was: the same object, with its contents as they were (containers are
    restored in place, so that other references to them see it too); attributes forward added are removed."""
    import copy

    after = python_state(module)
    for path, (obj, plain) in before.items():
        owner, name = _owner(module, path)
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
    for path in after:
        if path not in before:
            owner, name = _owner(module, path)
            owner.__dict__.pop(name, None)


def _owner(module: torch.nn.Module, path: str) -> tuple[torch.nn.Module, str]:
    prefix, _, name = path.rpartition(".")
    return (module.get_submodule(prefix) if prefix else module), name


def state_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}
    for t in list(module.buffers()) + list(module.parameters()):
        if isinstance(t, torch.Tensor):
            seen.setdefault(id(t), t)
    return list(seen.values())


@contextlib.contextmanager
def preserved_state(module: torch.nn.Module) -> Iterator[dict[str, Any]]:
    """Run forward without leaving traces: tensors (buffers and parameters) and plain Python attributes are
    restored afterwards. The yielded dict receives ``python_changes``: what forward changed in Python state.

    ``ep.module()`` shares storage with ``ep.state_dict`` and so with the user's module: a forward that
    mutates a buffer would otherwise change every program and the eager module alike.
    """
    saved = [(t, t.detach().clone()) for t in state_tensors(module)]
    before = python_state(module)
    record: dict[str, Any] = {}
    try:
        yield record
    finally:
        with torch.no_grad():
            for t, copy in saved:
                if t.shape == copy.shape and t.layout == copy.layout:
                    t.copy_(copy)
        after = python_state(module)
        record["python_changes"] = python_state_changes(before, after)
        if record["python_changes"]:
            restore_python_state(module, before)


def state_snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {f"parameter {n}": p.detach().clone() for n, p in module.named_parameters()}
    out.update({f"buffer {n}": b.detach().clone() for n, b in module.named_buffers()})
    return out


def state_changes(module: torch.nn.Module, before: dict[str, torch.Tensor]) -> list[str]:
    now = state_snapshot(module)
    changed = [k for k in before if k not in now or not same_tensor(now[k], before[k])]
    changed += [k for k in now if k not in before]
    return changed


def same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype, layout and values (NaN equal to NaN); sparse tensors compare densely."""
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.layout != torch.strided:  # sparse kernels lack the ops below (issue #18: aten::bitwise_and on SparseCPU)
        a, b = a.to_dense(), b.to_dense()
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


__all__ = ["preserved_state", "python_state", "python_state_changes", "restore_python_state", "state_snapshot",
           "state_changes", "same_tensor", "state_tensors"]
