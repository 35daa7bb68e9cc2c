"""What probing one case costs (issue #23): the fake mode its probes run in, and its ``cost.Costs`` calibrated on
the example (counted with fake tensors, and run once with real ones: its time and the peak of its live tensors).

``Context`` holds one ``Calibration`` per case (``ctx.calibration``) and hands it its eager forward and, once export
has run, its program; ``sizing`` plans each probe from the costs, ``runner`` reports the coverage they reached.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.utils._pytree as pytree  # private module, but torch's only pytree API (export itself uses it)

from ..torchside.torchlog import quiet_fake_logs
from ..util import describe_exception, resident_is_live, trim_heap
from .cost import Costs, Measure, counted, default_max_memory, input_bytes

if TYPE_CHECKING:
    from ..declare.case import Case
    from ..declare.options import CaseOptions

# the resident set grows by pages, and a forward that allocates little reuses heap pages already resident (reads 0):
# an uncounted example's measured peak is taken as at least this (and at least four times its inputs)
RESIDENT_FLOOR = 64 * 1024


class Calibration:
    """One case's costing: its fake mode, and its costs calibrated on first use. ``eager(args, kwargs, within=None)``
    is the case's eager forward (``Context.eager_on``); ``program()`` its exported program, None before export."""

    def __init__(self, case: Case, options: CaseOptions, eager: Callable[..., Any], program: Callable[[], Any],
                 program_on: Callable[[tuple, dict, Any], Any] | None = None):
        self.case = case
        self.options = options
        self._eager = eager
        self._program = program
        self._program_on = program_on  # (args, kwargs, within) -> the program's Observation
        self.program_error = ""  # why the program's last fake count failed (``program_counted``)
        self._fake_mode = None
        self._costs = None
        self._countable: bool | None = None

    def fake_mode(self):
        """One ``FakeTensorMode`` per case (real parameters allowed), so constants convert once."""
        if self._fake_mode is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            self._fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        return self._fake_mode

    def costs(self) -> Costs:
        """The case's ``cost.Costs``, calibrated on first use: the example counted with fake tensors, and once
        with real ones (its time and the peak of its live tensors).

        A program with higher-order ops (``cond``, ``map``, ``while_loop``, ``scan``) is not counted: torch's
        counting modes cannot follow into their branches. Its probes still run fake; their cost is predicted
        from the example's time and its peak, measured as the process's resident high-water mark around its
        real forward (``resident_peak``; issue #32: taken as four times its inputs, a model under a 64 MB cap
        reached 2 GB), each scaled by the square of the input growth (``cost.Costs.predict`` without a count).
        Where that peak cannot be measured, numerics stop at the example's size (``Costs.peak_problem``)."""
        if self._costs is None:
            costs = Costs(self.options.max_memory or default_max_memory(), self.options.budget,
                          auto=self.options.budget_auto)
            args, kwargs = self.case.args, self.case.kwargs
            nbytes = input_bytes((args, kwargs))
            real = Measure(0.0, 0, 0, nbytes)
            if self.countable():
                with counted(nbytes) as real:
                    self._eager(args, kwargs)  # the example's real peak
            t0 = time.perf_counter()
            self._eager(args, kwargs)  # timed without the counters' own overhead
            seconds = time.perf_counter() - t0
            if not self.countable():
                real.peak, costs.peak_problem = resident_peak(lambda: self._eager(args, kwargs))
                real.peak = max(real.peak, 4 * nbytes, RESIDENT_FLOOR)
            example = real
            try:
                mode = self.fake_mode()
                fargs, fkwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (tuple(args), dict(kwargs)))
                _, counted_example = self.eager_counted(fargs, fkwargs)
                example = counted_example or real
            except Exception as exc:  # noqa: BLE001 - fake tensors cannot run this model: numerics only
                costs.fake_problem = describe_exception(exc, 300).splitlines()[0]
            example.seconds, example.inputs = max(seconds, 1e-4), nbytes
            costs.example, costs.real_peak = example, real.peak
            costs.opaque = self._opaque(real, example)
            self._costs = costs
        return self._costs

    def _opaque(self, real: Measure, example: Measure) -> dict[str, Any]:
        """The ops the count cannot see into (issue #43), each with what its real call held inside where the example's
        counted forward measured it; those only the fake count or the program's graph names are guarded alone."""
        from .opaque import graph_opaque

        ep = self._program()
        found = {**(graph_opaque(ep) if ep is not None else {}), **example.opaque}
        return {**{name: {**seen, "hidden": None} for name, seen in found.items()}, **real.opaque}

    def countable(self) -> bool:
        """Whether torch's counting modes can follow this case's forward (no higher-order ops in the program)."""
        ep = self._program()
        if ep is None:
            return True
        if self._countable is None:
            self._countable = not uncountable_ops(ep)
        return self._countable

    def coverage(self) -> dict[str, Any] | None:
        """How far each declared dim was checked, by shape and by numerics (None where nothing was probed)."""
        if self._costs is None or not self._costs.coverage and not self._costs.fake_problem:
            return None
        return self._costs.to_dict()

    def eager_counted(self, args: tuple, kwargs: dict):
        """Eager on fake inputs, counted: (its ``Observation``, its ``cost.Measure``, None where not countable)."""
        if not self.countable():
            with quiet_fake_logs():
                obs = self._eager(args, kwargs, within=self.fake_mode())
            return obs, None
        counter = counted(input_bytes((args, kwargs)), self.fake_mode())
        with quiet_fake_logs():
            obs = self._eager(args, kwargs, within=counter)
        return obs, counter.measure

    def program_counted(self, args: tuple, kwargs: dict, eager: Measure) -> Measure | None:
        """``eager`` (a probe's counted fake eager run) with the program's own counted fake run at the same inputs
        beside it: each count the larger of the two. A program can make what eager never does: a speech encoder's
        exported program grew the process by 2.33 GB at 1 x 480,000 samples where eager grew it by 48 MB, and a
        prediction from eager's count alone ran that probe past the memory cap (issue #43). None where the program
        cannot run these inputs fake (a guard refuses them past the max): the refusal makes nothing, but the count is
        no bound for a size the program runs (n=16385, refused, had bounded n=16384, which made 1 GB)."""
        if self._program_on is None or self._program() is None or not self.countable():
            return eager
        counter = counted(input_bytes((args, kwargs)), self.fake_mode())
        try:
            self._program_on(args, kwargs, counter)
        except Exception as exc:  # noqa: BLE001 - a refusal or a limit of fake tensors: nothing made to count
            self.program_error = describe_exception(exc, 200).splitlines()[0]
            return None
        p = counter.measure
        return dataclasses.replace(eager, flops=max(eager.flops, p.flops), peak=max(eager.peak, p.peak),
                                   total=max(eager.total, p.total), kept=max(eager.kept, p.kept), ops=max(eager.ops, p.ops),
                                   conv_flops=max(eager.conv_flops, p.conv_flops))


