"""Stage ``fuzz``: Hypothesis draws sizes inside the declared ranges and compares the program with eager.

Boundaries come first (every variable at its min, at its max, at the example's size; min, max, their
neighbours, 2 and the example's size stay likely later on). A failure is shrunk by Hypothesis to its smallest
sizes and reported with the symbol values, every input shape, the error sizes and how to replay it.

One verdict per commit (issue #51): the search is seeded by the case (its node id), never by the clock, the
machine or an example database, so every run of the same tree draws the same sizes, serially, under xdist, under
``CI=true`` and in a fresh checkout; ``seed=`` or ``--hypothesis-seed`` choose another seed. Sizes that `guards`
proved the program refuses (and fails on) are left to it, and counted. There is no deadline and no health-check
noise. A ``reproduce=`` blob that no longer fails is a warning naming the keyword to remove, and the search runs.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..context import Context, Stage, StageFailure, StageSkip
from ..declare.blob import BLOB, parse_blob
from ..explain.refusal import mark_refusal
from ..probes.choose import (REFUSED_IN_RANGE, UNCHECKED, WRONG_IN_RANGE, in_range_problem, outside_promise,
                             plan_for, run_program, sized)
from ..probes.strategies import BuilderError, assignments, boundary_assignments, shapes_of
from ..proof.prove import refusing
from ..torchside.timeout import checkpoint
from ..util import describe_exception, plural



class FuzzFailure(AssertionError):
    pass


def run(ctx: Context) -> dict[str, Any]:
    n = ctx.options.examples
    if n <= 0:
        raise StageSkip("no examples requested (examples=0)")
    audit = ctx.require_audit()
    if not audit.model.vars:
        raise StageSkip("no dynamic dims kept: no sizes to draw (compare checked the example)")
    import hypothesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import DidNotReproduce, Unsatisfiable

    model = audit.model
    builder = ctx.options.input_builder
    state: dict[str, Any] = {"runs": 0, "failure": None, "drawn": [], "modes": {"fake": 0, "numeric": 0},
                             "unchecked": 0, "failed": [], "left_to_guards": 0}
    budget = Budget(ctx)

    def one(values: dict[str, int]) -> None:
        checkpoint()  # the case's limits, where fuzz searches on a thread of its own (#32)
        if budget.stop_now() and values not in state["failed"]:
            # the budget is spent: the remaining draws (and shrinking steps) are skipped, not run; a failing
            # assignment still replays, as Hypothesis replays its smallest failure at the end
            hypothesis.reject()
        seed = value_seed(values)
        named = model.named(values)
        if refusing(ctx.refused_by_proof, values) is not None:
            # `guards` proved the program refuses these sizes and fails on it every run: one verdict for one fact,
            # whatever the draw (issue #51)
            state["left_to_guards"] += 1
            state["drawn"].append({**named, "mode": "left to guards"})
            return
        probe = sized(ctx, model, values, seed=seed)
        try:
            plan = plan_for(ctx, probe)
            if plan.mode == "numeric":
                probe.real()
        except BuilderError as exc:
            raise StageFailure(f"input_builder: {exc}", kind="input-builder")
        except Exception as exc:  # noqa: BLE001 - a user builder that raises is named as such
            if builder is None:
                raise
            raise StageFailure(f"input_builder raised for sizes {named}: {describe_exception(exc)}",
                               kind="input-builder", exception=type(exc).__name__)
        state["runs"] += 1
        state["drawn"].append({**named, "mode": plan.mode} if plan.mode else {**named, "mode": None})
        if plan.mode is None:
            return _unchecked(state, named, plan.why)
        state["modes"][plan.mode] += 1
        got = run_program(ctx, ctx.ep, probe)
        if got.status == UNCHECKED:
            return _unchecked(state, named, got.message)
        problem = in_range_problem(ctx, got, probe, wrong="the exported program disagrees with eager",
                                   small=outside_promise(model, values))
        if problem:
            fake = got.mode == "fake"
            shapes = shapes_of(*(probe.fake() if fake else probe.real()), ctx.declaration.paths)
            state["failed"].append(dict(values))
            state["failure"] = {"sizes": named, "symbols": dict(values), "shapes": shapes, "seed": seed,
                                "error": str(problem), "program": got.status, "mode": got.mode, "kind": problem.kind}
            raise FuzzFailure(problem)

    # Boundaries first, run here and not as @example: Hypothesis does not shrink a failing explicit example,
    # and the search below finds and shrinks the same failure to its threshold.
    boundary_failure: tuple[dict[str, Any], FuzzFailure] | None = None

    def boundaries() -> None:
        nonlocal boundary_failure
        for values in boundary_assignments(model):
            try:
                one(values)
            except FuzzFailure as exc:
                boundary_failure = (state["failure"], exc)
                break

    if not ctx.options.reproduce:
        boundaries()

    def search(reproduce: str | None) -> None:
        test = given(values=assignments(model))(one)
        test = settings(
            # every example asked for (a failing boundary gets them all: the search must find it again to shrink
            # it); the budget stops the search when it is spent, and says so (issue #23)
            max_examples=max(1, n - (0 if boundary_failure else state["runs"])),
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
            # the draws are a function of the commit (issue #51): no example database (one run's finds would
            # change the next run's verdict), and the seed is the case's, not the profile's derandomization
            database=None,
            derandomize=False,
        )(test)
        test = hypothesis.seed(search_seed(ctx))(test)
        if reproduce:
            test = hypothesis.reproduce_failure(hypothesis.__version__, parse_blob(reproduce))(test)
        test()

    def searched() -> None:
        if not ctx.options.reproduce:
            return search(None)
        try:
            return search(ctx.options.reproduce)
        except DidNotReproduce as exc:
            # the model was fixed, or Hypothesis changed: the failure the blob replays no longer happens (#51).
            # The stage then runs as it does without the blob: boundaries first, then the seeded search
            ctx.result.warnings.append(
                f'fuzz: reproduce="{ctx.options.reproduce}" no longer reproduces a failure ({_one_line(exc)}): '
                "remove reproduce= from the exportable marker")
        state.update(runs=0, drawn=[], failed=[], left_to_guards=0, unchecked=0, modes={"fake": 0, "numeric": 0})
        budget.armed = False
        boundaries()
        budget.armed = True
        search(None)

    budget.armed = True
    try:
        if boundary_failure or ctx.options.reproduce or (state["runs"] < n and not budget.spent()):
            _run_outside_hypothesis(searched, ctx.result.warnings.append)
        elif state["runs"] < n:
            budget.stopped = True
    except FuzzFailure as exc:
        raise _report(ctx, state, exc)
    except Unsatisfiable:
        if not budget.stopped:
            raise  # not ours: every draw was rejected for another reason
    if boundary_failure is not None:
        # the search found nothing smaller: report the boundary itself (it fails on every run)
        state["failure"] = boundary_failure[0]
        raise _report(ctx, state, boundary_failure[1], boundary=True)
    data: dict[str, Any] = {"examples": state["runs"], "examples_requested": n, "drawn": state["drawn"],
                            "modes": state["modes"], "unchecked": state["unchecked"]}
    if state.get("unchecked_why"):
        data["unchecked_why"] = state["unchecked_why"]
    if ctx.eager_rejects:
        data["eager_rejects"] = list(ctx.eager_rejects)
    runs = plural(state["runs"], "example") + (
        f" ({state['modes']['numeric']} numeric, {state['modes']['fake']} fake)" if state["modes"]["fake"] else "")
    if budget.stopped:
        data["budget_spent"] = True
        data["fewer_because"] = (f"the budget of {budget.seconds:.3g} s for probing was spent; "
                                 "--export-budget / budget= raises it")
    elif state["runs"] < n:
        space = _space(model)
        data["fewer_because"] = (f"only {space} distinct size assignments exist" if space < n else
                                 "Hypothesis ended the search early (it found no new sizes to try)")
    if state["runs"] < n:
        runs = f"{state['runs']} of {n} examples ({data['fewer_because']})"
    if state["left_to_guards"]:
        runs += (f", {state['left_to_guards']} of them left to guards (sizes it proved the program refuses, and fails "
                 "on)")
        data["left_to_guards"] = state["left_to_guards"]
    if state["unchecked"]:
        runs += (f", {state['unchecked']} of them not checked (neither fake nor numeric could run them; the first, "
                 f"{state['unchecked_why']})")
    if not state["modes"]["numeric"] and not state["modes"]["fake"]:
        runs = f"nothing checked: {runs}"  # a stage that checked nothing does not read like one that did (#31)
    data["message"] = f"{runs}, sizes {_ranges(model)}"
    return data


def _unchecked(state: dict[str, Any], named: dict[str, int], why: str) -> None:
    """An example neither fake nor numeric could run: counted, and the first one's reason kept (issue #32)."""
    state["unchecked"] += 1
    if not state.get("unchecked_why"):
        at = ", ".join(f"{k}={v}" for k, v in named.items())
        state["unchecked_why"] = f"{at}: {why.removeprefix('not checked: ')}"


