"""Hypothesis strategies over a declaration, and inputs built like the example ones for drawn sizes.

Sizes come from ``audit.FuzzModel``: one variable per symbol export kept, boundaries first. Values are drawn
from a ``torch.Generator`` seeded from the sizes (so Hypothesis shrinks sizes only, and a failure replays with
the same values): floats at the example's scale, integers inside the example's own value range, booleans as
booleans. A tensor with no dynamic axis keeps the example's values.
"""

from __future__ import annotations

from typing import Any, Callable

from ..audit import FuzzModel, Var


def boundaries(v: Var) -> list[int]:
    """min, max, their neighbours, 2 and the example's own size, inside the range, ascending."""
    cand = {v.lo, v.lo + 1, v.hi - 1, v.hi, 2, v.example}
    return sorted(c for c in cand if v.lo <= c <= v.hi)


def size_strategy(v: Var):
    from hypothesis import strategies as st

    # integers first: a failing boundary draw shrinks through the integer branch towards the threshold
    return st.one_of(st.integers(v.lo, v.hi), st.sampled_from(boundaries(v)))


def assignments(model: FuzzModel):
    """A dict symbol -> size for every variable (empty when every axis is static)."""
    from hypothesis import strategies as st

    drawn = st.fixed_dictionaries({v.symbol: size_strategy(v) for v in model.vars})
    if not model.relations:
        return drawn
    # inside the relations export kept for dims that promise no range (issue #24)
    return drawn.map(model.fit).filter(lambda values: values is not None)


def boundary_assignments(model: FuzzModel) -> list[dict[str, int]]:
    """The explicit examples run before any random one: all at min, all at max, the example's sizes."""
    out: list[dict[str, int]] = []
    for pick in (lambda v: v.lo, lambda v: v.hi, lambda v: v.example):
        a = model.fit({v.symbol: pick(v) for v in model.vars})
        if a is not None and a not in out:
            out.append(a)
    return out


def _value_range(t: Any) -> tuple[float, float] | None:
    import torch

    if t.numel() == 0:
        return None
    x = t.detach()
    if x.is_floating_point():
        x = x[torch.isfinite(x)]
        if x.numel() == 0:
            return None
    x = x.to("cpu")
    if x.is_complex():
        return 0.0, float(x.abs().max())
    return float(x.min()), float(x.max())


def like(example: Any, shape: tuple[int, ...], gen: Any) -> Any:
    """A new tensor like ``example`` (dtype, device, layout, memory format, requires_grad) of ``shape``."""
    import torch

    dtype = example.dtype
    rng = _value_range(example)
    if dtype == torch.bool:
        if rng is not None and rng[0] == rng[1]:
            out = torch.full(shape, bool(rng[0]), dtype=torch.bool)
        else:
            out = torch.randint(0, 2, shape, generator=gen).bool()
    elif dtype.is_complex:
        scale = rng[1] if rng is not None and rng[1] > 0 else 1.0
        out = torch.randn(shape, generator=gen, dtype=dtype) * scale
    elif dtype.is_floating_point:
        lo, hi = rng if rng is not None else (-1.0, 1.0)
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        out = (u * (hi - lo) + lo).to(dtype)
    else:
        lo, hi = (int(rng[0]), int(rng[1])) if rng is not None else (0, 1)
        out = torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int64).to(dtype)
    out = out.to(example.device)
    if example.dim() == 4 and example.is_contiguous(memory_format=torch.channels_last) and not example.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)
    if example.requires_grad and (dtype.is_floating_point or dtype.is_complex):
        out.requires_grad_(True)
    return out


def build_inputs(model: FuzzModel, values: dict[str, int], args: tuple, kwargs: dict, seed: int,
                 builder: Callable[..., Any] | None = None, named: dict[str, int] | None = None,
                 override: dict[tuple[int, int | None], int] | None = None) -> tuple[tuple, dict]:
    """Inputs for one assignment: like the example ones, or from the case's own input builder.

    A tensor with no dynamic axis (and no ``override``: a probe's deliberately wrong size) keeps the example's
    values: its shape is fixed, and its values (offsets, masks, lookup tables) keep their meaning.
    """
    import torch
    import torch.utils._pytree as pytree

    if builder is not None:
        from ..torchside.observe import seed_all

        seed_all(seed)
        return normalize_built(builder(dict(named if named is not None else model.named(values)), args, kwargs))
    sizes = _sizes(model, values, override)
    gen = torch.Generator().manual_seed(seed)
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    out = []
    for i, leaf in enumerate(flat):
        axes = sizes.get(i, {})
        if isinstance(leaf, torch.Tensor):
            shape = tuple(axes.get(d, s) for d, s in enumerate(leaf.shape))
            fixed = not any(not isinstance(e, int) for e in model.shapes.get(i, {}).values())
            if fixed and shape == tuple(leaf.shape):
                out.append(leaf.detach().clone().requires_grad_(leaf.requires_grad))
            else:
                out.append(like(leaf, shape, gen))
        elif None in axes:
            out.append(axes[None])
        else:
            out.append(leaf)
    new_args, new_kwargs = pytree.tree_unflatten(out, spec)
    return tuple(new_args), dict(new_kwargs)


