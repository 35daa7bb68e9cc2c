"""Stage ``onnx`` (off by default): the case's one exported program through ``torch.onnx`` and ONNX Runtime.

``torch.onnx.export(ctx.ep, dynamo=True)`` converts the program itself (no second ``torch.export``: the dynamic
axes come from the program) into ``<workdir>/onnx/model.onnx``, timed. ONNX Runtime's CPU provider then runs it:

- on the example inputs, against eager (the exported program where ``compare`` failed), with the case's tolerances
  (values fed by random ops are held to their shape and dtype only where they differ: ORT's random stream is its own);
- every declared-dynamic axis the program kept must be a symbolic dim (``dim_param``) of the ONNX model's input: one
  exported as a fixed size fails, naming the input and the axis (an axis export itself made static is ``guards``');
- at the sizes ``guards`` probed and ``fuzz`` drew with real tensors (``numeric``, not ``fake``), rebuilt with the
  harness's own input builders, against eager (sizes where the program itself was wrong are left to those stages);
- at the out-of-range sizes the program refused: ONNX Runtime has no range guards, so a size it accepts is
  recorded (``accepted_out_of_range``), not failed; one it refuses counts as ``refused``.

A conversion failure names the operator the exporter could not translate, with the exporter's own diagnostic.
Without the ``[onnx]`` extra (onnx, onnxscript, onnxruntime) the stage is skipped with the install line. The size
checks end when they have spent a quarter of the case's budget (``--export-budget``): the sizes ran numeric in
``guards``/``fuzz``, so they fit the memory cap already. Run it with ``--export-onnx`` or the marker keyword
``onnx=True``; a conversion costs seconds.
"""

from __future__ import annotations

import importlib
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any

from ..context import Context, Stage, StageFailure, StageSkip
from ..memory.cost import format_bytes
from ..results import HarnessError
from ..runtimes.checks import EXAMPLE, Allowance, RuntimeChecks
from ..torchside.observe import Observation
from ..util import describe_exception

INSTALL = 'pip install "pytest-export[onnx]"'
EXTRA = ("onnxruntime", "onnx", "onnxscript")  # onnxruntime first: the one a plain torch install lacks
DIAGNOSTIC_CHARS = 1500
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NO_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>")
_NODE = re.compile(r"Error when translating node %\S+ : .*?target=(?:torch\.ops\.)?([\w.:]+)")
_AT_INPUT = ("Got invalid dimensions", "Invalid rank", "Unexpected input data type")
_NUMPY = {"tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(float)": "float32",
          "tensor(double)": "float64", "tensor(bool)": "bool"}


def run(ctx: Context) -> dict[str, Any]:
    modules, t0 = {}, time.perf_counter()
    for name in EXTRA:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as exc:
            raise StageSkip(f"the onnx stage needs {name}, which is not installed ({exc}): {INSTALL}")
    out = ctx.workdir / "onnx"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    imported = round(time.perf_counter() - t0, 3)  # the first case of a process pays onnx's imports
    data = {**_convert(ctx, path), "import_s": imported}
    onnx, ort = modules["onnx"], modules["onnxruntime"]
    proto = onnx.load(str(path), load_external_data=False)
    data["opset"] = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    cap = ctx.calibration.costs().max_memory
    if data["onnx_bytes"] > cap:  # the session's copy of the weights, allocated when it is made
        raise HarnessError(f"converted in {data['convert_s']:.1f} s; not run in ONNX Runtime: its copy of the "
                           f"weights needs ~{format_bytes(data['onnx_bytes'])} > max_memory {format_bytes(cap)}; raise "
                           "--export-max-memory (max_memory=) to check the runtime")
    t0 = time.perf_counter()
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # no arena: it keeps the largest run's memory for the next and rounds it up to a power of two, where
        # each size's run is held to the cap on its own
        options.enable_cpu_mem_arena = False
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the converted model itself is the finding
        raise StageFailure(f"ONNX Runtime could not load the converted model: {describe_exception(exc, 1500)}",
                           kind="ort-load", **data)
    data["ort_load_s"] = round(time.perf_counter() - t0, 3)
    return _Checks(ctx, session, proto, data).run()


