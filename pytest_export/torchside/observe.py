"""Observing a forward call: the outputs, the inputs afterwards, the buffers afterwards and what it changed in the
module's Python state; and comparing two observations. Every forward the harness runs goes through here, so
none leaves a trace on the user's module (``modstate``) and every one is seeded alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Protocol

import torch
import torch.utils._pytree as pytree  # private module, but torch's only pytree API (export itself uses it)

from .compare import compare_trees, same_structure, structure_difference
from .leftovers import clear_model_caches, closing_transforms
from .modstate import StateKeeper, as_float64, in_float64, python_state, restore_python_state
from .timeout import checkpoint

RUN_SEED = 0x5EED


class Tolerances(Protocol):
    """What a comparison reads of a case's options (``declare.options.CaseOptions``): the torch side imports none of
    the declaration."""

    rtol: float | None
    atol: float | None


@dataclasses.dataclass
class Observation:
    """What one forward call did: its outputs, its inputs afterwards, module buffers afterwards, the plain
    Python attributes of the module tree it changed, and those of them that calls repeat (undone after the
    call; see ``modstate``)."""

    outputs: Any
    inputs: Any
    buffers: dict[str, torch.Tensor]
    python_changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    python_per_call: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def clone_inputs(tree: Any) -> Any:
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def seed_all(seed: int) -> None:
    """``torch.manual_seed`` without its cost where no accelerator is initialized: there it queues a lazy
    seeding call per backend (CUDA, XPU, MTIA) with a formatted stack each time, which costs milliseconds
    per forward call. The CPU generator, and an accelerator's once it is initialized, are seeded alike."""
    torch.random.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def observe(module: Callable[..., Any], owner: torch.nn.Module, args: tuple, kwargs: dict,
            keeper: StateKeeper | None = None, within: Any = None, grad: bool = False) -> Observation:
    """One forward call, seeded, on clones of the inputs, leaving no trace on ``owner`` (``keeper`` keeps its
    original state for the whole case; without one, for this call). Buffers forward did not write are the
    originals, not copies. ``within``: a context the call alone runs in (fake tensors, counting), while the
    state is kept and put back outside it. ``grad``: autograd on; by default the call runs under
    ``torch.no_grad()``, so no activation is kept for a backward that never comes (issue #31: with autograd on,
    a real-width UNet's check needed 3x the memory of an inference call)."""
    keeper = keeper or StateKeeper()
    with keeper.around(owner) as record:
        with within if within is not None else contextlib.nullcontext():
            checkpoint()  # a time limit off the main thread is checked here, before every forward (#32)
            a, k = clone_inputs((args, kwargs))
            seed_all(RUN_SEED)
            try:
                with torch.set_grad_enabled(grad):
                    out = closing_transforms(module, *a, **k)  # a vmap level left on by a raise goes (#55)
            finally:
                if within is not None:  # what a fake run left in the model's own caches goes (#55)
                    clear_model_caches(owner)
        written, original = record["written"], record["original"]
        buffers = {n: b.detach().clone() if written(b) else original(b) for n, b in owner.named_buffers()}
    return Observation(out, (a, k), buffers, record.get("python_changes", []), record.get("python_per_call", []))


def compare_observations(actual: Observation, expected: Observation, options: Tolerances,
                         reference: Observation | str | None = None) -> dict[str, float]:
    """Outputs, then inputs that forward mutated, then buffers; raise Mismatch on the first kind that differs.
    ``reference``: eager's float64 run of the same call (``float64_observe``), or why there is none."""
    tol = {"rtol": options.rtol, "atol": options.atol}  # compare_trees fills in the dtype default of one not given
    ref = (lambda part: reference if not isinstance(reference, Observation) else part(reference))  # noqa: E731
    errs = compare_trees(actual.outputs, expected.outputs, root="output", reference=ref(lambda o: o.outputs), **tol)
    in_errs = compare_trees(actual.inputs, expected.inputs, root="input (after forward)",
                            reference=ref(lambda o: o.inputs), **tol)
    common = sorted(set(actual.buffers) & set(expected.buffers))
    buf_errs = compare_trees(
        {n: actual.buffers[n] for n in common}, {n: expected.buffers[n] for n in common},
        root="buffer (after forward)",
        reference=ref(lambda o: {n: o.buffers.get(n) for n in common}), **tol,
    )
    return {k: max(d.get(k, 0.0) for d in (errs, in_errs, buf_errs)) for k in {**errs, **in_errs, **buf_errs}}


def float64_observe(module: Callable[..., Any], owner: torch.nn.Module, args: tuple, kwargs: dict) -> Observation:
    """The forward call again with the module's float state and the float inputs in float64, leaving no trace:
    the reference eager's own float32 noise is measured against (issue #54)."""
    wide = pytree.tree_map(as_float64, (args, kwargs))
    with in_float64(owner):
        return observe(module, owner, *wide)


