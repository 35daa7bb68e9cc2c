"""What a probe costs, predicted without running it, and whether it may run with real tensors (issue #23).

A probe is a forward call at chosen sizes. Under ``FakeTensorMode`` (real parameters allowed) eager and the
program run at any size in milliseconds and allocate nothing: that is a ``fake`` probe, and it checks what the
program accepts or refuses (guards are evaluated exactly) and the structure, shape and dtype of every output.
The same fake run, counted by ``FlopCounterMode`` and by ``Tally`` (the bytes of the tensors it makes, live and
peak), predicts what the probe would cost with real tensors. Calibrated against the example's measured real
run, the prediction decides whether the probe also runs ``numeric`` (values compared with eager): only where it
fits the memory cap (``--export-max-memory`` / ``max_memory=``) and what is left of the case's time budget
(``--export-budget`` / ``budget=``). ``Costs`` holds one case's calibration, clock, cap and the coverage it
reached per declared dim, which the report prints as one line per dim.

torch is imported lazily; nothing here knows about stages or pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Any

from .coverage import (FAKE, NUMERIC, coverage_line, format_bytes, format_seconds, opaque_line, record, short_of_max,
                       short_text, unrecord)
from .count import Measure, counted, input_bytes, tally_mode
from .opaque import GUARD_SLACK, extrapolate

# the share of the machine's memory one worker's numeric probes may use by default: small enough that a CI
# runner with every core running a worker stays safe (the process itself, torch and the model come on top)
DEFAULT_MEMORY_SHARE = 1 / 16
MIN_DEFAULT_MEMORY = 256 * 2**20
# a numeric probe may take at most this share of the case's budget: the sizes across the range share it (an
# edge may take what is left of it: the edges run first)
PROBE_BUDGET_SHARE = 0.25
# the default budget (--export-budget not given) is raised so that every dim's edges run numeric: to this many
# times their predicted time (a margin over the prediction; what is left goes to the corner and the rest), at most
# EDGE_BUDGET_CAP seconds
EDGE_BUDGET_FACTOR, EDGE_BUDGET_CAP = 1.25, 300.0
# a numeric probe that runs this many times longer than predicted (and at least PROBE_TIMEOUT_FLOOR s) is stopped
PROBE_TIMEOUT_FACTOR, PROBE_TIMEOUT_FLOOR = 20.0, 10.0

def round_budget(seconds: float) -> float:
    """The ``--export-budget`` that runs every edge numeric: ``seconds`` rounded up to a round number (two
    significant digits), so the advice holds once pasted."""
    import math

    if seconds <= 0:
        return 1.0
    step = 10 ** max(0, math.floor(math.log10(seconds)) - 1)
    return float(math.ceil(seconds * 1.05 / step) * step)


def machine_memory() -> int | None:
    """Physical memory of this machine in bytes, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_max_memory() -> int:
    """1/16 of the machine's memory, divided among xdist's workers (at least 256 MiB)."""
    total = machine_memory() or 8 * 2**30
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(MIN_DEFAULT_MEMORY, int(total * DEFAULT_MEMORY_SHARE / max(1, workers)))


MEMORY_MARGIN = 1.2  # resident growth over the live tensors counted (workspaces, rounding), the heap kept honest
# the deterministic plan (issue #43): a probe's cost in nominal seconds, from what its fake run counted (FLOPs, bytes
# made, operators dispatched) at fixed rates, so that the same commit plans the same sizes on any machine under any
# load. The rates are a 2-core CPU's of CI's class (AVX-512), fitted to the wall time of every numeric probe of the
# zoo's CI slice and of a BERT-width encoder (issue #50: the rates before, 2e10 FLOP/s and 4e9 B/s, predicted 2.1x
# the wall time, and 4x at real width, where large matmuls run near the cores' peak); small models are bound by
# the bytes their operators make, large ones by FLOPs; a convolution's FLOPs run at a tenth of a matmul's rate.
# docs/benchmarks.md has predicted vs wall per case
NOMINAL_FLOPS = 3e11  # FLOP/s
NOMINAL_CONV_FLOPS = 3e10  # FLOP/s of convolutions
NOMINAL_BYTES = 3e9  # bytes made per second
NOMINAL_OP_S = 1.5e-5  # seconds of call overhead per operator of a real forward
NOMINAL_FAKE_OP_S = 2e-4  # seconds per operator of a fake forward (a probe checked by shape)
# the safety net: probing that has used this many times the budget (plus the slack) in CPU time plans no more
# numerics; the case says so (``Costs.cut``). CPU time, not the wall clock: the same work reaches it on an idle
# machine and beside other work (issue #51)
NET_FACTOR, NET_SLACK = 4.0, 30.0
def nominal(m: Measure) -> float:
    """Seconds one forward takes at the nominal rates: a function of what was counted, never of the machine or its
    load (what the deterministic plan is made of)."""
    return ((m.flops - m.conv_flops) / NOMINAL_FLOPS + m.conv_flops / NOMINAL_CONV_FLOPS + m.total / NOMINAL_BYTES
            + m.ops * NOMINAL_OP_S)


