"""A deployment runtime checked against eager: what the ``onnx`` and ``executorch`` stages share.

``RuntimeChecks.run`` compares the runtime with eager (the exported program where ``compare`` failed) on the
example inputs, then at the sizes ``guards`` probed and ``fuzz`` drew with real tensors (at most
``MAX_SIZE_CHECKS``, within a quarter of the case's budget), then tries the out-of-range sizes the program refused
(at most ``MAX_REFUSAL_CHECKS``). Values fed by random ops are held to their shape and dtype only where they
differ: a runtime's random stream is its own. A subclass says how its runtime is called (``call``), what it does
with an out-of-range size (``refusals``), what it records (``finish``) and how its message reads (``message``).
"""

from __future__ import annotations

import re
from typing import Any

from ..context import Context, StageFailure
from ..memory.cost import PROBE_BUDGET_SHARE
from ..probes.choose import Probe, out_of_range_probes, sized
from ..probes.sized import Sized
from ..results import FAILED, XFAILED
from ..torchside.compare import Mismatch, compare_leaves, default_tolerances
from ..torchside.observe import Observation, random_note, without_random
from ..torchside.ops import random_outputs
from ..util import plural

MAX_SIZE_CHECKS = 16
MAX_REFUSAL_CHECKS = 6
EXAMPLE = "the example inputs"
RUNTIME_TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "complex64": (1e-4, 1e-4),
    "complex128": (1e-7, 1e-7),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
"""(rtol, atol) by dtype for a deployment runtime against eager: its kernel libraries (XNNPACK, the portable
kernels, ONNX Runtime's) sum in another order than ATen's (a float32 matmul over 4,590 terms differs at rel 6e-6,
attention over 4,508 positions at abs 1.2e-5), so torch.testing's float32 default (rtol 1.3e-6, atol 1e-5) fails a
correct lowering; a wrong kernel (tanh GELU for exact: 5e-4) still fails. Integer and bool leaves must be equal.
``runtime_tolerance`` (the marker's, else ``--export-runtime-tolerance``) replaces it for one runtime, the case's
``rtol`` / ``atol`` where that is not given; each of the two on its own."""


def runtime_tolerance(name: str, options: Any) -> Any:
    """``leaf -> (rtol, atol)`` of runtime ``name`` for a case: its ``runtime_tolerance``, else the case's
    ``rtol``/``atol``, else ``RUNTIME_TOLERANCES`` by dtype (None: torch.testing's, for a value that is not a
    floating tensor)."""
    given = (options.runtime_tolerance or {}).get(name) or (options.rtol, options.atol)

    def pick(leaf: Any) -> tuple[float | None, float | None]:
        dtype = str(getattr(leaf, "dtype", "")).replace("torch.", "")
        r, a = RUNTIME_TOLERANCES.get(dtype, (None, None))
        return (r if given[0] is None else given[0]), (a if given[1] is None else given[1])

    return pick