def _sizes(model: FuzzModel | None, values: dict[str, int],
           override: dict[tuple[int, int | None], int] | None) -> dict[int, dict[int | None, int]]:
    """Every input axis's size for an assignment, with a probe's deliberately wrong sizes put over it."""
    sizes = model.sizes(values) if model is not None else {}
    for (flat_i, dim), size in (override or {}).items():
        sizes.setdefault(flat_i, {})[dim] = size
    return sizes


def fake_inputs(mode: Any, model: FuzzModel | None, values: dict[str, int], args: tuple, kwargs: dict,
                override: dict[tuple[int, int | None], int] | None = None, given: tuple[tuple, dict] | None = None,
                builder: Callable[..., Any] | None = None) -> tuple[tuple, dict]:
    """The inputs of one assignment as fake tensors of ``mode`` (nothing allocated, whatever the size): the
    example's tensors where their shape is fixed, empty ones of the drawn shape elsewhere (a fake run checks
    shapes, not values). A case's ``input_builder`` runs inside the fake mode, so its factories make fake tensors."""
    import torch
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor

    def fake(x: Any) -> Any:
        return mode.from_tensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) else x

    if given is not None:
        return pytree.tree_map(fake, (tuple(given[0]), dict(given[1])))
    if builder is not None and not override:
        with mode:
            built = normalize_built(builder(dict(model.named(values)), args, kwargs))
        return pytree.tree_map(fake, built)
    sizes = _sizes(model, values, override)
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    out = []
    for i, leaf in enumerate(flat):
        axes = sizes.get(i, {})
        if isinstance(leaf, torch.Tensor):
            shape = tuple(axes.get(d, s) for d, s in enumerate(leaf.shape))
            if shape == tuple(leaf.shape):
                out.append(mode.from_tensor(leaf))
                continue
            with mode:
                t = torch.empty(shape, dtype=leaf.dtype, device=leaf.device)
                if leaf.dim() == 4 and leaf.is_contiguous(memory_format=torch.channels_last) and not leaf.is_contiguous():
                    t = t.contiguous(memory_format=torch.channels_last)
                if leaf.requires_grad and (leaf.dtype.is_floating_point or leaf.dtype.is_complex):
                    t.requires_grad_(True)
            out.append(t)
        elif None in axes:
            out.append(axes[None])
        else:
            out.append(leaf)
    new_args, new_kwargs = pytree.tree_unflatten(out, spec)
    return tuple(new_args), dict(new_kwargs)


class BuilderError(TypeError):
    pass


def normalize_built(value: Any) -> tuple[tuple, dict]:
    """An input builder returns ``args`` (a tuple) or ``(args, kwargs)``."""
    if (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], (tuple, list))
            and isinstance(value[1], dict)):
        return tuple(value[0]), dict(value[1])
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    raise BuilderError(
        f"input_builder must return the positional inputs as a tuple, or (args, kwargs); got {type(value).__name__}"
    )


def shapes_of(args: tuple, kwargs: dict, paths: list[str]) -> dict[str, Any]:
    """Every input's shape (tensors) or value (ints) by its display path."""
    import torch
    import torch.utils._pytree as pytree

    flat, _ = pytree.tree_flatten((tuple(args), dict(kwargs)))
    out: dict[str, Any] = {}
    for i, leaf in enumerate(flat):
        name = paths[i] if i < len(paths) else f"input {i}"
        if isinstance(leaf, torch.Tensor):
            out[name] = list(leaf.shape)
        elif isinstance(leaf, (int, float, bool)) or leaf is None:
            out[name] = leaf
    return out


__all__ = ["assignments", "boundary_assignments", "boundaries", "build_inputs", "fake_inputs", "like", "shapes_of",
           "normalize_built", "BuilderError"]
