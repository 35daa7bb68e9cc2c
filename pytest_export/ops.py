"""ATen ops used by a program, and which of them are Core ATen."""

from __future__ import annotations

import functools

import torch

# Bookkeeping nodes that say nothing about the compute a backend must implement.
_IGNORED_PREFIXES = ("aten.sym_", "aten._assert", "aten.sym_constrain_range")


def op_name(op: object) -> str:
    return str(op)


def is_core(op: object) -> bool:
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.core in op.tags


def _counted(op: object) -> bool:
    if not isinstance(op, torch._ops.OpOverload):
        return False  # operator.getitem, higher-order ops (their subgraphs are walked), python sym math
    return not op_name(op).startswith(_IGNORED_PREFIXES)


def program_ops(ep) -> dict[str, bool]:
    """{op name: is core} over the program's graph and every subgraph (cond/map/while_loop bodies)."""
    found: dict[str, bool] = {}
    for gm in ep.graph_module.modules():
        graph = getattr(gm, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            if node.op == "call_function" and _counted(node.target):
                found[op_name(node.target)] = is_core(node.target)
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=1)
def all_core_ops() -> frozenset[str]:
    """Every Core ATen overload known to this torch.

    ``dir(torch.ops.aten)`` lists only the packets accessed so far in this process, so the dispatcher's
    registry is read as well: the count must not depend on what the process happened to run before.
    """
    names = set()
    packet_names = set(dir(torch.ops.aten))
    packet_names.update(n[len("aten::"):].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                        if n.startswith("aten::"))
    for packet_name in sorted(packet_names):
        try:
            packet = getattr(torch.ops.aten, packet_name)
        except Exception:
            continue
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            try:
                op = getattr(packet, overload)
            except Exception:
                continue
            if is_core(op):
                names.add(op_name(op))
    return frozenset(names)


def countable_core_ops() -> frozenset[str]:
    """The Core ATen ops a program's op list can show (symbolic-size queries and asserts are never counted)."""
    return frozenset(op for op in all_core_ops() if not op.startswith(_IGNORED_PREFIXES))


def op_facts(names) -> dict[str, dict[str, bool]]:
    """{op name: {"core": is Core ATen, "decomposed": the default decomposition table lowers it}}."""
    table = torch.export.default_decompositions()
    out = {}
    for name in sorted(set(names)):
        op = _resolve(name)
        out[name] = {"core": op is not None and is_core(op), "decomposed": op is not None and op in table}
    return out


def _resolve(name: str):
    parts = name.split(".")
    if len(parts) != 3:
        return None
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError):
        return None


__all__ = ["op_facts", "program_ops", "is_core", "all_core_ops", "countable_core_ops", "op_name"]