class RuntimeChecks:
    RUNTIME = "the runtime"  # as a message names it: "ONNX Runtime", "the ExecuTorch runtime"
    NAME = ""  # the stage, as ``runtime_tolerance`` names it
    LARGEST_FIRST = False  # the sizes each dim's largest first (a runtime that plans memory at a bound)

    def __init__(self, ctx: Context, data: dict[str, Any]):
        self.ctx, self.data = ctx, data
        self.worst = {"max_abs_error": 0.0, "max_rel_error": 0.0}
        self.random = random_outputs(ctx.ep)
        self.random_differs = False

    # what a runtime says ---------------------------------------------------------------------------
    def call(self, args: tuple, kwargs: dict, like: Any) -> Any:
        """The runtime's outputs on these inputs, as the tree ``like`` (eager's outputs) holds them."""
        raise NotImplementedError

    def refusals(self, outside: list[tuple[str, Any]], allowance: "Allowance") -> tuple[int, list[str]]:
        """Out-of-range sizes the program refused, in the runtime: (how many it refused, those it accepted)."""
        raise NotImplementedError

    def finish(self) -> dict[str, Any]:
        return {**self.data, **self.worst}

    NOT_GUARDED = "the runtime checks no range"  # why an out-of-range size it accepts is recorded, not failed

    def head(self, data: dict[str, Any]) -> str:
        """The message's opening: what making the runtime's program took (``converted in 1.2 s (...); ``)."""
        return ""

    def after_sizes(self, data: dict[str, Any]) -> str:
        """What the message says of the runtime's own between the sizes and the refusals (``onnx``: its
        dynamic inputs)."""
        return ""

    def message(self, data: dict[str, Any], against: str, exported_ok: bool, note: str) -> str:
        refused, accepted, left = data["refused"], data["accepted_out_of_range"], data.get("sizes_left")
        checked = data["sizes_checked"]
        text = (self.head(data) + f"{self.RUNTIME} matches {against} on the example"
                + ((" and" if exported_ok else "; eager on") + f" {plural(checked, 'probed size')}" if checked
                   else " only")  # (#31)
                + f" (max abs error {data['max_abs_error']:.3g}, max rel error {data['max_rel_error']:.3g}"
                + tolerance_text(data.get("tolerance")) + ")" + ("" if checked else "; no other size checked"))
        if left:
            text += f", {left} more not run (at most {MAX_SIZE_CHECKS}, in a quarter of the budget)"
        if data.get("coverage"):
            shown = ", ".join(data.get("not_run", [])[:3]) + (", ..." if len(data.get("not_run", [])) > 3 else "")
            text += f"; {data['coverage']}" + (f": not run at {shown}" if shown else "")
        text += self.after_sizes(data)
        if accepted:
            text += (f"; refused {refused} of {refused + len(accepted)} out-of-range sizes ({self.NOT_GUARDED}: "
                     f"accepted {', '.join(accepted)})")
        elif refused:
            text += f"; refused {plural(refused, 'out-of-range size')}"
        return text + (f"; {note}" if note else "")

    def fit(self, inside: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """The in-range sizes the runtime runs at within the memory cap, made ready to run them (``executorch``:
        its program planned at bounds that fit); those left out go to ``data["not_run"]`` with
        ``data["coverage"]`` saying why."""
        return inside

    def before_sizes(self) -> None:
        """A check of the runtime's own between the example and the sizes (``onnx``: its dynamic axes)."""

    # the checks ------------------------------------------------------------------------------------
    def check_values(self, label: str, got: Any, expected: Any, against: str) -> None:
        """The runtime's outputs against ``expected`` with the case's tolerances; a mismatch fails the stage."""
        tol = runtime_tolerance(self.NAME, self.ctx.options)
        self.note_tolerance(expected, tol)
        try:
            errs = compare_leaves(got, expected, tol)
        except Mismatch as exc:
            # values fed by random ops (``ops.random_outputs``: dropout, but also attention that only may drop)
            # are compared too, and called wrong only where they differ without them (issue #24)
            masked = self.random.get("ops") and self.masked_match(got, expected, tol)
            if not masked:
                raise StageFailure(f"{self.RUNTIME} disagrees with {against} on {label}:\n{exc}", kind="mismatch",
                                   errors=exc.errors, **{**self.finish(), **exc.worst()})
            self.random_differs, errs = True, masked
        self.worst = {k: max(self.worst[k], errs[k]) for k in self.worst}

    def note_tolerance(self, expected: Any, tol: Any) -> None:
        """The tolerance each floating dtype of the outputs was held to, for the report and the message."""
        import torch
        import torch.utils._pytree as pytree

        for leaf in pytree.tree_leaves(expected):
            if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
                r, a = tol(leaf)
                d_r, d_a = default_tolerances(leaf)
                self.data.setdefault("tolerance", {})[str(leaf.dtype).replace("torch.", "")] = [
                    d_r if r is None else r, d_a if a is None else a]

    def masked_match(self, got: Any, expected: Any, tol: Any) -> dict[str, float] | None:
        a = without_random(Observation(got, (), {}), self.random).outputs
        e = without_random(Observation(expected, (), {}), self.random).outputs
        try:
            return compare_leaves(a, e, tol)
        except Mismatch:
            return None

    def compare(self, label: str, args: tuple, kwargs: dict, want: Observation, against: str) -> None:
        import torch
        import torch.utils._pytree as pytree

        expected = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().cpu(), want.outputs)
        self.check_values(label, self.call(args, kwargs, expected), expected, against)

    def run(self) -> dict[str, Any]:
        ctx = self.ctx
        exported_ok = ctx.result.stage_status("compare") not in (FAILED, XFAILED)
        against = "eager" if exported_ok else "the exported program (compare failed)"
        args, kwargs = ctx.case.args, ctx.case.kwargs
        inside, outside = deployment_sizes(ctx, largest_first=self.LARGEST_FIRST)
        inside = self.fit(inside)
        want = ctx.reference() if exported_ok else ctx.program_on(ctx.ep, args, kwargs)
        self.compare(EXAMPLE, args, kwargs, want, against)
        self.before_sizes()
        allowance = Allowance(ctx.options.budget * PROBE_BUDGET_SHARE if ctx.options.budget else None)
        checked, left = [], 0
        for label, probe in inside[:MAX_SIZE_CHECKS]:
            if not allowance.take(probe):
                left += 1
                continue
            a, k = probe.real()
            try:
                want = ctx.eager_on(a, k)
            except Exception:  # noqa: BLE001 - eager itself cannot take these inputs: guards and fuzz say so
                self.data.setdefault("eager_raised", []).append(label)  # recorded: not compared, not hidden
                continue
            self.compare(label, a, k, want, "eager")
            checked.append(label)
        refused, accepted = self.refusals(outside[:MAX_REFUSAL_CHECKS], allowance)
        self.data.update(sizes_checked=len(checked), sizes=checked, refused=refused, accepted_out_of_range=accepted)
        left += max(0, len(inside) - MAX_SIZE_CHECKS)
        if left:
            self.data["sizes_left"] = left
        note = random_note(self.random, self.RUNTIME) if self.random_differs else ""
        if note:
            self.data.update(random_ops=self.random["ops"], not_compared=note)
        data = self.finish()
        data["message"] = self.message(data, against, exported_ok, note)
        return data


