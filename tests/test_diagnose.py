"""Diagnosis of export failures: draft_export findings, and a corrected dynamic_shapes that exports when pasted back."""

from __future__ import annotations

import time

import pytest
import torch
from torch.export import Dim

from pytest_export import diagnose
from pytest_export.diagnose import limit_for, to_python
from pytest_export.timeout import supported
from tests.helpers import cases_by_name, run_check, statuses, write_cases

CASES = '''
class Narrowing(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] > 4:
            return x[:4] + y[:4]
        return x + y

b = Dim("b", max=64)

@pytest.mark.exportable(dynamic_shapes={"x": {0: b}, "y": {0: b}})
def test_narrowing():
    return Narrowing(), (torch.randn(6, 3), torch.randn(6, 3))

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

@pytest.mark.exportable
def test_data_dependent():
    return DataDependent(), (torch.ones(3),)
'''


class Narrowing(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] > 4:
            return x[:4] + y[:4]
        return x + y


def test_constraint_violation_prints_a_spec_that_exports_when_pasted_back(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-p", "no:xdist")
    assert result.ret == 1
    case = cases_by_name(data)["test_narrowing"]
    export = case["stages"]["export"]
    assert export["status"] == "failed" and export["exception"] == "UserError"
    diag = export["diagnosis"]
    assert "GUARD_ADDED" in diag["failure_types"]
    assert any("> 4" in g and "L['x'].size()[0]" in g for g in diag["guards"]), diag["guards"]
    wheres = [f["where"] for f in diag["failures"]]
    assert "if x.shape[0] > 4:" in wheres and not any("draft_export" in w or "diagnose" in w for w in wheres)
    # torch's structured-trace records stay out of pytest's captured log
    assert "torch.__trace" not in result.stdout.str()
    fix = diag["dynamic_shapes_fix"]
    result.stdout.fnmatch_lines(["*diagnosis (torch.export.draft_export):*", "*failure types: GUARD_ADDED*",
                                 "*corrected dynamic_shapes (refine_dynamic_shapes_from_suggested_fixes); paste back:*",
                                 "*b = Dim('b', min=5, max=64)*", "*dynamic_shapes = {'x': {0: b}, 'y': {0: b}}*"])
    # paste it back: it must export, with the narrowed range
    namespace: dict = {}
    exec(fix, namespace)
    ep = torch.export.export(Narrowing(), (torch.randn(6, 3), torch.randn(6, 3)),
                             dynamic_shapes=namespace["dynamic_shapes"])
    ranges = [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()]
    assert ranges == [(5, 64)]

    dd = cases_by_name(data)["test_data_dependent"]["stages"]["export"]["diagnosis"]
    assert dd["failure_types"] == ["DATA_DEPENDENT_ERROR"]
    assert "dynamic_shapes_fix" not in dd
    assert any("x.sum() > 0" in f["where"] for f in dd["failures"])


def test_no_diagnose_option(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-p", "no:xdist", "--export-no-diagnose")
    assert result.ret == 1
    for case in data["cases"]:
        assert "diagnosis" not in case["stages"]["export"]
    assert "draft_export" not in result.stdout.str().split("short test summary")[0].replace(
        "you can replace your `export()` call with `draft_export()`", "")


def test_to_python_prints_roots_derived_dims_and_hints():
    d = Dim("d", min=2, max=32)
    spec = ({0: 2 * d + 1, 1: Dim.AUTO}, [None, {0: d, 1: Dim.STATIC}], {"k": Dim("k", max=8)})
    text = to_python(spec)
    ns: dict = {}
    exec(text, ns)
    assert "d = Dim('d', min=2, max=32)" in text and "2*d + 1" in text and "Dim.AUTO" in text
    got = ns["dynamic_shapes"]
    assert (got[0][0].root.min, got[0][0].root.max, got[1][1][0].__name__) == (2, 32, "d")
    assert got[2]["k"].max == 8 and got[1][0] is None


def test_a_failed_export_prints_its_partial_graph_once(pytester):
    """torch prints the partial graph of a failed export to stderr from two nested frames: the report keeps it once
    (``torch_output``), and the user's terminal gets none of it (#26)."""
    write_cases(pytester, '''
class DataBranch(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x

@pytest.mark.exportable
def test_branch():
    return DataBranch(), (torch.ones(3),)
''')
    result, data = run_check(pytester)
    result.assert_outcomes(failed=1)
    assert result.stdout.str().count("def forward(self, arg0_1") == 0
    assert "\n".join(data["cases"][0]["torch_output"]).count("def forward(self, arg0_1") == 1
    assert data["cases"][0]["stages"]["export"]["diagnosis"]  # the diagnosis is kept


# export raises at the data-dependent branch at once; draft_export takes the branch with the real value and then
# hangs (for a minute at most, so a limit that fails to fire fails the test instead of hanging it). Eager forward
# is not exporting and does not wait.
SLOW_DRAFT = '''
import time

class SlowDraft(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            deadline = time.monotonic() + 60
            while torch.compiler.is_exporting() and time.monotonic() < deadline:
                time.sleep(0.05)
            return x + 1
        return x - 1

@pytest.mark.exportable
def test_slow_draft():
    return SlowDraft(), (torch.ones(3),)
'''

needs_alarm = pytest.mark.skipif(not supported(), reason="time limits need SIGALRM and the main thread")


def test_the_diagnosis_limit_is_twice_the_export_time_and_at_least_the_floor():
    assert limit_for(0.1) == diagnose.LIMIT_FLOOR_S == 30.0
    assert limit_for(70.0) == 140.0


@needs_alarm
def test_a_diagnosis_past_its_own_limit_is_cut_and_the_export_stays_failed(pytester, monkeypatch):
    monkeypatch.setattr(diagnose, "LIMIT_FLOOR_S", 1.0)  # the floor is 30 s: too long to wait for here
    write_cases(pytester, SLOW_DRAFT)
    t0 = time.monotonic()
    result, data = run_check(pytester)
    assert time.monotonic() - t0 < 40  # the diagnosis would hang for a minute without its limit
    result.assert_outcomes(failed=1)
    case = cases_by_name(data)["test_slow_draft"]
    export = case["stages"]["export"]
    assert export["status"] == "failed" and export["exception"] == "GuardOnDataDependentSymNode", export
    assert export["signature"] == "GuardOnDataDependentSymNode"  # the baseline sees the same failure, cut or not
    diag = export["diagnosis"]
    assert diag["cut"] is True and diag["cut_by"] == "limit", diag
    # max(floor, 2 x export's own time): the export stage's duration is that time, without the diagnosis
    assert diag["limit_s"] == pytest.approx(max(1.0, 2 * export["duration"]), abs=0.5)
    assert diag["limit_s"] - 0.2 <= export["diagnosis_s"] < diag["limit_s"] + 10, export
    assert "failure_types" not in diag  # draft_export never returned
    assert "timeout" not in export  # the case's own time was not up
    assert "diagnosis cut after" in export["message"] and "(draft_export did not finish): its own limit of" \
        in export["message"]
    assert "Could not guard on data-dependent expression" in export["message"]  # torch's own error stands
    # the later stages ran (or were skipped because export failed), not as timed out
    assert not any("timed out" in s["message"] for s in case["stages"].values())
    result.stdout.fnmatch_lines(["*diagnosis cut after * s (draft_export did not finish): its own limit of *"])


@needs_alarm
def test_a_case_timeout_during_the_diagnosis_keeps_the_failed_export(pytester):
    # the diagnosis' own limit is 30 s; the case's --export-timeout ends first and stays in charge
    write_cases(pytester, SLOW_DRAFT)
    t0 = time.monotonic()
    result, data = run_check(pytester, "--export-timeout", "6")
    assert time.monotonic() - t0 < 30
    result.assert_outcomes(failed=1)  # failed, not error: torch had reached its verdict
    case = cases_by_name(data)["test_slow_draft"]
    st = statuses(case)
    export = case["stages"]["export"]
    assert st["export"] == "failed" and export["exception"] == "GuardOnDataDependentSymNode", export
    assert export["timeout"] == 6
    diag = export["diagnosis"]
    assert diag["cut"] is True and diag["cut_by"] == "case timeout" and diag["limit_s"] == 30.0, diag
    assert 6 - export["duration"] - 2 <= export["diagnosis_s"] <= 8, export
    assert "the case's time limit (--export-timeout / timeout=) ran out" in export["message"]
    later = [name for name in case["stages"] if name not in ("eager", "export")]
    assert later, st
    for name in later:
        assert case["stages"][name] == {"status": "skipped", "message": "skipped: the case timed out",
                                        "duration": 0.0}, name
    assert any("stopped after 6 s in stage export, while diagnosing its failure" in w for w in case["warnings"]), \
        case["warnings"]


@needs_alarm
def test_a_cut_diagnosis_keeps_the_corrected_dynamic_shapes(monkeypatch):
    import torch._functorch.config as functorch_config

    import pytest_export

    class NarrowingSlowDraft(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 4:
                x = x[:4]
            # a flag only draft_export sets (private; torch 2.13): export raises its constraint violation at once,
            # draft_export hangs (for a minute at most)
            deadline = time.monotonic() + 60
            while functorch_config.fake_tensor_propagate_real_tensors and time.monotonic() < deadline:
                time.sleep(0.05)
            return x + 1

    monkeypatch.setattr(diagnose, "LIMIT_FLOOR_S", 1.0)
    t0 = time.monotonic()
    result = pytest_export.check(NarrowingSlowDraft(), (torch.randn(6, 3),), name="t.py::test_narrowing_slow",
                                 dynamic_shapes={"x": {0: Dim("b", max=64)}})
    assert time.monotonic() - t0 < 40
    export = result.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    diag = export.data["diagnosis"]
    assert diag["cut"] is True and diag["cut_by"] == "limit", diag
    assert "b = Dim('b', min=5, max=64)" in diag["dynamic_shapes_fix"]  # built before draft_export was cut
    assert "diagnosis cut after" in export.message and "b = Dim('b', min=5, max=64)" in export.message
    # the cut unwound draft_export's configuration: later cases in this process export as before
    assert not functorch_config.fake_tensor_propagate_real_tensors
    assert not functorch_config.generate_fake_kernels_from_real_mismatches
