"""A case: the module and its example inputs, as a marked test returns them."""

from __future__ import annotations

import dataclasses
import inspect
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


def input_names(module: Any, args: tuple, kwargs: dict) -> list[str]:
    """Names of the inputs as export combines them: positional by forward's signature, then kwargs."""
    try:
        sig = inspect.signature(module.forward)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [f"args[{i}]" for i in range(len(args))] + list(kwargs)
    names = []
    for name, param in sig.parameters.items():
        if name not in bound.arguments:
            continue
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}[{i}]" for i in range(len(bound.arguments[name]))]
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            names += list(bound.arguments[name])
        else:
            names.append(name)
    return names


def expand_var_inputs(spec: Any, module: Any, args: tuple, kwargs: dict) -> Any:
    """``forward(self, *args, **kwargs)``: torch takes the ``*args`` entry as one tuple (``{"args": (a, b)}``, or
    that tuple at its position) and the ``**kwargs`` entry as one dict (``{"kwargs": {"mask": ...}}``: its
    top-level keys are forward's argument names); spread each over the inputs it covers, as ``input_names`` names
    them (``args[0]``, ..., and each keyword by its own name)."""
    try:
        sig = inspect.signature(module.forward)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return spec
    names = [n for n in sig.parameters if n in bound.arguments]
    varkw = next((n for n in names if sig.parameters[n].kind is inspect.Parameter.VAR_KEYWORD), None)
    if (varkw is not None and isinstance(spec, dict) and isinstance(spec.get(varkw), dict) and varkw not in kwargs
            and not set(spec[varkw]) & (set(spec) - {varkw})):
        spec = {k: v for key, value in spec.items() for k, v in (value.items() if key == varkw else [(key, value)])}
    var = next((n for n in names if sig.parameters[n].kind is inspect.Parameter.VAR_POSITIONAL), None)
    if var is None:
        return spec
    count = len(bound.arguments[var])
    if isinstance(spec, dict) and isinstance(spec.get(var), (list, tuple)) and len(spec[var]) == count:
        out: dict[str, Any] = {}
        for key, value in spec.items():
            if key == var:
                out.update({f"{var}[{i}]": v for i, v in enumerate(value)})
            else:
                out[key] = value
        return out
    if isinstance(spec, (list, tuple)) and len(spec) == len(names):
        at = names.index(var)
        if isinstance(spec[at], (list, tuple)) and len(spec[at]) == count:
            return type(spec)([*spec[:at], *spec[at], *spec[at + 1:]])
    return spec