@dataclasses.dataclass
class Plan:
    """How one probe runs: ``numeric`` (real tensors, values compared) or ``fake`` only; ``None`` where neither
    can (fake tensors cannot run the model and numerics do not fit). ``why`` says why not numeric."""

    mode: str | None
    seconds: float = 0.0  # predicted, for a numeric run (eager and program)
    bytes: int = 0  # predicted, for a numeric run
    why: str = ""


@dataclasses.dataclass
class Costs:
    """One case's calibration, clock, memory cap and the coverage reached per declared dim."""

    max_memory: int
    budget: float | None  # seconds of probing (None: no limit)
    auto: bool = False  # the budget is the default one: ``size_for_edges`` may raise it
    spent_s: float = 0.0  # seconds spent probing so far (``choose``)
    _since: float | None = None  # when the probing now running began
    cpu_s: float = 0.0  # CPU seconds spent probing so far (the safety net's measure)
    _cpu_since: float = 0.0
    example: Measure | None = None  # the example's fake count, with its real time and peak
    real_peak: int = 0  # the example's measured real peak (bytes of live tensors)
    fake_problem: str | None = None  # why fake tensors cannot run this model (then numerics only)
    peak_problem: str | None = None  # why an uncounted example's peak was not measured: numerics stop at its size
    program_problem: str | None = None  # where the program could not be counted fake: eager's count alone there
    coverage: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # (sizes by symbol, predicted seconds, predicted bytes) of the probes counted so far: a probe no larger in any
    # dim than one of them costs no more, so it is planned without a fake run of its own (``sizing.plan_for``)
    known: list[tuple[dict[str, int], float, int]] = dataclasses.field(default_factory=list)
    probes: dict[str, int] = dataclasses.field(default_factory=lambda: {FAKE: 0, NUMERIC: 0})
    largest: dict[str, Any] = dataclasses.field(default_factory=dict)  # the numeric probe predicted to need most
    planned: float = 0.0  # nominal seconds of the probes planned so far: what the budget is spent by (issue #43)
    # seconds set aside for shape checks promised (``guards``' probes), which run fake once the budget is spent:
    reserved: float = 0.0  # numerics are planned within what they leave (BERT-base's plan had totalled 1.34x; #43)
    cut: str = ""  # where the CPU-time safety net stopped numerics (then the plan is no longer the same anywhere)
    # shape checks that ran once the budget could not pay for them (issue #50): every probe promised is checked by
    # shape at least, so they run, and their nominal seconds are told apart, never added to ``budget_spent``
    beyond: float = 0.0
    edges_budget: float = 0.0  # the budget that runs every edge that fits the memory cap numeric (``plan_edges``)
    edges_short: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (edge, why) left by shape
    # the ops the count cannot see into, by name, as the example calibrated them (``opaque``; issue #43): a case with
    # any runs its numeric probes under the memory guard; ``stops``: (sizes by symbol, why, label) it refused
    opaque: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    stops: list[tuple[dict[str, int], str, str]] = dataclasses.field(default_factory=list)

    # the clock: the budget counts probing only (issue #31): the forward calls at sizes other than the example's and the fake
    # runs that predict their cost. export, compare, save/load, decomp and a stage's own fixed work (a re-export,
    # a compile) do not spend it: on a 12-layer encoder they took 23-31 s of a 30 s budget.
    @contextlib.contextmanager
    def probing(self):
        """Count the block as probing time (nested blocks count once)."""
        if self._since is not None:
            yield
            return
        self._since = time.perf_counter()
        self._cpu_since = time.process_time()
        try:
            yield
        finally:
            self.spent_s += time.perf_counter() - self._since
            self.cpu_s += time.process_time() - self._cpu_since
            self._since = None

    def wall(self) -> float:
        """Seconds of probing on the wall clock: recorded, never the plan's measure nor the safety net's."""
        return self.spent_s + (time.perf_counter() - self._since if self._since is not None else 0.0)

    def cpu(self) -> float:
        """CPU seconds of probing (the process's, every thread's): the safety net's measure."""
        return self.cpu_s + (time.process_time() - self._cpu_since if self._since is not None else 0.0)

    def used(self) -> float:
        """The budget spent: the nominal seconds of the probes planned so far (``charge``), the same on any machine
        under any load (issue #43: a busy machine ran 3 of 25 fuzz examples, an idle one 25)."""
        return self.planned

    def charge(self, plan: "Plan", ops: int = 0, probe: Any = None) -> None:
        """A planned probe's nominal cost: its numeric run's, or a fake run's (``ops`` operators) where it runs by
        shape; what was reserved for ``probe`` is given back (``release``). A shape check the budget cannot pay
        for still runs; its cost goes to ``beyond``, and ``used()`` never passes the budget (issue #50: the plan had
        ended above its budget, 3.245 > 3)."""
        self.release(probe)
        # ``decide`` planned a numeric run within what was left, unless the budget does not apply to it (``aoti``'s few
        # sizes after its compile): what runs past the budget is told apart in the same way
        seconds = plan.seconds if plan.mode == NUMERIC else self.fake_seconds(ops)
        room = seconds if self.budget is None else max(0.0, min(seconds, self.budget - self.planned))
        self.planned += room
        self.beyond += seconds - room

    def release(self, probe: Any) -> None:  # give back, once, what was set aside for ``probe``, planned or not
        if probe is not None:
            self.reserved, probe.reserved = max(0.0, round(self.reserved - probe.reserved, 9)), 0.0

    def fake_seconds(self, ops: int = 0) -> float:
        """The nominal cost of one shape check by fake tensors (eager's and the program's) of ``ops`` operators
        (the example's where not given)."""
        return 2 * (ops or (self.example.ops if self.example is not None else 0)) * NOMINAL_FAKE_OP_S

    def reserve(self, seconds: float) -> None:  # set aside for shape checks to come
        self.reserved += seconds

    def set_aside(self, probes: Any) -> None:
        """Set aside each not yet planned probe's check by shape (``probe.reserved``), before numerics are planned."""
        for probe in probes:
            if probe.plan is None and not probe.reserved:
                probe.reserved = self.fake_seconds()
                self.reserve(probe.reserved)

    def left(self) -> float | None:
        return None if self.budget is None else self.budget - self.used() - self.reserved

    def spent(self) -> bool:
        return self.budget is not None and (self.left() or 0.0) <= 0

    def net_cut(self) -> str:
        """Why the safety net stops numerics now ("" where it does not): probing used more CPU time than
        ``NET_FACTOR`` times the budget (and ``NET_SLACK`` s), a model far costlier than counted."""
        if self.budget is None or self.cpu() <= NET_FACTOR * self.budget + NET_SLACK:
            return ""
        self.cut = self.cut or (f"the safety net: probing used {self.cpu():.0f} s of CPU time, "
                                f"{NET_FACTOR:g}x the budget of {self.budget:g} s and {NET_SLACK:g} s more")
        return self.cut

    # prediction ----------------------------------------------------------------------------------
    def predict(self, probe: Measure | None, ratio: float) -> tuple[float, int]:
        """(seconds, bytes) of a numeric run of one probe: eager, then the program while eager's outputs are held.

        Time in nominal seconds (``Measure.nominal``: counted FLOPs, bytes and operators at fixed rates), from the
        probe's fake count, the same on any machine under any load (issue #43); memory from the fake count, scaled
        by the example's real peak over its fake one. Without a count of the probe (fake tensors cannot run it,
        or higher-order ops), the example's scaled by ``ratio`` (the probe's input bytes over the example's)
        squared: attention-like costs grow that fast. Only where nothing of the example could be counted is its
        measured time the base (``basis``: "measured")."""
        ex = self.example
        if ex is None or not (ex.seconds or ex.counted):
            return 0.0, 0
        if probe is None or not probe.counted:
            grow = max(1.0, ratio) ** 2
            base = nominal(ex) if ex.counted else (ex.seconds or 0.0)
            return 2 * base * grow, int((2 * self.real_peak + 3 * ex.inputs) * grow)
        # one forward's live tensors and eager's outputs beside the program's forward, with a margin (issue #31:
        # twice the peak put ResNet-50's batch edge, 0.78 GB in raw torch, at 1.63 GB)
        mem_ratio = max(1.0, self.real_peak / ex.peak) if ex.peak else 1.0
        hidden = self.hidden(probe)
        return 2 * nominal(probe), int(MEMORY_MARGIN * (probe.peak + probe.kept + hidden) * mem_ratio
                                        + 3 * probe.inputs)

    def fixed_seconds(self) -> float:
        """The nominal seconds of a numeric probe's operators' call overhead (eager's and the program's forward, the
        example's operator count), whatever its sizes."""
        return 2 * (self.example.ops if self.example is not None else 0) * NOMINAL_OP_S

    @staticmethod
    def input_seconds(probe: Measure) -> float:
        """Nominal seconds to make a probe's inputs (random tensors of its sizes)."""
        return probe.inputs / NOMINAL_BYTES

    def hidden(self, probe: Measure) -> int:
        """The most bytes one opaque op of ``probe`` holds inside, extrapolated from the example's calibration
        (``opaque.extrapolate``); as if it ran at the forward's peak (0 for an op not calibrated: the guard's)."""
        return max((extrapolate(cal["hidden"], cal["hidden_at"], seen["inputs"]) for name, seen in probe.opaque.items()
                    if (cal := self.opaque.get(name)) and cal.get("hidden")), default=0)

    @property
    def basis(self) -> str:
        """What the plan's times come from: "counted" (deterministic), or "measured" (the example's real time)."""
        return "counted" if self.example is not None and self.example.counted else "measured"

    def size_for_edges(self, seconds: float) -> None:
        """Raise a default budget so that the edges, predicted to take ``seconds`` numeric, fit in it with a margin
        (``EDGE_BUDGET_FACTOR``, at most ``EDGE_BUDGET_CAP``; issue #31). A budget the user set is kept."""
        if self.auto and self.budget is not None:
            self.budget = max(self.budget, min(EDGE_BUDGET_CAP, self.used() + self.reserved
                                               + EDGE_BUDGET_FACTOR * seconds))

    def plan(self, probe: Measure | None, ratio: float, fake_ok: bool, budgeted: bool = True,
             edge: bool = False) -> Plan:
        """``budgeted=False``: the memory cap alone decides (a stage that runs a few fixed sizes after a fixed cost
        of its own, such as ``aoti``'s compile). ``edge``: it may take all that is left of the budget."""
        seconds, need = self.predict(probe, ratio)
        if probe is None and self.peak_problem and ratio > 1:  # nothing to scale: no guess (issue #32)
            return Plan(FAKE if fake_ok else None, seconds, need, f"past the example's size: {self.peak_problem}")
        return self.decide(seconds, need, fake_ok, budgeted, edge)

    def decide(self, seconds: float, need: int, fake_ok: bool, budgeted: bool = True, edge: bool = False) -> Plan:
        """The plan of a probe predicted to take ``seconds`` and ``need`` bytes numeric (``plan``)."""
        why = ""
        cut = self.net_cut() if budgeted else ""
        if need > self.max_memory:
            why = f"needs ~{format_bytes(need)} > max_memory {format_bytes(self.max_memory)}"
        elif self.budget is not None and budgeted:
            share = self.budget * PROBE_BUDGET_SHARE
            left = self.left() or 0.0
            if seconds > share and not edge:
                why = f"needs ~{format_seconds(seconds)} > {format_seconds(share)}, a quarter of the budget"
            elif seconds > left:
                why = "the budget was spent" if left <= 0 else (
                    f"needs ~{format_seconds(seconds)} > the {format_seconds(left)} left of the budget")
        why = why or cut
        if not why:
            return Plan(NUMERIC, seconds, need)
        return Plan(FAKE if fake_ok else None, seconds, need, why)

    def probe_timeout(self, plan: Plan) -> float:
        """The time limit of one numeric probe: far above its prediction, so only a model that makes it far
        costlier than predicted (or hangs) is stopped."""
        return max(PROBE_TIMEOUT_FLOOR, PROBE_TIMEOUT_FACTOR * plan.seconds)

    # coverage ------------------------------------------------------------------------------------
    def record(self, dims: dict[str, tuple[int, int | None, int | None]], mode: str | None, why: str = "") -> None:
        """A probe ran (``mode``) in range at sizes ``dims``: name -> (size, declared min, declared max). ``mode``
        None: neither fake nor numeric could run it; it checked nothing, and ``why`` is the dim's reason (#32)."""
        if mode is not None:
            self.probes[mode] = self.probes.get(mode, 0) + 1
        record(self.coverage, dims, mode, why)

    def stop(self, values: dict[str, int], dims: dict[str, tuple[int, int, int | None]], why: str, fake: bool,
             label: str = "") -> None:
        """The memory guard (issue #43) or the probe's time limit (issue #51) stopped a numeric probe at ``values``:
        where it was in range (``dims``) it
        counts as not numeric (it ran ``fake`` instead, or not at all); a probe at least as large in every dim is
        planned fake."""
        self.stops.append((dict(values), why, label))
        if dims:  # an in-range probe: recorded numeric when it was planned
            self.probes[NUMERIC] -= 1
            self.probes[FAKE] += int(fake)
            unrecord(self.coverage, dims, why)

    def stopped(self, values: dict[str, int]) -> str:
        """Why the guard rules out a probe at ``values`` (one it refused is no larger in any dim), else ""."""
        return next((why for at, why, _ in self.stops if values and at.keys() <= values.keys()
                     and all(values[k] >= x for k, x in at.items())), "")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_memory": self.max_memory, "probes": dict(self.probes),
                               "budget": self.budget, "budget_spent": round(self.used(), 3),
                               "plan": {"basis": self.basis, "predicted_s": round(self.planned + self.beyond, 3),
                                        "wall_s": round(self.wall(), 3), "cpu_s": round(self.cpu(), 3), **({"cut": self.cut} if self.cut else {}),
                                        **({"beyond_budget_s": round(self.beyond, 3)} if self.beyond else {})},
                               "dims": [{k: v for k, v in row.items() if not k.startswith("_")}
                                        for row in self.coverage.values()]}
        out.update({k: getattr(self, k) for k in ("fake_problem", "peak_problem", "program_problem", "largest")
                    if getattr(self, k)})
        if self.opaque:  # which ops the count could not see into, how each was predicted, what the guard refused
            out["opaque"] = {"ops": {name: {"calls": cal["calls"], "predicted": "calibrated" if cal.get("hidden")
                                            else "guarded", "hidden_bytes": cal.get("hidden"),
                                            "at_input_bytes": cal.get("hidden_at")} for name, cal in self.opaque.items()},
                             "guard_bytes": self.max_memory + GUARD_SLACK, "stopped": [f"{label or 'a probe'}: {why}" for _, why, label in self.stops]}
        elif self.stops:  # numeric probes their time limit stopped (issue #51), checked by shape instead
            out["stopped"] = [f"{label or 'a probe'}: {why}" for _, why, label in self.stops]
        if self.edges_short:  # edges the budget left to shape checks, and the budget that runs them (issue #50)
            out["edges_short"] = {"edges": [f"{label}: {why}" for label, why in self.edges_short],
                                  "budget_needed": round_budget(self.edges_budget)}
        if self.example is not None and self.example.seconds:
            out["example"] = {"seconds": round(self.example.seconds, 6), "flops": self.example.flops,
                              "peak_bytes": self.real_peak}
        return out


__all__ = ["FAKE", "NUMERIC", "Costs", "Plan", "Measure", "counted", "tally_mode", "input_bytes",
           "default_max_memory", "machine_memory", "format_bytes", "coverage_line", "short_of_max", "short_text",
           "opaque_line"]