def _convert(ctx: Context, path: Path) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    # the exporter's own warnings (torch's deprecations) are recorded, not raised: under `-W error` they would
    # otherwise read as a model that does not convert
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.onnx.export(ctx.ep, (), str(path), dynamo=True, verbose=False)
        except Exception as exc:  # noqa: BLE001 - what the exporter cannot convert is the finding
            raise conversion_failure(exc, round(time.perf_counter() - t0, 3))
    files = [p for p in path.parent.iterdir() if p.is_file()]  # the model and any external data beside it
    data = {"convert_s": round(time.perf_counter() - t0, 3), "onnx_bytes": sum(os.path.getsize(p) for p in files),
            "onnx_path": str(path)}
    said = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0][:200]}" for w in caught))
    return {**data, "exporter_warnings": said[:5]} if said else data


def conversion_failure(exc: BaseException, seconds: float) -> StageFailure:
    """The exporter's error as a finding: the operator it could not translate, and its own diagnostic."""
    text = _ANSI.sub("", str(exc))
    summary = text.split("## Exception summary", 1)[-1].split("(Refer to the full stack trace", 1)[0].strip()
    diagnostic = summary if "## Exception summary" in text else describe_exception(exc, DIAGNOSTIC_CHARS)
    if len(diagnostic) > DIAGNOSTIC_CHARS:
        diagnostic = diagnostic[: DIAGNOSTIC_CHARS - 16] + "\n... (trimmed)"
    data: dict[str, Any] = {"convert_s": seconds, "exception": type(exc).__name__, "diagnostic": diagnostic}
    missing, node = _NO_FUNCTION.search(text), _NODE.search(text)
    if missing:
        op = f"{missing.group(1)}.{missing.group(2)}"
        head = f"no ONNX translation for operator `{op}` (torch.onnx has no function or decomposition for it)"
        kind = "unsupported-op"
    elif node:
        op = node.group(1)
        first = summary.splitlines()[0] if summary else describe_exception(exc, 300)
        head = f"operator `{op}` failed to translate: {first}"
        kind = "unsupported-op"
    else:
        op, kind = None, "conversion"
        head = describe_exception(exc, 300).splitlines()[0]
    if op:
        data["unsupported_op"] = op
    return StageFailure(f"torch.onnx.export could not convert the exported program: {head}\n"
                        f"the exporter's diagnostic:\n{diagnostic}", kind=kind, **data)


