"""Stage ``executorch`` (off by default): the case's one exported program lowered with ExecuTorch and run in its
runtime, as it ships on device.

``executorch.exir.to_edge_transform_and_lower(ctx.ep, partitioner=[...]).to_executorch()`` lowers the program
itself (no second ``torch.export``) with the partitioners of the case's backends (``--export-executorch-backends``
or the marker's ``executorch=["xnnpack"]``; XNNPACK by default, ``portable`` for none: the portable kernels run
every operator), timed; the ``.pte`` goes to ``<workdir>/executorch/model.pte``. ExecuTorch's runtime then runs it:

- on the example inputs, against eager (the exported program where ``compare`` failed), with the case's tolerances
  (values fed by random ops are held to their shape and dtype only where they differ);
- at the sizes ``guards`` probed and ``fuzz`` drew with real tensors, each dim's largest first: a dynamic dim is an
  upper-bounded memory plan, planned at the dim's declared max (at the example's size where it has none), so a
  size the runtime refuses inside the declared range fails (``refused-in-range``, with the runtime's reason);
- at the out-of-range sizes the program refused: the runtime has no lower bounds, so a size it accepts is recorded
  (``accepted_out_of_range``), not failed; one it refuses counts as ``refused``.

A lowering failure names the operator and the partitioners that left it to the portable kernels. Without the
``[executorch]`` extra the stage is skipped with the install line. The size checks end when they have spent a
quarter of the case's budget, as ``onnx``'s do. Run it with ``--export-executorch`` or ``executorch=True``.
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
from typing import Any, Iterator

from ..context import Context, Stage, StageFailure, StageSkip
from ..observe import Observation
from ..probes.cost import format_bytes
from ..results import HarnessError
from ..runtimes import EXAMPLE, RuntimeChecks, out_of_time
from ..util import describe_exception, plural

INSTALL = 'pip install "pytest-export[executorch]"'
PARTITIONERS = {"xnnpack": ("executorch.backends.xnnpack.partition.xnnpack_partitioner", "XnnpackPartitioner", "XNNPACK")}
_NOT_CORE = re.compile(r"Operator torch\._ops\.([\w.]+) is not in Core ATen opset")
_NO_OUT = re.compile(r"Missing out variants: \{([^}]*)\}")
_REASON = re.compile(r"\[(?!cpuinfo)[\w.]+:\d+\] ([^\n]+)")  # the runtime's first log line, not cpuinfo's


def run(ctx: Context) -> dict[str, Any]:
    backends = tuple(ctx.options.executorch_backends)
    t0 = time.perf_counter()
    try:
        importlib.import_module("executorch")  # first: a missing package is one line, whatever was loaded before
        exir = importlib.import_module("executorch.exir")
        runtime = importlib.import_module("executorch.runtime").Runtime.get()
        partitioners = [getattr(importlib.import_module(PARTITIONERS[b][0]), PARTITIONERS[b][1])()
                        for b in backends if b in PARTITIONERS]
    except ImportError as exc:
        raise StageSkip(f"the executorch stage needs executorch, which is not installed ({exc}): {INSTALL}")
    data: dict[str, Any] = {"backends": list(backends), "import_s": round(time.perf_counter() - t0, 3)}
    program = _lower(ctx, exir, partitioners, backends, data)
    missing = _missing_kernels(program, runtime)
    if missing:
        raise StageFailure(f"the ExecuTorch runtime has no kernel for {', '.join(f'`{m}`' for m in missing)}: "
                           f"{_left_by(backends, 'them' if len(missing) > 1 else 'it')}", kind="unsupported-op",
                           unsupported_op=missing[0], **data)
    t0 = time.perf_counter()
    method, error = None, None
    with _native_stderr() as said:
        try:
            method = runtime.load_program(program.buffer).load_method("forward")
        except Exception as exc:  # noqa: BLE001 - what the runtime cannot load is the finding
            error = exc
    if error is not None:
        raise StageFailure(f"the ExecuTorch runtime could not load the program: {describe_exception(error, 600)}"
                           f"{_reason(said)}", kind="load", **data)
    data["load_s"] = round(time.perf_counter() - t0, 3)
    return _Checks(ctx, method, data).run()


def _left_by(backends: tuple[str, ...], what: str = "it") -> str:
    """Who left an operator to the portable kernels: the partitioners asked for, or none (``portable``)."""
    names = [PARTITIONERS[b][2] for b in backends if b in PARTITIONERS]
    if not names:
        return f"no partitioner was asked for (backends: portable), so {what} went to the portable kernels"
    return f"the {' and '.join(names)} partitioner{'s' if len(names) > 1 else ''} left {what} to the portable kernels"


def _lower(ctx: Context, exir: Any, partitioners: list[Any], backends: tuple[str, ...], data: dict[str, Any]) -> Any:
    t0 = time.perf_counter()
    try:
        edge = exir.to_edge_transform_and_lower(ctx.ep, partitioner=partitioners)
        data.update(_op_counts(edge.exported_program().graph_module))
        program = edge.to_executorch()
    except Exception as exc:  # noqa: BLE001 - what ExecuTorch cannot lower is the finding
        data["lower_s"] = round(time.perf_counter() - t0, 3)
        raise lowering_failure(exc, backends, data)
    data["lower_s"] = round(time.perf_counter() - t0, 3)
    out = ctx.workdir / "executorch"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.pte"
    path.write_bytes(program.buffer)
    data.update(pte_bytes=os.path.getsize(path), pte_path=str(path))
    return program


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
    return StageFailure(f"ExecuTorch could not lower the exported program: operator `{op}`: {_left_by(backends)}, "
                        f"and {why}\nExecuTorch's message: {describe_exception(exc, 600)}",
                        kind="unsupported-op", unsupported_op=op, **data)


def _op_counts(gm: Any) -> dict[str, Any]:
    """Operators the partitioners took (inside delegate calls) and those left to the portable kernels."""
    delegated, portable, delegates = 0, {}, 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if getattr(node.target, "__name__", "") == "executorch_call_delegate":
            delegates += 1
            inner = getattr(gm, node.args[0].target).original_module.graph
            delegated += sum(1 for n in inner.nodes if n.op == "call_function" and n.target is not operator.getitem)
        else:
            name = str(getattr(node.target, "__name__", node.target))
            portable[name] = portable.get(name, 0) + 1
    return {"delegates": delegates, "delegated_ops": delegated, "portable_ops": sum(portable.values()),
            "portable_op_names": sorted(portable)}


def _missing_kernels(program: Any, runtime: Any) -> list[str]:
    """Operators of the program without a kernel in the runtime (checked before loading: the runtime only logs them)."""
    known = set(runtime.operator_registry.operator_names)
    plan = program.executorch_program.execution_plan
    names = [f"{o.name}.{o.overload}" if o.overload else o.name for p in plan for o in p.operators]
    return list(dict.fromkeys(n for n in names if n not in known))


@contextlib.contextmanager
def _native_stderr() -> Iterator[list[str]]:
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


def _reason(said: list[str]) -> str:
    found = _REASON.search("".join(said))
    return f" (the runtime: {found.group(1).strip()})" if found else ""


class _Checks(RuntimeChecks):
    """The lowered program in ExecuTorch's runtime against eager. Inputs and outputs map onto the program's by
    position: the runtime takes every user input, flattened (constants such as ``use_cache=False`` too), and returns
    the outputs it produces."""

    RUNTIME = "the ExecuTorch runtime"
    LARGEST_FIRST = True  # a dynamic dim is an upper-bounded memory plan: its largest size first

    def __init__(self, ctx: Context, method: Any, data: dict[str, Any]):
        from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

        super().__init__(ctx, data)
        self.method, self.run_s = method, 0.0
        sig = ctx.ep.graph_signature
        self.fed = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]  # constants too (use_cache=False)
        self.produced = [not isinstance(s.arg, ConstantArgument) for s in sig.output_specs
                         if s.kind == OutputKind.USER_OUTPUT]

    def execute(self, args: tuple, kwargs: dict) -> list[Any]:
        """The runtime's outputs, copied out of its planned memory."""
        import torch
        import torch.utils._pytree as pytree

        flat = pytree.tree_flatten((tuple(args), dict(kwargs)))[0]
        if len(flat) != len(self.fed):
            raise HarnessError(f"cannot map {len(flat)} inputs onto the program's {len(self.fed)} user inputs")
        feed = [v.detach().contiguous() if isinstance(v, torch.Tensor) else v for v in flat]
        t0 = time.perf_counter()
        try:
            return [o.clone() if isinstance(o, torch.Tensor) else o for o in self.method.execute(feed)]
        finally:
            self.run_s += time.perf_counter() - t0

    def call(self, args: tuple, kwargs: dict, like: Any) -> Any:
        """The runtime's outputs, as the tree ``like`` (eager's outputs) holds them."""
        import torch.utils._pytree as pytree

        got = self.execute(args, kwargs)
        leaves, spec = pytree.tree_flatten(like)
        if len(got) == len(leaves):
            return pytree.tree_unflatten(got, spec)
        if len(got) != sum(self.produced) or len(leaves) != len(self.produced):
            raise HarnessError(f"cannot map the runtime's {len(got)} outputs onto eager's {len(leaves)} values")
        it = iter(got)
        return pytree.tree_unflatten([next(it) if p else leaf for leaf, p in zip(leaves, self.produced)], spec)

    def compare(self, label: str, args: tuple, kwargs: dict, want: Observation, against: str) -> None:
        import torch
        import torch.utils._pytree as pytree

        expected = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), want.outputs)
        with _native_stderr() as said:
            try:
                got = self.call(args, kwargs, expected)
            except HarnessError:
                raise
            except Exception as exc:  # noqa: BLE001 - what the runtime does with these inputs is the finding
                error = exc
            else:
                error = None
        if error is not None:
            example = label == EXAMPLE
            what = EXAMPLE if example else f"in-range {label}, which the program runs"
            hint = "" if example or not self.unbounded() else (
                f"; {self.unbounded()} declared without a max: ExecuTorch plans its memory at the example's size, "
                "so declare the max the model must run at")
            raise StageFailure(f"the ExecuTorch runtime refused {what}: {describe_exception(error, 600)}"
                               f"{_reason(said)}{hint}", kind="raised" if example else "refused-in-range",
                               **self.finish())
        self.check_values(label, got, expected, against)

    def unbounded(self) -> str:
        au = self.ctx.audit() if self.ctx.declaration is not None else None
        return ", ".join("/".join(v.names) for v in au.model.vars if v.unbounded) if au is not None else ""

    def finish(self) -> dict[str, Any]:
        return {**self.data, **self.worst, "run_s": round(self.run_s, 3)}

    def refusals(self, outside: list[tuple[str, Any]], t0: float, allowance: float | None) -> tuple[int, list[str]]:
        """Out-of-range sizes the program refused, in the runtime: (how many it refused, those it accepted); the
        runtime's reason for each refusal goes to ``refusals``."""
        refused, accepted = 0, []
        for label, probe in outside:
            if out_of_time(t0, allowance):
                break
            with _native_stderr() as said:
                try:
                    self.execute(*probe.real())
                    ran = True
                except HarnessError:
                    raise
                except Exception:  # noqa: BLE001 - a refusal: a bounded tensor's capacity, a static size
                    ran = False
            if ran:
                accepted.append(label)
            else:
                refused += 1
                self.data.setdefault("refusals", []).append(f"{label}{_reason(said)}")
        return refused, accepted


    NOT_GUARDED = "no lower bounds in the runtime"

    def head(self, data: dict[str, Any]) -> str:
        ops = (f"{data['delegated_ops']} ops delegated in {plural(data['delegates'], 'call')}, "
               f"{data['portable_ops']} on portable kernels")
        return (f"lowered in {data['lower_s']:.1f} s ({'+'.join(data['backends'])}: {ops}; .pte "
                f"{format_bytes(data['pte_bytes'])}); ")


def _enabled(ctx: Context) -> bool:
    return ctx.options.executorch


STAGE = Stage("executorch", run, needs=("eager", "export"), enabled=_enabled)
