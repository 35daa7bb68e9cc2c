"""A case: the module and its example inputs, as a marked test returns them."""

from __future__ import annotations

import dataclasses
from typing import Any

from .options import UsageError


@dataclasses.dataclass
class Case:
    module: Any
    args: tuple
    kwargs: dict[str, Any]

    @classmethod
    def from_return(cls, where: str, value: Any) -> "Case":
        """Validate what a marked test returned: ``(module, args)`` or ``(module, args, kwargs)``."""
        import torch

        hint = "return (module, args) or (module, args, kwargs), e.g. `return Model().eval(), (torch.randn(4, 16),)`"
        if not isinstance(value, tuple) or len(value) not in (2, 3):
            got = "None (did the test forget to return?)" if value is None else f"{type(value).__name__} {_short(value)}"
            raise UsageError(f"{where}: an exportable test must {hint}; got {got}")
        module, args = value[0], value[1]
        kwargs = value[2] if len(value) == 3 else {}
        return cls.build(where, module, args, kwargs, hint)

    @classmethod
    def build(cls, where: str, module: Any, args: Any, kwargs: Any, hint: str = "") -> "Case":
        import torch

        hint = hint or "pass a torch.nn.Module, a tuple of positional inputs and a dict of keyword inputs"
        if not isinstance(module, torch.nn.Module):
            raise UsageError(
                f"{where}: case item 'module' must be a torch.nn.Module, got {type(module).__name__}; {hint}"
            )
        if isinstance(args, list):
            args = tuple(args)
        if not isinstance(args, tuple):
            raise UsageError(
                f"{where}: case item 'args' must be a tuple of inputs, got {type(args).__name__}"
                f" (for one input write `(x,)`); {hint}"
            )
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
            raise UsageError(
                f"{where}: case item 'kwargs' must be a dict of keyword inputs by name, got {type(kwargs).__name__}; {hint}"
            )
        return cls(module, args, dict(kwargs))


    def to(self, device: str) -> "Case":
        """A copy of the case on ``device``: the module deep-copied and moved, every input tensor moved."""
        import copy

        import torch
        import torch.utils._pytree as pytree

        module = copy.deepcopy(self.module).to(device)
        args, kwargs = pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x,
                                       (self.args, self.kwargs))
        return Case(module, tuple(args), dict(kwargs))


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 80 else r[:77] + "..."
