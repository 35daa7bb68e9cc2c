"""Ops a count of returned tensors cannot see into (issue #43): a ``torch.library.custom_op`` whose Python body
allocates, or any kernel outside ``aten`` and ``prims``. Under fake tensors such an op runs its fake kernel, which
makes only its outputs: a custom op that made an n x n matrix inside and returned n floats was predicted at 1.47 MB
at n=16384 and took 1.05 GB.

So each one is (a) calibrated: its real call in the example's forward runs under the profiler's allocation
events, and the peak of the bytes it held at once (its outputs included) is what it takes inside; at a probe's
size that peak is scaled by the square of the growth of the op's input bytes (``extrapolate``: attention's scores
grow that fast from their inputs), never below what was measured; and (b) guarded: a numeric probe of a case with
such an op runs under a limit on the process's address space (``address_guard``: its size now, plus the memory
cap, plus ``GUARD_SLACK``), so an op that grows faster than the rule fails its allocation (torch raises
"can't allocate memory", Python ``MemoryError``) instead of running the machine past the cap.

torch is imported lazily; nothing here imports the package.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

# namespaces whose ops the count sees whole: torch's own kernels make what they return (the fused ones that hold
# more inside are ``kernels``'s); the profiler's bookkeeping ops and ``prim`` ones (``prim::device`` for ``x.device``,
# seen in every zoo vision model) allocate nothing
COUNTED_NAMESPACES = frozenset({"aten", "prims", "prim", "profiler"})
# address space the guard allows beyond the cap: what a forward maps without making it resident (a thread's stack,
# a malloc arena's reservation); 64 MiB let a parallel matmul and a new thread run under a 256 MB cap
GUARD_SLACK = 64 * 2**20
_REFUSALS = ("can't allocate memory", "Cannot allocate memory", "MemoryError", "std::bad_alloc")


def opaque_name(func: Any) -> str | None:
    """``ns::name`` of an op the count cannot see into (its namespace is not torch's own), else None."""
    namespace = getattr(func, "namespace", None)
    if namespace is None or namespace in COUNTED_NAMESPACES:
        return None
    try:
        return func.name()
    except Exception:  # noqa: BLE001 - an overload without a schema name: its packet's
        return str(getattr(func, "overloadpacket", func))


def _real(args: Any, kwargs: Any) -> bool:
    """Whether the call's tensors are real (a fake or meta call allocates nothing to measure)."""
    import torch
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor

    leaves = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    return bool(leaves) and not any(isinstance(t, FakeTensor) or t.is_meta for t in leaves)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's start and stop print a line each on the C stderr: not the user's output."""
    try:
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def measured_call(func: Any, args: tuple, kwargs: dict) -> tuple[Any, int | None]:
    """``func(*args, **kwargs)`` and the peak of the bytes it held at once while it ran (the profiler's allocation
    events, summed in order; its outputs included), or None where it ran fake or could not be measured (the
    profiler already running, say). Its own exception propagates."""
    if not _real(args, kwargs):
        return func(*args, **kwargs), None
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            prof.__enter__()
    except Exception:  # noqa: BLE001 - no measurement: the op is predicted by its outputs and guarded
        return func(*args, **kwargs), None
    try:
        out = func(*args, **kwargs)
    finally:
        with _quiet_stderr():
            prof.__exit__(None, None, None)
    try:
        events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]")
    except Exception:  # noqa: BLE001 - a profiler without its allocation events here
        return out, None
    live = peak = 0
    for _, n in events:
        live += n
        peak = max(peak, live)
    return out, peak


def note(seen: dict[str, dict[str, Any]], name: str, inputs: int, inside: int | None) -> None:
    """Record one call of the opaque op ``name``: its input bytes, and what it held inside where measured."""
    entry = seen.setdefault(name, {"calls": 0, "inputs": 0, "hidden": None, "hidden_at": 0})
    entry["calls"] += 1
    entry["inputs"] = max(entry["inputs"], inputs)
    if inside is not None and inside >= (entry["hidden"] or 0):
        entry["hidden"], entry["hidden_at"] = inside, inputs


def extrapolate(hidden: int, at: int, to: int) -> int:
    """What an op measured to hold ``hidden`` bytes inside at ``at`` input bytes holds at ``to``: scaled by the
    input growth squared (an n x n matrix made from n), never below what was measured (a workspace that does not
    shrink)."""
    if at <= 0:
        return hidden
    return int(hidden * max(1.0, to / at) ** 2)


def vm_size() -> int | None:
    """The process's address space now (``VmSize``), or None where it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


@contextlib.contextmanager
def address_guard(cap: int) -> Iterator[int | None]:
    """Within the block the process's address space may grow by at most ``cap`` plus ``GUARD_SLACK``
    (``RLIMIT_AS``, restored after): an allocation past it fails in torch as a RuntimeError ("can't allocate
    memory") and in Python as ``MemoryError``, never a crash. Yields the limit, or None where none can be set
    (no ``resource`` module, no ``/proc``): then nothing is guarded."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError, AttributeError):
        yield None
        return
    size = vm_size()
    if size is None:
        yield None
        return
    limit = size + cap + GUARD_SLACK
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        yield None
        return
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def refused(text: str) -> bool:
    """Whether an error's text is an allocation the guard refused."""
    return any(r in text for r in _REFUSALS)


def graph_opaque(ep: Any) -> dict[str, dict[str, Any]]:
    """The opaque ops a program calls, found in its graphs (with its higher-order ops' subgraphs), for a program
    the counting modes cannot follow: uncalibrated, so guarded."""
    seen: dict[str, dict[str, Any]] = {}
    for module in ep.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            name = opaque_name(node.target) if node.op == "call_function" else None
            if name is not None:
                note(seen, name, 0, None)
    return seen


__all__ = ["COUNTED_NAMESPACES", "GUARD_SLACK", "opaque_name", "measured_call", "note", "extrapolate", "vm_size",
           "address_guard", "refused", "graph_opaque"]
