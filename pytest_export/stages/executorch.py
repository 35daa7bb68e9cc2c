"""Stage ``executorch`` (off by default): the case's one exported program lowered with ExecuTorch and run in its
runtime, as it ships on device.

``executorch.exir.to_edge_transform_and_lower(ctx.ep, partitioner=[...]).to_executorch()`` lowers the program
itself (no second ``torch.export``) with the partitioners of the case's backends (``--export-executorch-backends``
or the marker's ``executorch=["xnnpack"]``; XNNPACK by default, ``portable`` for none: the portable kernels run
every operator), timed; the ``.pte`` goes to ``<workdir>/executorch/model.pte``. ExecuTorch's runtime then runs it:

- planned first (``runtimes.memory``): at the declared bounds where the plan and the delegates' copy of the weights
  fit ``max_memory``, else at the largest sizes that do (the sizes above are not run: ``coverage``, ``not_run``);
- on the example inputs, against eager (the exported program where ``compare`` failed), with the runtime's
  tolerances (``runtimes.checks.RUNTIME_TOLERANCES``; values fed by random ops are held to their shape and dtype
  only where they differ), a freshly loaded program per call where the program writes a buffer (eager's is reset
  per call);
- at the sizes ``guards`` probed and ``fuzz`` drew with real tensors, each dim's largest first: a dynamic dim is an
  upper-bounded memory plan, planned at the dim's declared max (at the example's size where it has none), so a
  size the runtime refuses inside the declared range fails (``refused-in-range``, with the runtime's reason);
- at the out-of-range sizes the program refused: the runtime has no lower bounds, so a size it accepts is recorded
  (``accepted_out_of_range``), not failed; one it refuses counts as ``refused``.

A lowering failure names the operator and the partitioners that left it to the portable kernels; a failure says
what the other backend does with the same inputs (``lowering.other_backend``). Without the
``[executorch]`` extra the stage is skipped with the install line. The size checks end when they have spent a
quarter of the case's budget, as ``onnx``'s do. Run it with ``--export-executorch`` or ``executorch=True``.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from ..context import Context, Stage, StageFailure, StageSkip
from ..torchside.observe import Observation
from ..probes.choose import counted_need
from ..memory.cost import format_bytes
from ..torchside.compare import Mismatch, compare_leaves
from ..runtimes.forked import Watched, in_child
from ..runtimes.lowering import (left_by, lower, lowering_failure, missing_kernels, mutates_state, native_stderr,
                                 op_counts, other_backend, partitioners, plan_program, runtime_reason)
from ..results import HarnessError
from ..runtimes.memory import Fit, choose, constant_bytes, executorch_plan_bytes
from ..runtimes.checks import EXAMPLE, Allowance, RuntimeChecks, runtime_tolerance
from ..util import describe_exception, plural

INSTALL = 'pip install "pytest-export[executorch]"'
# the runtime's allocations beyond its plan and weights (the method's state, its outputs, the allocator's rounding):
# BERT-base at real width grew the process by 1.70 GB where 1.48 GB was counted
RUNTIME_MARGIN = 1.2
LOWERING_S = 1800.0  # the lowering's child is stopped past this, where the case's own time limit has not stopped it


def run(ctx: Context) -> dict[str, Any]:
    backends = tuple(ctx.options.executorch_backends)
    t0 = time.perf_counter()
    try:
        importlib.import_module("executorch")  # first: a missing package is one line, whatever was loaded before
        exir = importlib.import_module("executorch.exir")
        runtime = importlib.import_module("executorch.runtime").Runtime.get()
        partitioners(backends)
    except ImportError as exc:
        raise StageSkip(f"the executorch stage needs executorch, which is not installed ({exc}): {INSTALL}")
    data: dict[str, Any] = {"backends": list(backends), "import_s": round(time.perf_counter() - t0, 3)}
    return _Checks(ctx, exir, runtime, data).run()


def _told(exc: StageFailure, text: str, record: dict[str, Any]) -> StageFailure:
    """``exc`` with the other backend's verdict added to its message and its data."""
    return StageFailure(str(exc) + text, kind=exc.kind, **{**exc.data, "other_backend": record})


