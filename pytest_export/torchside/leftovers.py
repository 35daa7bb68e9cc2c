"""What a call can leave behind outside the module's own state, and its clean-up (issue #55: each ended every later
case of a worker ``error``).

- **functorch's transform stack.** A program with ``torch.vmap`` traced into it holds ``_vmap_increment_nesting``
  and ``_vmap_decrement_nesting`` as nodes; one that raises between the two (a size its guards refuse, an op that
  fails there) leaves its vmap level on, and every later random op of the process raises "vmap: called random
  operation while in randomness error mode". ``closing_transforms`` runs a call and pops what it left above the
  depth it began at, as dynamo does when a frame it traces raises.
- **The model's own caches.** A model that caches tensors per size in a ``functools.lru_cache`` (transformers'
  DINOv3 and SAM3 cache patch coordinates per height and width) keeps a fake tensor made by the harness's fake run
  of eager (a probe's count); the numeric run at the same size then computes with it and gives fake outputs.
  ``clear_model_caches`` empties the functools caches defined in the modules of the model's classes after every
  fake run (a cache is transparent by contract, so the model's results do not change).
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, TypeVar

import torch

T = TypeVar("T")
_NOT_MODEL = ("torch", "functools", "builtins", "typing", "collections")  # packages whose caches are not the model's
_CLEARERS: weakref.WeakKeyDictionary[torch.nn.Module, list[Callable[[], None]]] = weakref.WeakKeyDictionary()


def transform_depth() -> int:
    from torch._C._functorch import get_dynamic_layer_stack_depth

    return int(get_dynamic_layer_stack_depth())


def undo_transforms(depth: int) -> None:
    """Pop the functorch transforms (vmap, grad, jvp levels) left above ``depth``."""
    from torch._C._functorch import pop_dynamic_layer_stack_and_undo_to_depth

    if transform_depth() > depth:
        pop_dynamic_layer_stack_and_undo_to_depth(depth)


def closing_transforms(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, with functorch's transform stack as it found it afterwards, raised or not."""
    depth = transform_depth()
    try:
        return call(*args, **kwargs)
    finally:
        undo_transforms(depth)


def _clearers_in(value: Any, seen: set[int]) -> list[Callable[[], None]]:
    """The ``cache_clear`` of ``value`` where it is a functools cache, or of one it wraps (``__wrapped__``, or a
    closure cell: transformers' ``compile_compatible_method_lru_cache`` keeps its cache in one)."""
    out: list[Callable[[], None]] = []
    todo = [value.__func__ if isinstance(value, (staticmethod, classmethod)) else value]
    while todo:
        each = todo.pop()
        if id(each) in seen or not callable(each):
            continue
        seen.add(id(each))
        clear = getattr(each, "cache_clear", None)
        if callable(clear):
            out.append(clear)
        todo += [c.cell_contents for c in (getattr(each, "__closure__", None) or ()) if _filled(c)]
        todo += [w for w in (getattr(each, "__wrapped__", None),) if w is not None]
    return out


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
        return True
    except ValueError:
        return False


def model_caches(owner: torch.nn.Module) -> list[Callable[[], None]]:
    """The ``cache_clear`` of every functools cache defined at the top of, or in a class of, the modules that
    define ``owner``'s module classes (torch's own left out); found once per model."""
    if owner in _CLEARERS:
        return _CLEARERS[owner]
    names = {type(m).__module__ for m in owner.modules()}
    seen: set[int] = set()
    out: list[Callable[[], None]] = []
    for name in sorted(n for n in names if n.split(".")[0] not in _NOT_MODEL):
        for value in list(vars(sys.modules[name]).values()) if name in sys.modules else ():
            if getattr(value, "__module__", None) != name:
                continue  # imported from elsewhere (a library's helper): not this model's
            for member in list(vars(value).values()) if isinstance(value, type) else [value]:
                out += _clearers_in(member, seen)
    _CLEARERS[owner] = out
    return out


def clear_model_caches(owner: torch.nn.Module) -> None:
    """Empty the model's own functools caches (``model_caches``): what a fake run left there goes."""
    for clear in model_caches(owner):
        clear()