def tolerance_text(tolerance: dict[str, list[float]] | None) -> str:
    """``; tolerance rtol 1e-04, atol 1e-05 (float32)`` for a message; "" where nothing floating was compared."""
    if not tolerance:
        return ""
    return "; tolerance " + ", ".join(f"rtol {r:.0e}, atol {a:.0e} ({dtype})" for dtype, (r, a) in tolerance.items())


class Allowance:
    """The nominal seconds a runtime's size checks may take (a quarter of the case's budget; None: no limit), spent
    by each size's predicted cost (its probe's plan), so that the same sizes are checked on any machine under any
    load (issue #43)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.spent = seconds, 0.0

    def take(self, probe: Any) -> bool:
        """Whether ``probe`` fits what is left; if so it is spent."""
        plan = getattr(probe, "plan", None)
        cost = plan.seconds if plan is not None else 0.0
        if self.seconds is not None and self.spent + cost > self.seconds:
            return False
        self.spent += cost
        return True


_PAIR = re.compile(r"(?:^|, )([^=]+?)=(-?\d+)(?=, |$)")


def deployment_sizes(ctx: Context, largest_first: bool = False) -> tuple[list[tuple[str, Sized]], list[tuple[str, Sized]]]:
    """What a deployment stage (``onnx``, ``executorch``) runs its converted program at: the in-range sizes
    ``guards`` and ``fuzz`` ran numeric (the program right there), and the out-of-range ones ``guards`` ran numeric
    that the program refused: (label, ``Sized`` inputs) each. ``largest_first``: for each dim in turn, the size
    that holds its largest value leads (a bounded memory plan fails there first, and the budget may end early)."""
    au = ctx.audit() if ctx.declaration is not None else None
    if au is None:
        return [], []
    model = au.model
    by_name = {n: v.symbol for v in model.vars for n in v.names}
    everything = {v.symbol for v in model.vars}
    seen: list[dict[str, int]] = []
    inside: list[tuple[str, Sized]] = []
    outside: list[tuple[str, Sized]] = []

    def add(values: dict[str, int]) -> None:
        if values and set(values) == everything and values not in seen:
            seen.append(values)
            text = ", ".join(f"{n}={v}" for n, v in model.named(values).items())
            inside.append((f"sizes {text}", sized(ctx, model, values, record=False)))

    guards = ctx.result.stages.get("guards")
    additional = iter(ctx.declaration.additional)
    out_of_range = None
    for rec in guards.data.get("probe_list", []) if guards is not None else []:
        numeric, kind = rec.get("mode") == "numeric", rec.get("kind")
        given = next(additional, None) if kind == "additional" else None
        if not numeric or "finding" in rec:
            continue
        if kind == "in-range" and rec.get("program") == "accepted":
            add({by_name[n]: int(v) for n, v in _PAIR.findall(rec["probe"]) if n in by_name})
        elif kind == "additional" and given is not None and rec.get("program") == "accepted":
            probe = Probe(rec["probe"], {}, {}, "additional", (tuple(given[0]), dict(given[1])))
            inside.append((rec["probe"], sized(ctx, model, {}, probe, record=False)))
        elif kind in ("max", "min", "relation", "static") and rec.get("program") == "refused":
            if out_of_range is None:
                out_of_range = {p.description: p for p in out_of_range_probes(ctx, model)}
            p = out_of_range.get(rec["probe"])
            if p is not None:
                outside.append((p.description, sized(ctx, model, p.values, p, record=False)))
    fuzz = ctx.result.stages.get("fuzz")
    for drawn in fuzz.data.get("drawn", []) if fuzz is not None else []:
        if drawn.get("mode") == "numeric":
            add({by_name[n]: int(v) for n, v in drawn.items() if n in by_name})
    if largest_first and seen:
        ranked = [i for i, (_, probe) in enumerate(inside) if probe.values in seen]  # the sizes, as seen has them
        lead = list(dict.fromkeys(ranked[max(range(len(seen)), key=lambda i: seen[i][v.symbol])] for v in model.vars))
        inside = [inside[i] for i in lead] + [x for i, x in enumerate(inside) if i not in lead]
    return inside, outside


__all__ = ["RuntimeChecks", "RUNTIME_TOLERANCES", "runtime_tolerance", "tolerance_text", "MAX_SIZE_CHECKS", "MAX_REFUSAL_CHECKS", "EXAMPLE", "Allowance"]
