"""Verdicts a CI gate can trust (issue #18): every promise checked, the harness's limits never blamed on the model,
its own crashes never passing. Each test plants one defect (or one harness limit) and runs real pytest sessions.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import torch

import pytest_export
from tests.helpers import HANGS, cases_by_name, run_check, statuses, write_cases

SEED = ("--hypothesis-seed", "0", "--export-examples", "8")

# ---- 1. the declared range is the promise, sizes 0 and 1 included --------------------------------------------

SIZE_ONE = '''
class BranchOnOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:  # export assumes a dynamic size is not 1: the branch is resolved statically
            return x * 3
        return x * 2

class HiddenAtLeastTwo(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] >= 2:  # statically true while tracing: the program always takes row 1
            return x[1] + x.sum(0)
        return x[0] + x.sum(0)

class TrainNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(3)
    def forward(self, x):
        return self.bn(x)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}})
def test_branch_on_one():
    return BranchOnOne(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}})
def test_hidden_at_least_two():
    return HiddenAtLeastTwo(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", max=32)}})
def test_default_min_promises_one():
    return BranchOnOne(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}})
def test_eager_rejects_one():
    return TrainNorm().train(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("batch", max=16)}})
def test_fine_at_zero_and_one():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
'''


@pytest.mark.slow
def test_size_one_inside_the_promise(pytester):
    write_cases(pytester, SIZE_ONE)
    result, data = run_check(pytester, *SEED)
    cases = cases_by_name(data)
    # accepted at 1 but computed differently than eager: guards and fuzz fail
    wrong = cases["test_branch_on_one"]
    assert statuses(wrong)["guards"] == "failed" and statuses(wrong)["fuzz"] == "failed", wrong
    assert "accepted but wrong at in-range sizes batch=1" in wrong["stages"]["guards"]["message"]
    assert "smallest failing sizes: batch=1" in wrong["stages"]["fuzz"]["message"]
    # Dim's default min of 0 promises 1 too
    assert statuses(cases["test_default_min_promises_one"])["guards"] == "failed"
    # a hidden `>= 2` requirement: the program refuses 1; the audit table does not say `kept` beside it
    hidden = cases["test_hidden_at_least_two"]
    assert statuses(hidden)["guards"] == "failed"
    assert "the program raised on in-range sizes batch=1" in hidden["stages"]["guards"]["message"]
    assert hidden["stages"]["guards"]["signature"] == "refused-in-range"
    (row,) = hidden["shapes"]
    assert row["status"] == "refused-in-range" and row["refused_at"] == 1, row
    assert "refused-in-range (refuses 1)" in result.stdout.str()
    # eager itself raises at 1 (batch norm in training), a size the declaration promises: the promise fails
    # (issue #41: the size-1 exemption is for sizes outside the declaration only)
    rejects = cases["test_eager_rejects_one"]
    assert rejects["outcome"] == "failed", rejects
    assert rejects["stages"]["guards"]["signature"] == "eager-raised-in-range", rejects["stages"]["guards"]
    assert "eager raised on in-range sizes batch=1" in rejects["stages"]["guards"]["message"]
    # a model that works at 0 and 1: size 0 is probed in range and passes
    fine = cases["test_fine_at_zero_and_one"]
    assert fine["outcome"] == "passed", fine
    probes = [f for f in fine["stages"]["guards"].get("findings", [])]
    assert probes == []
    result.assert_outcomes(passed=1, failed=4)


def test_size_zero_findings_are_warnings():
    class EmptyIsSpecial(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 0:  # resolved statically at export: the program never takes this branch
                return torch.ones(x.shape[1])
            return x.sum(0)

    res = pytest_export.check(EmptyIsSpecial(), (torch.randn(4, 3),), name="zero.py::test_zero", examples=4,
                              dynamic_shapes={"x": {0: torch.export.Dim("b", max=8)}})
    assert res.outcome == "passed", res.failure_text()
    (zero,) = [f for f in res.stages["guards"].data["findings"] if f["kind"] == "zero"]
    assert zero["probe"] == "b=0" and zero["finding"].startswith("accepted but wrong at in-range sizes b=0")
    assert any(w.startswith("accepted but wrong at in-range sizes b=0") for w in res.warnings), res.warnings


# ---- 2. the harness's limits are never the model's fault ---------------------------------------------------------

LIMITS = '''
class Cache:
    def __init__(self, k):
        self.k = k

class ReturnsCache(torch.nn.Module):
    def forward(self, x):
        return x + 1, Cache(x * 2)

class Opaque:
    __slots__ = ("k",)
    def __init__(self, k):
        self.k = k

class ReturnsOpaque(torch.nn.Module):
    def forward(self, x):
        return x + 1, Opaque(x * 2)

class SparseBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("sp", torch.eye(3).to_sparse())
    def forward(self, x):
        return torch.sparse.mm(self.sp, x)

class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        return x * self.calls

@pytest.mark.exportable
def test_returns_cache():
    return ReturnsCache(), (torch.randn(3, 2),)

@pytest.mark.exportable
def test_returns_opaque():
    return ReturnsOpaque(), (torch.randn(3, 2),)

@pytest.mark.exportable
def test_sparse_buffer():
    return SparseBuffer(), (torch.randn(3, 2),)

@pytest.mark.exportable
def test_counter():
    return Counter(), (torch.randn(3, 2),)
'''


def test_harness_limits_are_not_blamed_on_the_model(pytester):
    write_cases(pytester, LIMITS)
    result, data = run_check(pytester)
    cases = cases_by_name(data)
    # a cache object that is no pytree node: compared by its attributes; export fails with torch's own message
    cache = cases["test_returns_cache"]
    assert statuses(cache)["eager"] == "passed", cache
    assert statuses(cache)["export"] == "failed"
    assert "Cache" in cache["stages"]["export"]["message"] and "pytree" in cache["stages"]["export"]["message"]
    # an object with nothing to compare: `error` with the fix, and export is still tried
    opaque = cases["test_returns_opaque"]
    assert statuses(opaque)["eager"] == "error", opaque
    assert opaque["stages"]["eager"]["message"].startswith(
        "cannot compare test_cases.Opaque at output[1]: register it as a pytree node "
        "(torch.utils._pytree.register_pytree_node / register_dataclass)")
    assert statuses(opaque)["export"] == "failed"
    # a sparse buffer: the state snapshot compares it (no "aten::bitwise_and ... SparseCPU" blamed on the model)
    sparse = cases["test_sparse_buffer"]
    assert statuses(sparse)["eager"] == "passed", sparse
    assert statuses(sparse)["compare"] == "passed", sparse
    assert "SparseCPU" not in str(sparse)
    # a forward that counts its calls: eager is deterministic to the harness, the frozen state is the finding
    counter = cases["test_counter"]
    assert statuses(counter)["eager"] == "passed", counter
    assert statuses(counter)["compare"] == "failed"
    assert counter["stages"]["compare"]["message"].startswith(
        "forward changes Python attribute `calls` (was 0, now 1); the exported program freezes it at its traced "
        "value, so it diverges from eager from the second call on")
    assert counter["stages"]["compare"]["signature"] == "python-state"


def test_harness_never_leaves_python_state_changed():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0
            self.seen: list[int] = []

        def forward(self, x):
            self.calls += 1
            self.seen.append(x.shape[0])
            self.flag = True
            return x * 2

    model = Counter()
    seen = model.seen
    result = pytest_export.check(model, (torch.randn(3, 2),), name="state.py::test_state", examples=2)
    assert result.stages["compare"].status == "failed"
    assert [c["path"] for c in result.stages["compare"].data["python_changes"]] == ["calls", "seen"]
    # what every call changes is undone; a value every call sets alike is settled, as after the user's own first call
    assert model.calls == 0 and model.seen == [] and model.seen is seen and model.flag is True


def test_a_lazy_initialization_is_kept_and_no_finding():
    # transformers' output capturing: the first forward registers hooks and sets a flag that says so. Undoing the
    # flag but not the hooks made the next call register them again (a false "nondeterministic").
    class LazyHooks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)

        def forward(self, x):
            if not getattr(self, "_hooks_installed", False):
                self.inner.register_forward_hook(lambda mod, args, out: out * 2)
                self._hooks_installed = True
            return self.inner(x)

    model = LazyHooks()
    result = pytest_export.check(model, (torch.randn(3, 2),), name="lazy.py::test_lazy",
                                 dynamic_shapes={"x": {0: torch.export.Dim("b", min=1, max=8)}}, examples=5)
    assert result.outcome == "passed", result
    assert result.stages["eager"].message == ""
    assert len(model.inner._forward_hooks) == 1 and model._hooks_installed is True


# ---- 3. the harness's own crashes never pass ----------------------------------------------------------------------

CRASH_CONFTEST = '''
import pytest

@pytest.fixture(autouse=True)
def _break_the_harness(monkeypatch, request):
    from pytest_export import context
    from pytest_export.stages import guards
    if "crash" in request.node.name:
        def boom(*a, **k):
            raise KeyError("harness bug")
        monkeypatch.setattr(guards, "in_range_probes", boom)
    if "audit" in request.node.name:
        def no_audit(*a, **k):
            raise ValueError("cannot map")
        monkeypatch.setattr(context, "audit", no_audit)
'''

CRASH_CASES = '''
@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}}, xfail={"guards": "known"})
def test_crash_is_not_xfailed():
    return torch.nn.ReLU(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}})
def test_audit_failure_is_an_error():
    return torch.nn.ReLU(), (torch.randn(4, 3),)
'''


def test_harness_crashes_are_errors_and_never_xfail(pytester):
    pytester.makeconftest(CRASH_CONFTEST)
    write_cases(pytester, CRASH_CASES)
    result, data = run_check(pytester, "--export-examples", "3")
    result.assert_outcomes(failed=2)
    cases = cases_by_name(data)
    crash = cases["test_crash_is_not_xfailed"]
    assert statuses(crash)["guards"] == "error", crash  # not xfailed, although xfail names the stage
    assert crash["outcome"] == "failed"
    assert "the harness crashed in this stage" in crash["stages"]["guards"]["message"]
    assert "KeyError" in crash["stages"]["guards"]["traceback"]
    audit = cases["test_audit_failure_is_an_error"]
    assert statuses(audit)["guards"] == "error" and statuses(audit)["fuzz"] == "error", audit
    assert "could not map dynamic_shapes" in audit["stages"]["guards"]["message"]
    assert statuses(audit)["export"] == "passed"


def test_stage_data_never_overwrites_status_or_message():
    from pytest_export.context import Context, Stage, StageFailure
    from pytest_export.declare.case import Case
    from pytest_export.declare.options import CaseOptions
    from pytest_export.runner import _run_stage

    def stage(ctx):
        raise StageFailure("exporting changed the eager module's state: buffer n", kind="state-changed",
                           message="dynamic axes: 1 kept", status="passed")

    ctx = Context(Case.build("x", torch.nn.ReLU(), (torch.ones(2),), None), CaseOptions(), "x", None)
    out = _run_stage(ctx, Stage("export", stage), [0.0])
    as_json = out.to_json()
    assert as_json["status"] == "failed"
    assert as_json["message"] == "exporting changed the eager module's state: buffer n"
    assert as_json["signature"] == "state-changed"


# ---- 4. the gate compares like with like ------------------------------------------------------------------------

TOLERANCE = '''
class TinyShift(torch.nn.Module):
    def forward(self, x):
        # the program adds 1e-7 to outputs that are 0 in eager: within any atol, outside any rtol
        return x * 0 + 1e-7 if torch.compiler.is_exporting() else x * 0

@pytest.mark.exportable(rtol=1e-3)
def test_rtol_only():
    return TinyShift(), (torch.ones(3),)

@pytest.mark.exportable(rtol=1e-3, atol=0)
def test_both_given():
    return TinyShift(), (torch.ones(3),)
'''


def test_one_tolerance_keeps_the_dtype_default_of_the_other(pytester):
    write_cases(pytester, TOLERANCE)
    result, data = run_check(pytester)
    cases = cases_by_name(data)
    assert statuses(cases["test_rtol_only"])["compare"] == "passed", cases["test_rtol_only"]
    assert statuses(cases["test_both_given"])["compare"] == "failed"
    result.assert_outcomes(passed=1, failed=1)


SKIP_COMPARE = '''
class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
def test_shortcut():
    return Shortcut(), (torch.ones(3),)
'''


def test_skipping_compare_skips_compare_only(pytester):
    write_cases(pytester, SKIP_COMPARE)
    result, data = run_check(pytester, "--export-skip-stages", "compare", "--export-examples", "3")
    case = cases_by_name(data)["test_shortcut"]
    st = statuses(case)
    assert st["compare"] == "skipped"
    # the stages that compare with eager still do, and still find the program wrong
    assert st["serde"] == "failed" and "disagrees with eager" in case["stages"]["serde"]["message"], case
    assert st["guards"] != "skipped" and st["fuzz"] != "skipped", st
    result.assert_outcomes(failed=1)


class _Dawdles(torch.nn.Module):
    def forward(self, x):
        time.sleep(0.4)  # every forward call: a limit checked between calls stops the case after a few
        return x + 1


def _on_a_thread(module, **keywords):
    out: list = []

    def run():
        out.append(pytest_export.check(module, (torch.ones(2),), name="t.py::test_thread", **keywords))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    (res,) = out
    return res


def test_a_timeout_off_the_main_thread_is_enforced_between_forward_calls():
    # off the main thread no alarm can stop the case (#32): its limit is checked before every forward call the
    # harness makes, the case is stopped there, and a warning says a single call that hangs is not stopped
    from pytest_export import runner

    runner._TIMEOUT_WARNED.clear()
    t0 = time.monotonic()
    res = _on_a_thread(_Dawdles(), timeout=1, examples=1)
    assert time.monotonic() - t0 < 4
    timed_out = [s for s in res.stages.values() if s.status == "error" and "timed out" in s.message]
    assert timed_out, res.failure_text()
    assert any("checked before each forward call here" in w for w in res.warnings), res.warnings


def test_a_timed_out_stage_reports_the_time_it_ran(pytester):
    write_cases(pytester, '''
''' + HANGS + '''

@pytest.mark.exportable
def test_hangs():
    return Hangs(), (torch.ones(2),)
''')
    result, data = run_check(pytester, "--export-timeout", "2")
    export = cases_by_name(data)["test_hangs"]["stages"]["export"]
    assert export["status"] == "error"
    assert 1.5 <= export["duration"] < 30, export
    assert "(ran " in export["message"]


def test_a_forward_whose_result_follows_its_call_count_names_the_attribute():
    ticks = itertools.count()  # state outside the module: no harness can put it back

    class Draws(torch.nn.Module):  # state that changes on every call, and a result that differs besides
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return x * self.calls + next(ticks)

    model = Draws()
    result = pytest_export.check(model, (torch.randn(3, 2),), name="draws.py::test_draws", examples=2)
    eager = result.stages["eager"]
    assert eager.status == "failed" and eager.data["signature"] == "nondeterministic", eager
    assert "forward changes Python attribute `calls` (was 0, now 1) on every call, and the second call saw the " \
           "first call's value" in eager.message
    assert model.calls == 0


def test_a_harness_error_while_probing_is_an_error_not_a_refusal(monkeypatch):
    # the harness cannot run the program at one probe's sizes: guards and fuzz could not decide (`error`); the
    # program refused nothing and is not blamed
    from pytest_export import context
    from pytest_export.results import HarnessError

    real = context.Context.program_on

    def program_on(self, ep, args, kwargs):
        if args[0].shape[0] != 4:
            raise HarnessError("cannot run this probe")
        return real(self, ep, args, kwargs)

    monkeypatch.setattr(context.Context, "program_on", program_on)
    result = pytest_export.check(torch.nn.ReLU(), (torch.randn(4, 3),), name="probe.py::test_probe",
                                 dynamic_shapes={"input": {0: torch.export.Dim("b", min=2, max=8)}}, examples=5)
    assert result.stages["compare"].status == "passed"
    assert result.stages["guards"].status == "error", result.stages["guards"]
    assert "cannot run this probe" in result.stages["guards"].message
    assert result.stages["fuzz"].status == "error", result.stages["fuzz"]


SMOKE_UNREADABLE = '''
@pytest.fixture(autouse=True)
def _unreadable(monkeypatch):
    from pytest_export.declare import shapes
    def boom(*a, **k):
        raise KeyError("harness bug")
    monkeypatch.setattr(shapes, "parse", boom)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", max=8)}})
def test_relu():
    return torch.nn.ReLU(), (torch.randn(4, 3),)
'''


def test_smoke_mode_says_when_it_could_not_read_the_declaration(pytester):
    write_cases(pytester, SMOKE_UNREADABLE)
    result = pytester.runpytest("-p", "no:cacheprovider")  # no --export-check
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*ExportWarning: test_cases.py::test_relu: dynamic_shapes not checked: the harness "
                                 "could not read the declaration (KeyError: *harness bug*)*"])
