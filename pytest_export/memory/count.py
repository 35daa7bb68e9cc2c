"""What a forward call makes, counted without running it for real (issue #23): under ``FakeTensorMode``,
``FlopCounterMode`` counts the FLOPs, and ``Tally`` the bytes of the tensors each op makes (live and peak) and the
operators dispatched; ``counted`` puts both around a block and fills a ``Measure``. ``cost`` turns a measure into a
predicted time and memory.

torch is imported lazily; nothing here knows about stages, budgets or pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

from .kernels import attention_flops, hidden_bytes
from .opaque import measured_call, note, opaque_name


def tally_mode():
    """A ``TorchDispatchMode`` that adds up the bytes of every tensor an op makes (views and in-place results
    excluded): ``total``, and ``peak`` of what is alive at once (a tensor counts until it is freed)."""
    import weakref

    import torch
    import torch.utils._pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class Tally(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = self.peak = self.total = 0
            self.flops = 0.0  # attention kernels FlopCounterMode has no formula for (CPU flash attention)
            self.ops = 0  # operators dispatched: each costs its call overhead, whatever its size
            self.opaque: dict[str, dict[str, Any]] = {}  # ops it cannot see into (``opaque``), by name


        def _free(self, n: int) -> None:
            self.live -= n

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = opaque_name(func)
            if name is None:
                out = func(*args, **(kwargs or {}))
            else:  # what it holds inside is measured where it runs real (issue #43)
                out, inside = measured_call(func, args, kwargs or {})
                note(self.opaque, name, input_bytes((args, kwargs)), inside)
            self.ops += 1
            if "attention" in func.__name__ and func.overloadpacket not in flop_registry:
                self.flops += attention_flops(args)
            hidden = hidden_bytes(func.overloadpacket.__name__, args, out)  # made and freed inside the kernel
            self.peak = max(self.peak, self.live + hidden)
            returns = func._schema.returns
            for i, t in enumerate(pytree.tree_leaves(out)):
                if not isinstance(t, torch.Tensor):
                    continue
                if i < len(returns) and returns[i].alias_info is not None:
                    continue  # a view or an in-place result: no new memory
                n = t.numel() * t.element_size()
                self.total += n
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self._free, n)
            return out

    return Tally()


@dataclasses.dataclass
class Measure:
    """What one forward call did, counted: FLOPs, peak and total bytes of the tensors it made, the bytes of its
    inputs and of its outputs (made and alive at its end: ``kept``); ``seconds`` where it ran for real."""

    flops: float
    peak: int
    total: int
    inputs: int
    seconds: float | None = None
    kept: int = 0
    ops: int = 0  # operators dispatched
    conv_flops: float = 0.0  # the part of ``flops`` convolutions take (slower per FLOP than matmuls on a CPU)
    # the ops it could not see into, by name: calls, the most input bytes of one call, and where it ran real, the
    # most bytes one call held inside (``hidden``, at ``hidden_at`` input bytes); issue #43
    opaque: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def counted(self) -> bool:
        return bool(self.flops or self.total or self.ops)


class _Global:
    """``FlopCounterMode``'s module tracker reduced to the one scope the count reads (``Global``): torch's own puts
    gradient hooks on every module's tensor inputs, and raises ``Expected gradient function to be set`` on a view of
    a parameter made under ``no_grad`` (transformers' ``causal_conv1d`` passes ``conv1d.weight.view(...)``), which
    made a harness crash of every stage that counts (issue #55)."""

    parents = {"Global"}

    def __enter__(self) -> "_Global":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


class counted:
    """Count a block (inside ``fake_mode`` where given): ``measure`` is filled when it ends."""

    def __init__(self, inputs: int, fake_mode: Any = None):
        self.measure = Measure(0.0, 0, 0, inputs)
        self._fake_mode = fake_mode
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Measure:
        from torch.utils.flop_counter import FlopCounterMode

        if self._fake_mode is not None:
            self._stack.enter_context(self._fake_mode)
        flops = FlopCounterMode(display=False)
        flops.mod_tracker = _Global()  # the per-module counts are not read; torch's hooks can raise (see _Global)
        self._flops = self._stack.enter_context(flops)
        self._tally = self._stack.enter_context(tally_mode())
        self._t0 = time.perf_counter()
        return self.measure

    def __exit__(self, *exc: Any) -> bool:
        seconds = time.perf_counter() - self._t0
        suppressed = self._stack.__exit__(*exc)
        m = self.measure
        m.flops = float(self._flops.get_total_flops()) + self._tally.flops
        m.conv_flops = float(sum(n for op, n in self._flops.get_flop_counts().get("Global", {}).items()
                                 if "convolution" in str(op)))
        m.peak, m.total, m.kept, m.ops = self._tally.peak, self._tally.total, self._tally.live, self._tally.ops
        m.opaque = self._tally.opaque
        m.seconds = None if self._fake_mode is not None else seconds
        return bool(suppressed)


def input_bytes(tree: Any) -> int:
    import torch
    import torch.utils._pytree as pytree

    return sum(t.numel() * t.element_size() for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor))


__all__ = ["Measure", "counted", "tally_mode", "input_bytes"]