class _Checks(RuntimeChecks):
    """The converted model in ONNX Runtime against eager. A size runs where the session's weights and one forward
    there (half a numeric probe's predicted need: eager's and the program's) fit the memory cap. Inputs and outputs map onto the program's by position:
    the exporter drops constant and None inputs and outputs, and renames the rest."""

    NAME = "onnx"
    RUNTIME = "ONNX Runtime"

    def __init__(self, ctx: Context, session: Any, proto: Any, data: dict[str, Any]):
        import torch.utils._pytree as pytree
        from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

        super().__init__(ctx, data)
        self.session, self.proto, self.ort_s = session, proto, 0.0
        sig = ctx.ep.graph_signature
        user_in = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
        paths = pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(len(user_in))), ctx.ep.call_spec.in_spec))[0]
        key_of = {i: pytree.keystr(k) for k, i in paths}
        self.fed = [key_of[i] for i, s in enumerate(user_in) if not isinstance(s.arg, ConstantArgument)]
        nodes = {n.name: n for n in ctx.ep.graph.nodes if n.op == "placeholder"}
        self.placeholders = {key_of[i]: nodes.get(s.arg.name) for i, s in enumerate(user_in)
                             if not isinstance(s.arg, ConstantArgument)}
        self.inputs = session.get_inputs()
        self.produced = [not isinstance(s.arg, ConstantArgument) for s in sig.output_specs
                         if s.kind == OutputKind.USER_OUTPUT]
        if len(self.fed) != len(self.inputs) or sum(self.produced) != len(session.get_outputs()):
            raise HarnessError(f"cannot map the ONNX model's {len(self.inputs)} inputs and {len(session.get_outputs())} "
                               f"outputs onto the program's {len(self.fed)} tensor inputs and {sum(self.produced)} "
                               "outputs")

    # running ---------------------------------------------------------------------------------------
    def feed(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        import numpy as np
        import torch
        import torch.utils._pytree as pytree

        given = {pytree.keystr(k): v for k, v in pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]}
        out = {}
        for key, info in zip(self.fed, self.inputs):
            value = given[key]
            if isinstance(value, torch.Tensor):
                if value.dtype == torch.bfloat16:
                    # the harness's limit, not the model's: it could not decide (never a quiet skip)
                    raise HarnessError("cannot feed a bfloat16 input to ONNX Runtime: its Python API takes numpy "
                                       "arrays, which have no bfloat16; cast the case's inputs or leave onnx off")
                value = value.detach().cpu()
                if value.is_complex():  # ONNX has no complex type: the exporter takes (..., 2) real tensors
                    value = torch.view_as_real(value.resolve_conj())
                out[info.name] = value.contiguous().numpy()
            else:
                out[info.name] = np.asarray(value, dtype=_NUMPY.get(info.type))
        return out

    def call(self, args: tuple, kwargs: dict, like: Any) -> Any:
        """ONNX Runtime's outputs, as the tree ``like`` (eager's outputs) holds them."""
        import numpy as np
        import torch
        import torch.utils._pytree as pytree

        feed = self.feed(args, kwargs)
        t0 = time.perf_counter()
        try:
            got = iter(self.session.run(None, feed))
        finally:
            self.ort_s += time.perf_counter() - t0
        leaves, spec = pytree.tree_flatten(like)
        if len(leaves) != len(self.produced):
            raise HarnessError(f"eager returns {len(leaves)} values where the program returns {len(self.produced)}")
        new = []
        for leaf, produced in zip(leaves, self.produced):
            if not produced:  # a constant of the program, which compare checks
                new.append(leaf)
                continue
            value = np.asarray(next(got))  # ascontiguousarray makes a 0-d array 1-d: its shape is kept
            tensor = torch.from_numpy(np.ascontiguousarray(value)).reshape(value.shape)
            if isinstance(leaf, torch.Tensor) and leaf.is_complex() and not tensor.is_complex() and tensor.shape[-1:] == (2,):
                tensor = torch.view_as_complex(tensor.to(torch.float64 if leaf.dtype == torch.complex128 else torch.float32))
            new.append(tensor.item() if not isinstance(leaf, torch.Tensor) and tensor.numel() == 1 else tensor)
        return pytree.tree_unflatten(new, spec)

    def compare(self, label: str, args: tuple, kwargs: dict, want: Observation, against: str) -> None:
        import torch
        import torch.utils._pytree as pytree

        expected = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), want.outputs)
        try:
            got = self.call(args, kwargs, expected)
        except (StageSkip, HarnessError):
            raise
        except Exception as exc:  # noqa: BLE001 - what ONNX Runtime does with these inputs is the finding
            what = EXAMPLE if label == EXAMPLE else f"in-range {label}, which the program runs"
            raise StageFailure(f"ONNX Runtime raised on {what}: {describe_exception(exc, 1500)}",
                               kind="ort-raised", **self.finish())
        self.check_values(label, got, expected, against)

    # the checks ------------------------------------------------------------------------------------
    def finish(self) -> dict[str, Any]:
        return {**self.data, **self.worst, "ort_s": round(self.ort_s, 3)}

    def fit(self, inside: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        cap, weights = self.ctx.calibration.costs().max_memory, int(self.data["onnx_bytes"])
        kept, left, worst = [], [], 0
        for label, probe in inside:
            need = weights + (probe.plan.need // 2 if probe.plan is not None else 0)
            if need > cap:
                left.append(label)
                worst = max(worst, need)
            else:
                kept.append((label, probe))
        if left:
            self.data["not_run"] = left
            self.data["coverage"] = (f"not run at {len(left)} of the sizes numerics ran (its weights and a forward "
                                     f"there need up to ~{format_bytes(worst)} > max_memory {format_bytes(cap)})")
        return kept

    def before_sizes(self) -> None:
        self.dynamic_axes()

    def dynamic_axes(self) -> None:
        """Every declared-dynamic axis the program kept is symbolic (``dim_param``) in the ONNX model's inputs."""
        import torch

        decl = self.ctx.declaration
        if decl is None:
            return
        position = {key: i for i, key in enumerate(self.fed)}
        graph_inputs = {i.name: i for i in self.proto.graph.input}
        symbolic, lost = {}, []
        for ax in decl.axes:
            key = decl.keys[ax.flat]
            if ax.dim is None or key not in position:
                continue
            val = getattr(self.placeholders.get(key), "meta", {}).get("val")
            if not isinstance(val, torch.Tensor) or not isinstance(val.shape[ax.dim], torch.SymInt):
                continue  # export itself made it static: guards reports that
            name = self.inputs[position[key]].name
            dims = graph_inputs[name].type.tensor_type.shape.dim if name in graph_inputs else []
            dim = dims[ax.dim] if ax.dim < len(dims) else None
            if dim is not None and dim.HasField("dim_value"):
                lost.append(f"{ax.label} (declared {ax.declared}, {val.shape[ax.dim]} in the program) is the fixed "
                            f"size {dim.dim_value} of the ONNX model's input `{name}` (axis {ax.dim})")
            else:
                symbolic[ax.label] = dim.dim_param if dim is not None and dim.dim_param else "?"
        self.data["dynamic_inputs"] = symbolic
        if lost:
            raise StageFailure("declared-dynamic axes lost in conversion:\n" + "\n".join(f"- {x}" for x in lost),
                               kind="static-axis", lost_axes=lost, **self.finish())

    def refusals(self, outside: list[tuple[str, Any]], allowance: Allowance) -> tuple[int, list[str]]:
        """Out-of-range sizes the program refused, in ONNX Runtime: (how many it refused, those it accepted)."""
        refused, accepted, inside = 0, [], []
        for label, probe in outside:
            if not allowance.take(probe):
                break
            feed = self.feed(*probe.real())
            t1 = time.perf_counter()
            try:
                self.session.run(None, feed)
            except Exception as exc:  # noqa: BLE001 - a refusal, at its input checks or inside a kernel
                refused += 1
                if not any(r in str(exc) for r in _AT_INPUT):
                    inside.append(f"{label}: {describe_exception(exc, 300).splitlines()[0]}")
                continue
            finally:
                self.ort_s += time.perf_counter() - t1
            accepted.append(label)
        if inside:
            self.data["raised_inside"] = inside
        return refused, accepted


    NOT_GUARDED = "ONNX has no range guards"

    def head(self, data: dict[str, Any]) -> str:
        return (f"converted in {data['convert_s']:.1f} s (opset {data['opset']}, "
                f"{format_bytes(data['onnx_bytes'])}); ")

    def after_sizes(self, data: dict[str, Any]) -> str:
        inputs = data.get("dynamic_inputs")
        # the axes by the declaration's names; the ONNX graph's own names for them (torch's symbols) stay in the data
        return "; dynamic in the ONNX model: " + ", ".join(inputs) if inputs else ""


def _enabled(ctx: Context) -> bool:
    return ctx.options.onnx


STAGE = Stage("onnx", run, needs=("eager", "export"), enabled=_enabled)
