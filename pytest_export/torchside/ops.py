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


# Higher-order ops that carry an op as their first argument: a mutating custom op is functionalized into
# ``auto_functionalized_v2(op, ...)`` (issue #24); ``with_effects(token, op, ...)`` carries it second.
_WRAPPERS = {"auto_functionalized": 0, "auto_functionalized_v2": 0, "with_effects": 1}


def _targets(node) -> list[object]:
    """The ops a call node runs: its target, or the op a wrapper higher-order op carries."""
    at = _WRAPPERS.get(str(getattr(node.target, "__name__", "")))
    if at is not None and len(node.args) > at and isinstance(node.args[at], torch._ops.OpOverload):
        return [node.args[at]]
    return [node.target]


def program_ops(ep) -> dict[str, bool]:
    """{op name: is core} over the program's graph and every subgraph (cond/map/while_loop bodies), the ops that
    wrapper higher-order ops carry included (a mutating custom op inside ``auto_functionalized_v2``)."""
    found: dict[str, bool] = {}
    for gm in ep.graph_module.modules():
        graph = getattr(gm, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            for target in _targets(node):
                if _counted(target):
                    found[op_name(target)] = is_core(target)
    return dict(sorted(found.items()))


def _random_op(target: object) -> bool:
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


_ZERO_MEANS_NOT_RANDOM = ("dropout_p", "p")  # sdpa(dropout_p=0.0), dropout(p=0.0): seeded by tag, random by value


def _random_call(node, target: object) -> bool:
    """Whether this call of a seeded op draws anything: attention and dropout with a probability of 0 do not
    (``ops.random_outputs`` took every attention output for random, and backends never compared its values, #27)."""
    if not _random_op(target):
        return False
    args = list(node.args)
    for i, arg in enumerate(target._schema.arguments):
        if arg.name in _ZERO_MEANS_NOT_RANDOM:
            value = node.kwargs.get(arg.name, args[i] if i < len(args) else arg.default_value)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
                return False
    return True


def _graph_is_random(gm: object) -> bool:
    graph = getattr(gm, "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return False
    return any(n.op == "call_function" and any(_random_call(n, t) for t in _targets(n)) for n in graph.nodes) or any(
        _graph_is_random(sub) for sub in getattr(gm, "children", lambda: [])())


def random_outputs(ep) -> dict[str, object]:
    """What of the program's results its random ops feed (issue #24: a backend with its own random stream, as
    Inductor's and each device's are, cannot reproduce them): ``ops``, the random ops (``nondeterministic_seeded``);
    ``user``, per user output in order, whether it depends on one; ``buffers``, the buffers and ``inputs``, the
    user inputs (by position among them) that forward mutates with such values."""
    gm = ep.graph_module
    random: set[object] = set()
    ops: set[str] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        own = [op_name(t) for t in _targets(node) if _random_call(node, t)]
        subgraphs = [getattr(gm, a.target, None) for a in node.all_input_nodes if a.op == "get_attr"]
        if own or any(_graph_is_random(sub) for sub in subgraphs):
            ops.update(own or [str(getattr(node.target, "__name__", node.target))])
            random.add(node)
        elif any(a in random for a in node.all_input_nodes):
            random.add(node)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
    user_inputs = [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    user: list[bool] = []
    buffers: set[str] = set()
    inputs: set[int] = set()
    for spec, value in zip(ep.graph_signature.output_specs, results):
        hit = isinstance(value, torch.fx.Node) and value in random
        if spec.kind.name == "USER_OUTPUT":
            user.append(hit)
        elif hit and spec.kind.name == "BUFFER_MUTATION":
            buffers.add(spec.target)
        elif hit and spec.kind.name == "USER_INPUT_MUTATION" and spec.target in user_inputs:
            inputs.add(user_inputs.index(spec.target))
    return {"ops": sorted(ops), "user": user, "buffers": buffers, "inputs": inputs}


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


__all__ = ["op_facts", "program_ops", "random_outputs", "is_core", "all_core_ops", "countable_core_ops", "op_name"]
