"""What a deployment runtime allocates, predicted before it runs and held to the memory cap (``max_memory``).

ExecuTorch plans every tensor of a dynamic dim at its upper bound, and ``load_method`` allocates that plan: an
attention program declared to t=16384 plans 2.2 GB before it runs a single size. ``Bounds.choose`` finds the
upper bounds to lower at: the declared ones where their plan fits the cap, else the largest sizes the harness
runs (those ``guards`` and ``fuzz`` ran numeric), else those brought down toward the example's until the plan
fits; the sizes above the bounds are not run, and say why. ``capped_shape_pass`` is the ExecuTorch pass that
plans at those bounds (its ``sym_shape_eval_pass``).

torch and executorch are imported where they are used; nothing here knows about stages or pytest.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ..memory.cost import format_bytes

SEARCH_STEPS = 6  # plans tried between the example's bounds and the largest run sizes (each a to_executorch)


@dataclasses.dataclass
class Fit:
    """The bounds a runtime's program is planned at, and what it needs there."""

    bounds: dict[str, int] | None  # root symbol name -> upper bound; None: the declared ones
    need: int  # bytes the runtime allocates at these bounds (its plan, and its copy of the weights)
    program: Any  # what ``plan`` returned for these bounds
    declared_need: int  # bytes at the declared bounds
    why: str = ""  # why the bounds are below the declared ones ("" where they are not)


def choose(plan: Callable[[dict[str, int] | None], tuple[Any, int]], cap: int, example: dict[str, int],
           largest: dict[str, int], described: Callable[[dict[str, int]], str]) -> Fit | None:
    """The bounds to plan a runtime's program at: ``plan(bounds)`` -> (program, bytes needed); ``example`` and
    ``largest`` (root symbol -> size): the example's sizes and the largest each root is run at. The declared
    bounds where they fit ``cap``; else ``largest``; else the largest step from the example's toward ``largest``
    that fits. None where even the example's sizes do not fit."""
    program, declared = plan(None)
    if declared <= cap:
        return Fit(None, declared, program, declared)
    why = f"its memory plan at the declared max needs ~{format_bytes(declared)} > max_memory {format_bytes(cap)}"
    top = {s: max(largest.get(s, v), v) for s, v in example.items()}
    program, need_at_top = plan(top)
    if need_at_top <= cap:
        return Fit(top, need_at_top, program, declared, why)
    best: Fit | None = None
    lo, hi = 0.0, 1.0  # share of the way from the example's sizes to ``top``
    for step in range(SEARCH_STEPS):
        share = lo if step == 0 else (lo + hi) / 2
        bounds = {s: example[s] + int(share * (top[s] - example[s])) for s in example}
        if best is not None and bounds == best.bounds:
            break
        program, need = plan(bounds)
        if need <= cap:
            best, lo = Fit(bounds, need, program, declared, why), share
        elif step == 0:
            return None  # not even the example's sizes
        else:
            hi = share
    if best is not None and need_at_top != declared:  # the largest sizes run are below the declared max
        best.why += f"; at {described(top)} ~{format_bytes(need_at_top)}"
    return best


def executorch_plan_bytes(program: Any) -> int:
    """The bytes ExecuTorch's ``load_method`` allocates for a program's planned (non-constant) buffers."""
    return sum(int(size) for p in program.executorch_program.execution_plan for size in p.non_const_buffer_sizes)


def constant_bytes(edge: Any) -> int:
    """The bytes of the weights and constants an edge program keeps outside its delegates (a delegate's own are
    in its payload): the ``.pte`` carries them, and the runtime reads them in."""
    import torch

    ep = edge.exported_program()
    seen: dict[int, int] = {}
    for t in (*ep.state_dict.values(), *ep.constants.values()):
        if isinstance(t, torch.Tensor):
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def capped_shape_pass(bounds: dict[str, int]) -> Any:
    """ExecuTorch's ``ConstraintBasedSymShapeEvalPass``, with each root symbol's upper bound at most ``bounds``
    (name -> size): every tensor is planned at its size there. A symbol with no finite bound is planned at its
    trace hint, as ExecuTorch's own pass does."""
    import torch.utils._pytree as pytree
    from executorch.exir.pass_base import PassResult
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass
    from executorch.exir.sym_util import eval_upper_bound
    from executorch.exir.tensor import TensorSpec
    from torch.fx import GraphModule
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    def upper(value: Any) -> Any:
        if isinstance(value, int):
            return value
        env = value.node.shape_env
        ranges = {k: (ValueRanges(r.lower, min(r.upper, bounds[str(k)])) if str(k) in bounds else r)
                  for k, r in env.var_to_range.items()}
        found = bound_sympy(value.node.expr, ranges).upper
        try:
            return int(found)
        except (TypeError, ValueError, OverflowError):
            return eval_upper_bound(value)

    class Capped(ConstraintBasedSymShapeEvalPass):
        def call(self, graph_module: GraphModule) -> PassResult:
            for sub in graph_module.modules():
                if not isinstance(sub, GraphModule):
                    continue
                for node in sub.graph.nodes:
                    for spec in pytree.tree_flatten(node.meta.get("spec", []))[0]:
                        if isinstance(spec, TensorSpec):
                            spec.shape = [upper(s) for s in spec.shape]
                            spec.stride = [upper(s) for s in spec.stride]
            return PassResult(graph_module, True)

    return Capped()


__all__ = ["Fit", "choose", "constant_bytes", "executorch_plan_bytes", "capped_shape_pass", "SEARCH_STEPS"]
