"""ExecuTorch's lowering, read for findings: what the partitioners took and left (``op_counts``), the operators the
runtime has no kernel for (``missing_kernels``), a lowering error as the operator and the partitioners that left it
(``lowering_failure``), a lowered program planned within bounds (``plan_program``), whether a program writes state the runtime would keep across calls (``mutates_state``), and
the other backend's verdict on a failure (``other_backend``: XNNPACK's own defects are told from the model's), and
what the runtime writes to stderr while it runs (``native_stderr``: its reasons, such as a bounded tensor's capacity).

executorch and torch are imported where they are used; nothing here knows about pytest.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import operator
import os
import re
import sys
import tempfile
import time
from typing import Any, Callable, Iterator

from ..context import StageFailure
from .memory import capped_shape_pass
from ..results import HarnessError
from ..util import describe_exception

PARTITIONERS = {"xnnpack": ("executorch.backends.xnnpack.partition.xnnpack_partitioner", "XnnpackPartitioner", "XNNPACK")}
_NOT_CORE = re.compile(r"Operator torch\._ops\.([\w.]+) is not in Core ATen opset")
_NO_OUT = re.compile(r"Missing out variants: \{([^}]*)\}")
_REASON = re.compile(r"\[(?!cpuinfo)[\w.]+:\d+\] ([^\n]+)")  # the runtime's first log line, not cpuinfo's


def partitioners(backends: tuple[str, ...]) -> list[Any]:
    """The partitioners of ``backends`` (none for ``portable``); ImportError where executorch is missing."""
    return [getattr(importlib.import_module(PARTITIONERS[b][0]), PARTITIONERS[b][1])() for b in backends
            if b in PARTITIONERS]


def other_backends(backends: tuple[str, ...]) -> tuple[str, ...]:
    """The backends that tell a partitioner's defect from the model's: portable alone for any partitioner, XNNPACK
    for portable."""
    return ("portable",) if any(b in PARTITIONERS for b in backends) else ("xnnpack",)


def backend_words(backends: tuple[str, ...]) -> str:
    names = [PARTITIONERS[b][2] for b in backends if b in PARTITIONERS]
    return f"the {' and '.join(names)} partitioner" if names else "the portable kernels alone"


def lower(ep: Any, backends: tuple[str, ...], bounds: dict[str, int] | None = None) -> Any:
    """``ep`` lowered to ExecuTorch's edge dialect with the partitioners of ``backends``; with ``bounds`` (root
    symbol name -> size), each of those dims' upper bound is lowered at most there.

    A delegate sizes its tensors at the upper bounds it is lowered with and allocates them at its first run,
    whatever that run's sizes (ResNet-50 on XNNPACK lowered to batch=64, 1,024 px grew 2.2 GB at a first run at
    batch=2, 224 px): a program planned within a memory cap is lowered within it too. ``bounds`` narrows ``ep``'s
    ranges in place: only a process that discards ``ep`` after (a forked child, ``forked.in_child``) passes it."""
    from executorch.exir import to_edge_transform_and_lower

    if bounds:
        _narrow(ep, bounds)
    return to_edge_transform_and_lower(ep, partitioner=partitioners(backends))


def _narrow(ep: Any, bounds: dict[str, int]) -> None:
    """``ep``'s range constraints and its shape environment's ranges, each named dim's upper bound at most
    ``bounds``' (the delegates read their tensors' upper bounds from the shape environment)."""
    from torch._guards import detect_fake_mode
    from torch.utils._sympy.value_ranges import ValueRanges

    def narrowed(ranges: dict) -> None:
        for sym, r in list(ranges.items()):
            if str(sym) in bounds and r.upper > bounds[str(sym)]:
                ranges[sym] = ValueRanges(r.lower, max(r.lower, bounds[str(sym)]))

    narrowed(ep.range_constraints)
    fake_mode = detect_fake_mode([n.meta.get("val") for n in ep.graph.nodes])
    if fake_mode is not None and fake_mode.shape_env is not None:
        narrowed(fake_mode.shape_env.var_to_range)


def plan_program(edge: Any, exir: Any, bounds: dict[str, int] | None, backends: tuple[str, ...], data: dict[str, Any]) -> Any:
    """``edge`` planned and emitted as an ExecuTorch program, each dynamic dim at ``bounds`` (None: the declared
    ones). A copy of ``edge`` is planned (planning changes the graph), its weights shared, not copied."""
    import copy

    ep = edge.exported_program()
    memo = {id(v): v for v in (*ep.state_dict.values(), *ep.constants.values())}
    config = exir.ExecutorchBackendConfig(**({} if bounds is None else {"sym_shape_eval_pass": capped_shape_pass(bounds)}))
    t0 = time.perf_counter()
    try:
        return copy.deepcopy(edge, memo).to_executorch(config)
    except Exception as exc:  # noqa: BLE001 - what ExecuTorch cannot plan or emit is the finding
        raise lowering_failure(exc, backends, data)
    finally:
        data["plan_s"] = round(data.get("plan_s", 0.0) + time.perf_counter() - t0, 3)


def other_backend(backends: tuple[str, ...], attempt: Callable[[tuple[str, ...]], str | None],
                  right: str = "the runtime runs this right") -> tuple[str, dict]:
    """What the other backend (``other_backends``) says where ``backends`` failed: ``attempt(other)`` lowers the
    program with it and checks it, None where it runs right, else what went wrong (what it raises is its verdict
    too). A sentence for the finding and its record."""
    other = other_backends(backends)
    keyword = f'executorch="{other[0]}"'
    try:
        wrong = attempt(other)
    except HarnessError as exc:  # the harness could not run it (the memory cap): undecided, never "it fails too"
        return (f"\nwith {backend_words(other)} ({keyword}) it could not be checked ({str(exc).splitlines()[0][:300]})",
                {"backends": list(other), "status": "error", "failure": str(exc)[:600]})
    except Exception as exc:  # noqa: BLE001 - the other backend's own failure is its verdict
        wrong = describe_exception(exc, 300)
    if wrong is None:
        return (f"\nwith {backend_words(other)} ({keyword}) {right}: the failure is "
                f"{backend_words(backends)}'s; run with {keyword} to check the model without it, and report it to "
                "ExecuTorch"), {"backends": list(other), "status": "passed"}
    return (f"\nwith {backend_words(other)} ({keyword}) it fails too ({wrong.splitlines()[0][:300]}): not "
            f"{backend_words(backends)}'s alone"), {"backends": list(other), "status": "failed", "failure": wrong[:600]}


def mutates_state(ep: Any) -> bool:
    """Whether the program writes a buffer or an input: as a mutation output of its signature, or in the graph (a
    ``copy_`` into a buffer or a view of one, as torch 2.13 keeps it)."""
    from torch.export.graph_signature import InputKind

    sig = ep.graph_signature
    if sig.buffers_to_mutate or sig.user_inputs_to_mutate:
        return True
    held = {s.arg.name for s in sig.input_specs if s.kind in (InputKind.BUFFER, InputKind.USER_INPUT)
            and hasattr(s.arg, "name")}
    for node in ep.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            written = [a for a, arg in zip(node.args, schema.arguments) if arg.alias_info and arg.alias_info.is_write]
            if any(getattr(_alias_root(a), "name", None) in held for a in written):
                return True
    return False


def _alias_root(node: Any) -> Any:
    """The placeholder a node is a view of (through ``slice``, ``view``, ``select``...), else the node itself."""
    while getattr(node, "op", "") == "call_function" and node.args:
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.returns or schema.returns[0].alias_info is None:
            break
        node = node.args[0]
    return node if getattr(node, "op", "") == "placeholder" else None


def left_by(backends: tuple[str, ...], what: str = "it") -> str:
    """Who left an operator to the portable kernels: the partitioners asked for, or none (``portable``)."""
    names = [PARTITIONERS[b][2] for b in backends if b in PARTITIONERS]
    if not names:
        return f"no partitioner was asked for (backends: portable), so {what} went to the portable kernels"
    return f"the {' and '.join(names)} partitioner{'s' if len(names) > 1 else ''} left {what} to the portable kernels"


def lowering_failure(exc: BaseException, backends: tuple[str, ...], data: dict[str, Any]) -> StageFailure:
    """ExecuTorch's error as a finding: the operator it could not lower, and who left it to the portable kernels."""
    text = str(exc)
    data = {**data, "exception": type(exc).__name__}
    not_core, no_out = _NOT_CORE.search(text), _NO_OUT.search(text)
    if not_core:
        op = not_core.group(1)
        why = "it is outside the Core ATen opset, which the portable kernels implement"
    elif no_out:
        op = no_out.group(1).split(",")[0].strip().strip("'\"")
        why = "it has no out-variant kernel registered (ExecuTorch runs a custom operator through its out= kernel)"
    else:
        return StageFailure(f"ExecuTorch could not lower the exported program: {describe_exception(exc, 1500)}",
                            kind="lowering", **data)
    return StageFailure(f"ExecuTorch could not lower the exported program: operator `{op}`: {left_by(backends)}, "
                        f"and {why}\nExecuTorch's message: {describe_exception(exc, 600)}",
                        kind="unsupported-op", unsupported_op=op, **data)