def shape_mismatch(actual: Any, expected: Any, root: str = "output") -> str | None:
    """How two output trees differ in structure, tensor shape or dtype (values are not compared: either side may
    be fake tensors); None where they agree."""
    a_leaves, a_spec = pytree.tree_flatten_with_path(actual)
    e_leaves, e_spec = pytree.tree_flatten_with_path(expected)
    if not same_structure(a_spec, e_spec):
        a_keys = [pytree.keystr(k) for k, _ in a_leaves]
        e_keys = [pytree.keystr(k) for k, _ in e_leaves]
        if len(a_keys) != len(e_keys):
            return (f"{root} structure differs: the program gives {len(a_keys)} leaves, eager {len(e_keys)} "
                    f"(program: {', '.join(a_keys[:6]) or 'none'}; eager: {', '.join(e_keys[:6]) or 'none'})")
        return f"{root} structure differs at {structure_difference(a_spec, e_spec, root)}"
    for (path, a), (_, e) in zip(a_leaves, e_leaves):
        where = f"{root}{pytree.keystr(path)}"
        if isinstance(a, torch.Tensor) != isinstance(e, torch.Tensor):
            return f"{where}: the program gives {type(a).__name__}, eager gives {type(e).__name__}"
        if isinstance(a, torch.Tensor):
            if tuple(a.shape) != tuple(e.shape):
                return f"{where}: shape {tuple(a.shape)} from the program, {tuple(e.shape)} from eager"
            if a.dtype != e.dtype:
                return f"{where}: dtype {a.dtype} from the program, {e.dtype} from eager"
        elif isinstance(a, (int, float, bool, str)) and isinstance(e, (int, float, bool, str)) and a != e:
            return f"{where}: {a!r} from the program, {e!r} from eager"
    return None


def _unreproducible(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype} (fed by random ops: values not compared)"
    return f"{type(x).__name__} (fed by random ops: not compared)"


def _mask(tree: Any, flags: Any) -> Any:
    leaves, spec = pytree.tree_flatten(tree)
    flags = list(flags)
    if len(flags) != len(leaves):  # the leaves do not map onto the program's outputs: none is held to values
        flags = [True] * len(leaves)
    return pytree.tree_unflatten([_unreproducible(x) if f else x for x, f in zip(leaves, flags)], spec)


def without_random(obs: Observation, random: dict[str, Any]) -> Observation:
    """``obs`` with every value the program's random ops feed (``ops.random_outputs``) reduced to its shape and
    dtype, for a backend whose random stream is not eager's (issue #24): structure, shapes, dtypes and every
    deterministic value are still compared; the rest cannot be reproduced, so it is not called wrong."""
    if not random.get("ops"):
        return obs
    user = random.get("user") or []
    outputs = _mask(obs.outputs, user) if any(user) else obs.outputs
    inputs = obs.inputs
    if random.get("inputs"):
        count = len(pytree.tree_leaves(inputs))
        inputs = _mask(inputs, [i in random["inputs"] for i in range(count)])
    buffers = {n: _unreproducible(b) if n in random.get("buffers", ()) else b for n, b in obs.buffers.items()}
    return Observation(outputs, inputs, buffers, obs.python_changes, obs.python_per_call)


def random_note(random: dict[str, Any], backend: str) -> str:
    """What ``without_random`` left uncompared, and why: empty where the program has no random op."""
    if not random.get("ops"):
        return ""
    n = sum(random.get("user") or []) + len(random.get("buffers") or ()) + len(random.get("inputs") or ())
    return (f"{n} value{'s' if n != 1 else ''} fed by random ops ({', '.join(random['ops'])}) compared by structure, "
            f"shape and dtype only: {backend}'s random stream is not eager's")


@contextlib.contextmanager
def preserved_python_state(module: torch.nn.Module):
    """Plain Python attributes of the module tree as they were, after the block (export's tracing runs forward):
    the same objects with the same contents. Export restores attributes that tracing assigned by value, as new
    objects, and leaves the old ones as tracing mutated them, so equal values are no proof of nothing changed."""
    before = python_state(module)
    try:
        yield
    finally:
        restore_python_state(module, before)


def python_change_text(change: dict[str, Any]) -> str:
    return f"`{change['path']}` (was {change['was']}, now {change['now']})"


__all__ = ["Observation", "RUN_SEED", "without_random", "random_note", "clone_inputs", "seed_all", "observe",
           "compare_observations", "float64_observe", "shape_mismatch",
           "preserved_python_state", "python_change_text"]