# what export makes of a context manager in eager code (``torch.no_grad()``, ``torch.autocast``): eager itself runs
# plain ops there, which the counting modes follow. Taken for control flow, they sent a speech encoder with a frozen
# (``no_grad``) feature encoder to the uncounted guess: 101 GB predicted at 2 x 480,000 samples (issue #43)
EAGER_WRAPPERS = frozenset({"wrap_with_set_grad_enabled", "wrap_with_autocast"})


def uncountable_ops(ep: Any) -> list[str]:
    """The higher-order ops of ``ep`` (its submodules' graphs too: a ``cond`` may sit inside a ``no_grad`` block)
    that eager runs as such, where torch's counting modes cannot follow (``cond``, ``map``, ``while_loop``,
    ``scan``)."""
    from torch._ops import HigherOrderOperator

    return [n.target.name() for gm in ep.graph_module.modules() if isinstance(gm, torch.fx.GraphModule)
            for n in gm.graph.nodes
            if isinstance(n.target, HigherOrderOperator) and n.target.name() not in EAGER_WRAPPERS]


def resident_peak(run: Callable[[], Any]) -> tuple[int, str | None]:
    """How far the process's resident memory rose above where it was while ``run()`` ran: ``(bytes, None)``, or
    ``(0, why)`` where it cannot be measured. Linux: the high-water mark ``VmHWM`` of ``/proc/self/status``, reset
    by writing 5 to ``/proc/self/clear_refs`` (so the process's peak RSS reads from then on), after glibc's
    ``malloc_trim(0)`` has handed free heap pages back (memory freed earlier and reused would hide the peak)."""
    trim_heap()  # where it cannot (not glibc), freed memory reused may hide part of the peak
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_bytes("VmRSS")
    except (OSError, ValueError) as exc:
        return 0, f"its peak memory cannot be measured here ({type(exc).__name__}: {exc})"
    with resident_is_live():  # what is alive, not what a fragmented heap keeps besides
        run()
    return max(0, _status_bytes("VmHWM") - before), None


def resident_mark() -> int | None:
    """Reset the process's resident high-water mark (after handing the heap's free pages back) and return the
    resident bytes now, the base ``resident_high`` is read against; None where it cannot be measured."""
    trim_heap()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_bytes("VmRSS")
    except (OSError, ValueError):
        return None


def resident_high() -> int:
    """The process's resident high-water mark since the last ``resident_mark``, in bytes."""
    return _status_bytes("VmHWM")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise ValueError(f"no {field} in /proc/self/status")


__all__ = ["Calibration", "resident_peak", "resident_mark", "resident_high", "uncountable_ops", "RESIDENT_FLOOR", "EAGER_WRAPPERS"]