def op_counts(gm: Any) -> dict[str, Any]:
    """Operators the partitioners took (inside delegate calls) and those left to the portable kernels."""
    delegated, portable, delegates, payload = 0, {}, 0, 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if getattr(node.target, "__name__", "") == "executorch_call_delegate":
            delegates += 1
            lowered = getattr(gm, node.args[0].target)
            inner = lowered.original_module.graph
            payload += len(getattr(lowered, "processed_bytes", b"") or b"")
            # the weights it took, which XNNPACK keeps in the program's named data, not in its payload
            for buf in getattr(getattr(lowered, "named_data_store_output", None), "buffers", None) or []:
                payload += len(buf) if isinstance(buf, (bytes, bytearray)) else int(getattr(buf, "_size", 0) or 0)
            delegated += sum(1 for n in inner.nodes if n.op == "call_function" and n.target is not operator.getitem)
        else:
            name = str(getattr(node.target, "__name__", node.target))
            portable[name] = portable.get(name, 0) + 1
    return {"delegates": delegates, "delegate_bytes": payload, "delegated_ops": delegated,
            "portable_ops": sum(portable.values()),
            "portable_op_names": sorted(portable)}


def missing_kernels(program: Any, runtime: Any) -> list[str]:
    """Operators of the program without a kernel in the runtime (checked before loading: the runtime only logs them)."""
    known = set(runtime.operator_registry.operator_names)
    plan = program.executorch_program.execution_plan
    names = [f"{o.name}.{o.overload}" if o.overload else o.name for p in plan for o in p.operators]
    return list(dict.fromkeys(n for n in names if n not in known))


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """What the runtime writes to stderr (its reasons: a bounded tensor's capacity, a missing operator), kept for
    the finding; nothing reaches the terminal. Its log goes to Python's ``sys.stderr`` where that is replaced (as
    under pytest's capture), else to file descriptor 2: both are caught."""
    said: list[str] = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp, contextlib.redirect_stderr(io.StringIO()) as text:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            said.append(text.getvalue() + tmp.read().decode(errors="replace"))


def runtime_reason(said: list[str]) -> str:
    found = _REASON.search("".join(said))
    return f" (the runtime: {found.group(1).strip()})" if found else ""


__all__ = ["PARTITIONERS", "partitioners", "lower", "plan_program", "other_backends", "other_backend", "left_by", "lowering_failure",
           "op_counts", "missing_kernels", "mutates_state", "native_stderr", "runtime_reason"]