def _lower(ctx: Context, exir: Any, runtime: Any, backends: tuple[str, ...], data: dict[str, Any],
           bounds: dict[str, int] | None = None) -> Any:
    """The program lowered to ExecuTorch's edge dialect with the backends' partitioners (planned later, at the
    bounds that fit the memory cap: ``_Checks.fit``); a failure says what the other backend does. In a forked
    child only: ``bounds`` narrows ``ctx.ep`` (``lowering.lower``)."""
    t0 = time.perf_counter()
    try:
        edge = lower(ctx.ep, backends, bounds)
        data.update(op_counts(edge.exported_program().graph_module), constant_bytes=constant_bytes(edge))
    except Exception as exc:  # noqa: BLE001 - what ExecuTorch cannot lower is the finding
        data["lower_s"] = round(time.perf_counter() - t0, 3)
        failure = lowering_failure(exc, backends, data)

        def attempt(other: tuple[str, ...]) -> str | None:
            missing = missing_kernels(plan_program(lower(ctx.ep, other), exir, None, other, {}), runtime)
            return f"the runtime has no kernel for {', '.join(missing)}" if missing else None

        raise _told(failure, *other_backend(backends, attempt, "it lowers")) from None
    data["lower_s"] = round(data.get("lower_s", 0.0) + time.perf_counter() - t0, 3)
    return edge


