"""A deployment runtime checked against eager: what the ``onnx`` and ``executorch`` stages share.

``RuntimeChecks.run`` compares the runtime with eager (the exported program where ``compare`` failed) on the
example inputs, then at the sizes ``guards`` probed and ``fuzz`` drew with real tensors (at most
``MAX_SIZE_CHECKS``, within a quarter of the case's budget), then tries the out-of-range sizes the program refused
(at most ``MAX_REFUSAL_CHECKS``). Values fed by random ops are held to their shape and dtype only where they
differ: a runtime's random stream is its own. A subclass says how its runtime is called (``call``), what it does
with an out-of-range size (``refusals``), what it records (``finish``) and how its message reads (``message``).
"""

from __future__ import annotations

import time
from typing import Any

from .compare import Mismatch, compare_trees
from .context import Context, StageFailure
from .observe import Observation, random_note, without_random
from .ops import random_outputs
from .probes.choose import deployment_sizes
from .probes.cost import PROBE_BUDGET_SHARE
from .results import FAILED, XFAILED
from .util import plural

MAX_SIZE_CHECKS = 16
MAX_REFUSAL_CHECKS = 6
EXAMPLE = "the example inputs"


class RuntimeChecks:
    RUNTIME = "the runtime"  # as a message names it: "ONNX Runtime", "the ExecuTorch runtime"
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

    def refusals(self, outside: list[tuple[str, Any]], t0: float, allowance: float | None) -> tuple[int, list[str]]:
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
                + f" (max abs error {data['max_abs_error']:.3g})" + ("" if checked else "; no other size checked"))
        if left:
            text += f", {left} more not run (at most {MAX_SIZE_CHECKS}, in a quarter of the budget)"
        text += self.after_sizes(data)
        if accepted:
            text += (f"; refused {refused} of {refused + len(accepted)} out-of-range sizes ({self.NOT_GUARDED}: "
                     f"accepted {', '.join(accepted)})")
        elif refused:
            text += f"; refused {plural(refused, 'out-of-range size')}"
        return text + (f"; {note}" if note else "")

    def before_sizes(self) -> None:
        """A check of the runtime's own between the example and the sizes (``onnx``: its dynamic axes)."""

    # the checks ------------------------------------------------------------------------------------
    def check_values(self, label: str, got: Any, expected: Any, against: str) -> None:
        """The runtime's outputs against ``expected`` with the case's tolerances; a mismatch fails the stage."""
        tol = {"rtol": self.ctx.options.rtol, "atol": self.ctx.options.atol}
        try:
            errs = compare_trees(got, expected, **tol)
        except Mismatch as exc:
            # values fed by random ops (``ops.random_outputs``: dropout, but also attention that only may drop)
            # are compared too, and called wrong only where they differ without them (issue #24)
            masked = self.random.get("ops") and self.masked_match(got, expected, tol)
            if not masked:
                raise StageFailure(f"{self.RUNTIME} disagrees with {against} on {label}:\n{exc}", kind="mismatch",
                                   errors=exc.errors, **{**self.finish(), **exc.worst()})
            self.random_differs, errs = True, masked
        self.worst = {k: max(self.worst[k], errs[k]) for k in self.worst}

    def masked_match(self, got: Any, expected: Any, tol: dict[str, Any]) -> dict[str, float] | None:
        a = without_random(Observation(got, (), {}), self.random).outputs
        e = without_random(Observation(expected, (), {}), self.random).outputs
        try:
            return compare_trees(a, e, **tol)
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
        want = ctx.reference() if exported_ok else ctx.program_on(ctx.ep, args, kwargs)
        self.compare(EXAMPLE, args, kwargs, want, against)
        self.before_sizes()
        inside, outside = deployment_sizes(ctx, largest_first=self.LARGEST_FIRST)
        allowance = ctx.options.budget * PROBE_BUDGET_SHARE if ctx.options.budget else None
        t0, checked, left = time.perf_counter(), [], 0
        for label, probe in inside[:MAX_SIZE_CHECKS]:
            if out_of_time(t0, allowance):
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
        refused, accepted = self.refusals(outside[:MAX_REFUSAL_CHECKS], t0, allowance)
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


def out_of_time(t0: float, allowance: float | None) -> bool:
    return allowance is not None and time.perf_counter() - t0 > allowance


__all__ = ["RuntimeChecks", "MAX_SIZE_CHECKS", "MAX_REFUSAL_CHECKS", "EXAMPLE", "out_of_time"]