class Budget:
    """What is left of the case's budget (``--export-budget`` / ``budget=``: the time spent probing, on the
    case's one clock, ``cost.Costs``) for fuzz's random examples.

    It cuts only random examples and shrinking steps: boundaries run before it is ``armed``. A failing boundary
    searched for again and cut by the budget is reported as it is. ``stopped``: it cut some."""

    def __init__(self, ctx: Context):
        self.costs = ctx.calibration.costs()
        self.seconds = self.costs.budget
        self.armed = False
        self.stopped = False

    def stop_now(self) -> bool:
        """Whether the next random example is cut (and the budget then counts as having stopped the search)."""
        if self.armed and self.spent():
            self.stopped = True
        return self.stopped and self.armed

    def spent(self) -> bool:
        return self.costs.spent()


def _space(model: Any) -> int:
    """How many distinct size assignments the ranges hold (capped: only compared with an examples count)."""
    total = 1
    for v in model.vars:
        total *= v.hi - v.lo + 1
        if total > 10**9:
            break
    return total


def search_seed(ctx: Context) -> int:
    """The seed of the case's search: ``seed=`` where given, else a function of the case's node id (mixed with
    ``--hypothesis-seed`` where given): the same on every run of the same tree, whatever the run mode."""
    if ctx.options.seed is not None:
        return ctx.options.seed
    from hypothesis import core

    forced = core.global_force_seed  # --hypothesis-seed: another seed for every case
    key = f"pytest-export:{ctx.nodeid}" + ("" if forced is None else f":{forced}")
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def value_seed(values: dict[str, int]) -> int:
    """The seed of the tensor values for one size assignment: a function of the sizes alone, so Hypothesis
    searches and shrinks sizes only and a failure replays with the same values."""
    digest = hashlib.sha256(repr(sorted(values.items())).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _run_outside_hypothesis(test: Any, warn: Any = None) -> None:
    """Build and run the search; from inside a running Hypothesis test (an in-process pytester run, or
    ``export_check`` called from a ``@given`` test), do it on a thread of its own, where Hypothesis'
    thread-local test context is empty, so that the fuzz engine is its own search, not a nested ``@given``.
    The thread runs under the case's time limits and is stopped when the case ends (``timeout.in_thread``);
    ``warn(text)`` hears of one that did not stop in time."""
    from hypothesis.control import currently_in_test_context

    if not currently_in_test_context():
        test()
        return
    from ..torchside.timeout import in_thread

    in_thread(test, name="pytest-export-fuzz", left=warn)


def _ranges(model: Any) -> str:
    return ", ".join(f"{'/'.join(v.names)} in [{v.lo}, {v.hi}]" for v in model.vars) or "static"


def _report(ctx: Context, state: dict[str, Any], exc: BaseException, boundary: bool = False) -> StageFailure:
    found = state["failure"] or {"error": str(exc)}
    notes = "\n".join(getattr(exc, "__notes__", []) or [])
    m = BLOB.search(notes)
    blob = m.group(1) if m else None
    found = dict(found)
    found["reproduce"] = blob
    sizes = ", ".join(f"{k}={v}" for k, v in found.get("sizes", {}).items()) or "the example sizes"
    shapes = ", ".join(f"{k}: {tuple(v) if isinstance(v, list) else v}" for k, v in found.get("shapes", {}).items())
    if boundary:
        replay = "replay: these are boundary sizes, which run first on every run"
    elif blob:
        replay = (f'replay: every run finds it again (the search is seeded by the case); reproduce="{blob}" in the '
                  "exportable marker replays it first")
    else:
        replay = "replay: rerun; the search is seeded by the case, so every run draws the same sizes"
    msg = (f"fuzzing failed after {plural(state['runs'], 'example')}; smallest failing sizes: {sizes}\n"
           f"input shapes: {shapes}\n{found.get('error', '')}\n{replay}")
    refused = found.get("program") not in (None, "accepted")
    kind = found.pop("kind", None) or (REFUSED_IN_RANGE if refused else WRONG_IN_RANGE)
    if kind == REFUSED_IN_RANGE and found.get("symbols"):
        # one case, one story: the audit table shows the axes whose in-range sizes the program refused, each
        # blamed only where its own change is refused (issue #24)
        mark_refusal(ctx, ctx.audit().model, found["symbols"])
    return StageFailure(msg, kind=kind, examples=state["runs"], counterexample=found)


STAGE = Stage("fuzz", run, needs=("eager", "export", "compare"))