class _Checks(RuntimeChecks):
    """The lowered program in ExecuTorch's runtime against eager. Inputs and outputs map onto the program's by
    position: the runtime takes every user input, flattened (constants such as ``use_cache=False`` too), and returns
    the outputs it produces."""

    NAME = "executorch"
    RUNTIME = "the ExecuTorch runtime"
    LARGEST_FIRST = True  # a dynamic dim is an upper-bounded memory plan: its largest size first

    def __init__(self, ctx: Context, exir: Any, runtime: Any, data: dict[str, Any]):
        from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

        super().__init__(ctx, data)
        self.exir, self.runtime, self.loaded, self.method, self.run_s = exir, runtime, None, None, 0.0
        self.calls, self.bounds, self.last = 0, None, None
        self.backends = tuple(data["backends"])
        sig = ctx.ep.graph_signature
        self.fed = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]  # constants too (use_cache=False)
        self.produced = [not isinstance(s.arg, ConstantArgument) for s in sig.output_specs
                         if s.kind == OutputKind.USER_OUTPUT]
        # a program that mutates buffers keeps them across calls in the runtime: each call gets a freshly loaded
        # program, as eager's buffers are reset before each call (a counter's second call would see 2, not 1)
        self.stateful = mutates_state(ctx.ep)

    def need(self, program: Any, data: dict[str, Any]) -> int:
        """Bytes the runtime holds for ``program``: its planned buffers; the weights left to the portable kernels
        (read in from the file: a 201 MB linear stack on portable kernels grew the process by 217 MB with an 18 MB
        plan); a delegate's payload read in, and its weights packed again (BERT-base on XNNPACK, 438 MB of
        payload: 0.83 GB over its plan, half at ``load_method``, half at the first ``execute``); times
        ``RUNTIME_MARGIN`` for what the runtime allocates beyond them."""
        return int(RUNTIME_MARGIN * (executorch_plan_bytes(program) + 2 * int(data.get("delegate_bytes", 0))
                                     + int(data.get("constant_bytes", 0))))

    def fit(self, inside: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        cap, model = self.ctx.calibration.costs().max_memory, self.model()
        roots = {v.symbol: str(model.symbols[v.symbol]) for v in model.vars} if model is not None else {}
        example = {roots[v.symbol]: v.example for v in model.vars} if model is not None else {}
        largest = {roots[k]: max(p.values[k] for _, p in inside if k in p.values) for k in roots
                   if any(k in p.values for _, p in inside)}
        by_root = {roots[v.symbol]: "/".join(v.names) for v in model.vars} if model is not None else {}
        path = self.ctx.workdir / "executorch" / "model.pte"
        path.parent.mkdir(parents=True, exist_ok=True)

        def described(bounds: dict[str, int]) -> str:
            return ", ".join(f"{by_root.get(r, r)}={b}" for r, b in bounds.items())

        known = self.ctx.calibration.costs().known  # (sizes, seconds, bytes) of the counted probes

        def forward(values: dict[str, int]) -> int:
            """Eager's forward at sizes the runtime is compared at: half the smallest numeric need predicted for a
            counted probe no smaller (eager's forward and the program's)."""
            over = [need for at, _, need in known if at.keys() >= values.keys()
                    and all(x <= at[k] for k, x in values.items())]
            return min(over) // 2 if over else 0

        def beside(bounds: dict[str, int] | None) -> int:
            """Eager's forward, which runs beside the loaded plan, at the largest of the sizes the runtime runs
            under ``bounds`` (BERT-base at real width: without it the stage grew 8% past the cap)."""
            runs = [p.values for _, p in inside
                    if bounds is None or all(p.values.get(k, 0) <= bounds[r] for k, r in roots.items())]
            base = {sym: example[r] for sym, r in roots.items()}
            return max((forward(v) for v in runs), default=forward(base))
        tops = {str(model.symbols[v.symbol]): v.hi for v in model.vars} if model is not None else {}

        def workspace(bounds: dict[str, int] | None) -> int:
            """A delegate's workspace, sized at the bounds it is lowered with at its first run, whatever that run's
            sizes (``lowering.lower``; ResNet-50 on XNNPACK lowered to batch=2, 992 px grew 284 MB at a first run at
            224 px, 107 MB more at 992 px): one forward at the bounds, counted fake (else eager's known counts)."""
            at = {sym: (bounds or tops)[r] for sym, r in roots.items() if r in (bounds or tops)}
            need = counted_need(self.ctx, model, at) if model is not None else None
            return need // 2 if need is not None else forward(at)

        def work(within: dict[str, int] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
            """In a forked child (``forked.in_child``): lowering and planning grow the process by about twice
            the weights, and much of it stays after it is freed (BERT-base: 0.78 GB, 0.5 GB kept); the child
            gives all of it back, and only the ``.pte`` comes out. ``within``: the bounds chosen, lowered within
            (a delegate's program, ``lowering.lower``), in a child of its own: one lowering's memory at a time."""
            data = dict(self.data)
            edge = _lower(self.ctx, self.exir, self.runtime, self.backends, data, within)

            def plan(bounds: dict[str, int] | None) -> tuple[Any, int]:
                program = plan_program(edge, self.exir, bounds, self.backends, data)
                # a delegate's activations live in its own workspace, not the plan, and stay after a run
                inside_delegates = workspace(bounds) if data.get("delegates") else 0
                return program, self.need(program, data) + beside(bounds) + inside_delegates

            if within is not None:
                program, need = plan(within)
                fit = Fit(within, need, program, 0)
            else:
                fit = choose(plan, cap, example, largest, described) if example else None
            if fit is None and example:
                raise HarnessError(f"{self.head(data)}not run in the ExecuTorch runtime: its memory plan at the "
                                   f"example's sizes needs ~{format_bytes(plan(example)[1])} > max_memory "
                                   f"{format_bytes(cap)}; raise --export-max-memory (max_memory=) to check the runtime")
            if fit is None:  # static shapes: one plan
                program, need = plan(None)
                fit = Fit(None, need, program, need)
            found = {"bounds": fit.bounds, "need": fit.need, "declared_need": fit.declared_need, "why": fit.why}
            if within is None and fit.bounds is not None and data.get("delegates"):
                return data, {**found, "again": True}  # lowered again within the bounds, in a fresh child
            program, fit.program = fit.program, None
            with open(path, "wb") as f:  # streamed: ``program.buffer`` would hold the whole file in memory once more
                program.write_to_file(f)
            data["pte_bytes"] = os.path.getsize(path)
            missing = missing_kernels(program, self.runtime)
            if missing:
                raise StageFailure(f"the ExecuTorch runtime has no kernel for {', '.join(f'`{m}`' for m in missing)}: "
                                   f"{left_by(self.backends, 'them' if len(missing) > 1 else 'it')}",
                                   kind="unsupported-op", unsupported_op=missing[0], **data)
            return data, found

        watched = Watched()  # what the child made (``lower_memory``): given back when it ended
        data, found = in_child(work, cap, LOWERING_S, "ExecuTorch's lowering and memory planning", watched)
        if found.pop("again", False):
            again = Watched()
            first_s = data.get("lower_s", 0.0)
            data, lowered = in_child(lambda: work(found["bounds"]), cap, LOWERING_S,
                                     "ExecuTorch's lowering within the bounds that fit", again)
            found["need"], watched.peak = lowered["need"], max(watched.peak, again.peak)
            data["lower_s"] = round(first_s + data.get("lower_s", 0.0), 3)
        fit = Fit(program=None, **found)
        self.data.update(data, pte_path=str(path), lower_memory=watched.peak)
        self.data["memory"] = {"need": fit.need, "declared_need": fit.declared_need, "max_memory": cap,
                               "bounds": None if fit.bounds is None else
                               {by_root.get(r, r): b for r, b in fit.bounds.items()}}
        self.bounds = fit.bounds
        self.load(path)
        kept = [(label, p) for label, p in inside
                if fit.bounds is None or all(p.values.get(k, 0) <= fit.bounds[r] for k, r in roots.items())]
        why = [f"run to {described(fit.bounds)} ({fit.why})"] if fit.bounds is not None else []
        left = [label for label, p in inside if all(p is not q for _, q in kept)]
        if left:
            self.data["not_run"] = left
        if why:
            self.data["coverage"] = "; ".join(why)
        return kept

    def run(self) -> dict[str, Any]:
        try:
            return super().run()
        except StageFailure as exc:
            if exc.kind not in ("mismatch", "raised", "refused-in-range") or self.last is None:
                raise
            self.method = self.loaded = None  # the failing program's memory goes before the other's is planned
            raise _told(exc, *other_backend(self.backends, self.rerun)) from None

    def rerun(self, other: tuple[str, ...]) -> str | None:
        """The failing inputs (``self.last``) in the program the ``other`` backends lower, planned at the same
        bounds (lowered in a child, as ``fit``'s): None where it matches eager, else what went wrong."""
        args, kwargs, expected = self.last
        cap, path = self.ctx.calibration.costs().max_memory, self.ctx.workdir / "executorch" / "other.pte"

        def work() -> str | None:
            edge = lower(self.ctx.ep, other)
            data = {**op_counts(edge.exported_program().graph_module), "constant_bytes": constant_bytes(edge)}
            program = plan_program(edge, self.exir, self.bounds, other, {})
            need = self.need(program, data)
            if need > cap:
                raise HarnessError(f"its memory plan needs ~{format_bytes(need)} > max_memory {format_bytes(cap)}")
            with open(path, "wb") as f:
                program.write_to_file(f)
            return None

        said = in_child(work, cap, LOWERING_S, "ExecuTorch's lowering with the other backend")
        if said is not None:
            return said
        self.stateful, self.loaded = False, self.runtime.load_program(str(path))
        self.method = self.loaded.load_method("forward")
        with native_stderr() as said_natively:
            try:
                got = self.call(args, kwargs, expected)
                compare_leaves(got, expected, runtime_tolerance(self.NAME, self.ctx.options))
            except Mismatch as exc:
                return f"it disagrees with eager: {str(exc).splitlines()[0]}"
            except HarnessError:
                raise
            except Exception as exc:  # noqa: BLE001 - its refusal is its verdict
                return f"{describe_exception(exc, 300)}{runtime_reason(said_natively)}"
        return None

    def model(self) -> Any:
        au = self.ctx.audit() if self.ctx.declaration is not None else None
        return au.model if au is not None and au.model.vars else None

    def load(self, path: Any) -> None:
        """Load the ``.pte`` from its file (mapped: the portable kernels read its weights in place)."""
        t0 = time.perf_counter()
        with native_stderr() as said:
            try:
                self.loaded = self.runtime.load_program(str(path))
                self.method = self.loaded.load_method("forward")
            except Exception as exc:  # noqa: BLE001 - what the runtime cannot load is the finding
                raise StageFailure(f"the ExecuTorch runtime could not load the program: "
                                   f"{describe_exception(exc, 600)}{runtime_reason(said)}", kind="load", **self.data)
        self.data["load_s"] = round(time.perf_counter() - t0, 3)

    def execute(self, args: tuple, kwargs: dict) -> list[Any]:
        """The runtime's outputs, copied out of its planned memory (a fresh method first where the program
        mutates buffers: the state eager starts each call from)."""
        import torch
        import torch.utils._pytree as pytree

        flat = pytree.tree_flatten((tuple(args), dict(kwargs)))[0]
        if len(flat) != len(self.fed):
            raise HarnessError(f"cannot map {len(flat)} inputs onto the program's {len(self.fed)} user inputs")
        feed = [v.detach().contiguous() if isinstance(v, torch.Tensor) else v for v in flat]
        t0 = time.perf_counter()
        try:
            if self.stateful and self.calls:
                # a mutated buffer lives in the loaded program's memory, which a new method of it shares: both go,
                # freed before their successors allocate the plan again
                self.method = self.loaded = None
                self.loaded = self.runtime.load_program(self.data["pte_path"])
                self.method = self.loaded.load_method("forward")
            self.calls += 1
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
        self.last = (args, kwargs, expected)  # what the other backend is run on where this fails
        with native_stderr() as said:
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
                               f"{runtime_reason(said)}{hint}", kind="raised" if example else "refused-in-range",
                               **self.finish())
        self.check_values(label, got, expected, against)

    def unbounded(self) -> str:
        au = self.ctx.audit() if self.ctx.declaration is not None else None
        return ", ".join("/".join(v.names) for v in au.model.vars if v.unbounded) if au is not None else ""

    def finish(self) -> dict[str, Any]:
        return {**self.data, **self.worst, "run_s": round(self.run_s, 3)}

    def refusals(self, outside: list[tuple[str, Any]], allowance: Allowance) -> tuple[int, list[str]]:
        """Out-of-range sizes the program refused, in the runtime: (how many it refused, those it accepted); the
        runtime's reason for each refusal goes to ``refusals``."""
        refused, accepted = 0, []
        for label, probe in outside:
            if not allowance.take(probe):
                break
            with native_stderr() as said:
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
                self.data.setdefault("refusals", []).append(f"{label}{runtime_reason(said)}")
        return refused, accepted

    NOT_GUARDED = "no lower bounds in the runtime"

    def head(self, data: dict[str, Any]) -> str:
        ops = (f"{data['delegated_ops']} ops delegated in {plural(data['delegates'], 'call')}, "
               f"{data['portable_ops']} on portable kernels")
        pte = f"; .pte {format_bytes(data['pte_bytes'])}" if "pte_bytes" in data else ""
        return f"lowered in {data['lower_s']:.1f} s ({'+'.join(data['backends'])}: {ops}{pte}); "


def _enabled(ctx: Context) -> bool:
    return ctx.options.executorch


STAGE = Stage("executorch", run, needs=("eager", "export"), enabled=_enabled)
