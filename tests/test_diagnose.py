"""Diagnosis of export failures: a constraint violation's fix built from torch's message and checked (without
draft_export), draft_export's findings for the rest, and a corrected dynamic_shapes that exports when pasted back."""

from __future__ import annotations

import time

import pytest
import torch
from torch.export import Dim

from pytest_export.explain import diagnose
from pytest_export.explain.diagnose import limit_for, to_python
from pytest_export.torchside.timeout import supported
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
    # torch's message carries the fix: built from it and checked, draft_export not run (#31)
    assert export["diagnosis_skipped"] == diagnose.FIX_FROM_MESSAGE
    assert export["fix_checked"] is True
    diag = export["diagnosis"]
    assert "failure_types" not in diag and "failures" not in diag
    fix = export["dynamic_shapes_fix"]
    assert diag["dynamic_shapes_fix"] == fix
    result.stdout.fnmatch_lines([
        "*diagnosis (torch's error carries the fix: built and checked without draft_export):*",
        "*corrected dynamic_shapes (refine_dynamic_shapes_from_suggested_fixes); paste back:*",
        "*b = Dim('b', min=5, max=64)*", "*dynamic_shapes = {'x': {0: b}, 'y': {0: b}}*",
        "*(checked: it exports again and its program takes the bounds of its ranges; guards: proved over all 60 "
        "declared sizes*"])
    # paste it back: it must export, with the narrowed range
    namespace: dict = {}
    exec(fix, namespace)
    ep = torch.export.export(Narrowing(), (torch.randn(6, 3), torch.randn(6, 3)),
                             dynamic_shapes=namespace["dynamic_shapes"])
    ranges = [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()]
    assert ranges == [(5, 64)]

    dd_export = cases_by_name(data)["test_data_dependent"]["stages"]["export"]
    dd = dd_export["diagnosis"]
    assert dd["failure_types"] == ["DATA_DEPENDENT_ERROR"]
    assert "dynamic_shapes_fix" not in dd and "draft_export_skipped" not in dd
    assert not {"dynamic_shapes_fix", "fix_checked", "diagnosis_skipped"} & set(dd_export)
    wheres = [f["where"] for f in dd["failures"]]
    assert any("x.sum() > 0" in w for w in wheres) and not any("draft_export" in w or "diagnose" in w for w in wheres)
    # torch's structured-trace records stay out of pytest's captured log
    assert "torch.__trace" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*diagnosis (torch.export.draft_export):*", "*failure types: DATA_DEPENDENT_ERROR*"])


@pytest.fixture
def draft_calls(monkeypatch):
    """Every call of ``torch.export.draft_export``, which still runs (the real one)."""
    real = torch.export.draft_export
    calls: list = []

    def counted(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(torch.export, "draft_export", counted)
    return calls


@pytest.fixture
def no_draft(monkeypatch):
    """``torch.export.draft_export`` counted and refused: a test that must not need it says so by its count."""
    calls: list = []

    def refused(*a, **k):
        calls.append(a[0])
        raise AssertionError("draft_export must not run for this failure")

    monkeypatch.setattr(torch.export, "draft_export", refused)
    return calls


class Narrowing1(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x[:4] * 2
        return x * 2


def test_a_constraint_violation_gets_its_fix_from_torchs_message_checked_without_draft_export(no_draft):
    import pytest_export

    res = pytest_export.check(Narrowing1(), (torch.randn(6, 3),), name="t.py::test_narrowing1",
                              dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}})
    export = res.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    assert no_draft == []
    assert export.data["fix_checked"] is True
    assert export.data["diagnosis_skipped"] == "torch's error carries the fix: built and checked without draft_export"
    fix = export.data["dynamic_shapes_fix"]
    assert fix == "from torch.export import Dim\nb = Dim('b', min=5, max=64)\ndynamic_shapes = {'x': {0: b}}"
    assert "draft_export_error" not in export.data["diagnosis"]
    # the failure text shows it, ready to paste, and says it was checked
    assert "corrected dynamic_shapes (refine_dynamic_shapes_from_suggested_fixes); paste back:\n" \
           "    from torch.export import Dim\n    b = Dim('b', min=5, max=64)\n" in export.message
    assert "(checked: it exports again" in export.message
    ns: dict = {}
    exec(fix, ns)
    ep = torch.export.export(Narrowing1(), (torch.randn(6, 3),), dynamic_shapes=ns["dynamic_shapes"])
    assert [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()] == [(5, 64)]


class CapAt2048(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[1] <= 2048)
        return x * 2


def test_a_fix_keeps_every_bound_the_user_wrote_and_says_so(no_draft):
    """torch suggests ``Dim('seq', max=2048)`` for a declared ``Dim('seq', min=2, max=4096)``: pasted, it widens the
    promise below 2 without a word (issue #54). The fix keeps min=2 and says so; raw torch accepts it."""
    import pytest_export

    res = pytest_export.check(CapAt2048(), (torch.randn(2, 16),), name="t.py::test_cap",
                              dynamic_shapes={"x": {1: Dim("seq", min=2, max=4096)}})
    export = res.stages["export"]
    assert export.status == "failed" and "seq = Dim('seq', max=2048)" in export.message  # torch's own suggestion
    assert export.data["dynamic_shapes_fix"] == (
        "from torch.export import Dim\nseq = Dim('seq', min=2, max=2048)\ndynamic_shapes = {'x': {1: seq}}")
    assert "(it keeps the bounds you wrote that torch's suggestion dropped: seq: min=2)" in export.message
    ns: dict = {}
    exec(export.data["dynamic_shapes_fix"], ns)
    ep = torch.export.export(CapAt2048(), (torch.randn(2, 16),), dynamic_shapes=ns["dynamic_shapes"])
    assert [(int(r.lower), int(r.upper)) for r in ep.range_constraints.values()] == [(2, 2048)]


class ByFour(torch.nn.Module):
    """Height in blocks of 4: torch's fix is a derived dim (``h = 4*_h``), which a hand parser of its message fails
    on ("Cannot convert symbols to int")."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        n, _, h, w = x.shape
        return self.conv(x).reshape(n, 4, h // 4, 4, w).sum(3)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
def test_a_derived_fix_is_built_by_torchs_refiner_and_checked(no_draft, strict):
    import pytest_export

    torch.manual_seed(0)
    res = pytest_export.check(ByFour(), (torch.randn(1, 3, 8, 8),), name="t.py::test_by_four", strict=strict,
                              dynamic_shapes={"x": {2: Dim("h", min=4, max=64)}})
    export = res.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    assert no_draft == []
    # torch's fix declares _h from 1; where its program refuses h=4 (_h=1), it is not offered as checked (issue #41)
    diag = export.data["diagnosis"]
    torch_fix = diag.get("dynamic_shapes_fix_torch") or diag["dynamic_shapes_fix"]
    assert "_h = Dim('_h', min=1, max=16)" in torch_fix and "4*_h" in export.message
    ns: dict = {}
    exec(torch_fix, ns)
    ep = torch.export.export(ByFour(), (torch.randn(1, 3, 12, 8),), dynamic_shapes=ns["dynamic_shapes"], strict=strict)
    try:
        ep.module()(torch.randn(1, 3, 4, 8))
        refuses_4 = False
    except Exception:  # noqa: BLE001 - the program's guard
        refuses_4 = True
    # what the harness says agrees with raw torch: checked exactly where every size the fix keeps is taken
    assert export.data["fix_checked"] is (not refuses_4), diag
    if refuses_4:
        problem = diag["dynamic_shapes_fix_problem"]
        assert problem.startswith("pasted back, torch's suggested fix exports, but its program refuses sizes inside "
                                  "its own ranges: refused where"), problem
        assert "export keeps _h in [2, 16] where the fix declares [1, 16]: write Dim('_h', min=2, max=16)" in problem
    else:
        for h in range(4, 65, 4):
            ep.module()(torch.randn(1, 3, h, 8))
    _h = Dim("_h", min=2, max=16)  # what the line says to write: every size it keeps is taken
    ep = torch.export.export(ByFour(), (torch.randn(1, 3, 12, 8),), dynamic_shapes={"x": {2: 4 * _h}}, strict=strict)
    for h in range(8, 65, 4):
        ep.module()(torch.randn(1, 3, h, 8))


def test_an_unconfirmed_fix_says_why_and_shows_torchs_suggestion(no_draft):
    import pytest_export

    class OddOnly(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] % 2 == 1:
                return x * 2
            return x.sum(0, keepdim=True).expand_as(x)

    res = pytest_export.check(OddOnly(), (torch.randn(5, 3),), name="t.py::test_odd",
                              dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
    export = res.stages["export"]
    assert no_draft == []
    assert export.data["fix_checked"] is False and "dynamic_shapes_fix" not in export.data
    assert export.data["diagnosis_skipped"] == diagnose.FIX_FROM_MESSAGE
    # torch suggests b = 2*_b - 1 with _b's min at 0: exported again, it fails; one line says so
    lines = export.message.splitlines()
    why = [ln for ln in lines if "not confirmed" in ln]
    assert len(why) == 1 and "export raises AssertionError: Expected derived min value" in why[0], why
    assert "_b = Dim('_b', max=8)" in export.message and "2*_b - 1" in export.message
    assert "paste back:" not in export.message


def test_a_constraint_violation_whose_fix_cannot_be_built_falls_back_to_draft_export(draft_calls, monkeypatch):
    import torch.export.dynamic_shapes as dynamic_shapes_mod

    import pytest_export

    def broken(msg, spec):
        raise ValueError("Cannot convert symbols to int")

    monkeypatch.setattr(dynamic_shapes_mod, "refine_dynamic_shapes_from_suggested_fixes", broken)
    res = pytest_export.check(Narrowing1(), (torch.randn(6, 3),), name="t.py::test_narrowing1",
                              dynamic_shapes={"x": {0: Dim("b", max=64)}})
    export = res.stages["export"]
    assert export.status == "failed" and len(draft_calls) == 1
    assert not {"dynamic_shapes_fix", "fix_checked", "diagnosis_skipped"} & set(export.data)
    diag = export.data["diagnosis"]
    assert diag["dynamic_shapes_fix_error"] == "ValueError: Cannot convert symbols to int"
    assert "GUARD_ADDED" in diag["failure_types"]
    assert any("> 4" in g and "L['x'].size()[0]" in g for g in diag["guards"]), diag["guards"]
    wheres = [f["where"] for f in diag["failures"]]
    assert "if x.shape[0] > 4:" in wheres and not any("draft_export" in w or "diagnose" in w for w in wheres)
    assert "diagnosis (torch.export.draft_export):" in export.message
    assert "(could not build the corrected dynamic_shapes: ValueError: Cannot convert symbols to int)" \
        in export.message


def test_a_data_dependent_failure_still_gets_draft_exports_diagnosis(draft_calls):
    import pytest_export

    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    res = pytest_export.check(DataDependent(), (torch.ones(3),), name="t.py::test_dd")
    export = res.stages["export"]
    assert export.status == "failed" and len(draft_calls) == 1
    diag = export.data["diagnosis"]
    assert diag["failure_types"] == ["DATA_DEPENDENT_ERROR"]
    assert not {"dynamic_shapes_fix", "fix_checked", "diagnosis_skipped"} & set(export.data)
    assert "diagnosis (torch.export.draft_export):" in export.message


def test_torchs_message_is_cut_before_its_trailing_paragraph():
    """Where only the exception's text is there (no ``.msg``), the paragraph torch appends after its suggested
    fixes is cut: the refiner would read its lines as fixes."""
    text = ("Constraints violated (b)! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
            "  - Not all values of b = L['x'].size()[0] in the specified range b <= 64 satisfy the generated guard "
            "5 <= L['x'].size()[0] and L['x'].size()[0] <= 64\n"
            "Suggested fixes:\n  b = Dim('b', min=5, max=64)\n\n"
            "The error above occurred when calling torch.export.export. If you would like to view some more "
            "information about this error, and get a list of all other errors that may occur in your export call, "
            "you can replace your `export()` call with `draft_export()`.")
    msg = diagnose.suggested_fixes_message(RuntimeError(text))
    assert msg.endswith("Suggested fixes:\n  b = Dim('b', min=5, max=64)")
    fixed = diagnose.refined_dynamic_shapes(RuntimeError(text), {"x": {0: Dim("b", max=64)}})
    assert (fixed["x"][0].min, fixed["x"][0].max) == (5, 64)
    assert diagnose.suggested_fixes_message(RuntimeError("Could not guard on data-dependent expression")) is None


def test_no_diagnose_option(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-p", "no:xdist", "--export-no-diagnose")
    assert result.ret == 1
    for case in data["cases"]:
        export = case["stages"]["export"]
        assert not {"diagnosis", "dynamic_shapes_fix", "fix_checked", "diagnosis_skipped"} & set(export), export
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


@pytest.mark.slow
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


class NarrowingSlowDraft(torch.nn.Module):
    def forward(self, x):
        import torch._functorch.config as functorch_config

        if x.shape[0] > 4:
            x = x[:4]
        # a flag only draft_export sets (private; torch 2.13): export raises its constraint violation at once,
        # draft_export hangs (for a minute at most)
        deadline = time.monotonic() + 60
        while functorch_config.fake_tensor_propagate_real_tensors and time.monotonic() < deadline:
            time.sleep(0.05)
        return x + 1


def test_a_fix_from_torchs_message_does_not_wait_for_draft_export():
    """Where draft_export would hang (as it ran for its whole limit on real-width models, #31), the fix torch's
    message carries is built and checked at once."""
    import pytest_export

    t0 = time.monotonic()
    result = pytest_export.check(NarrowingSlowDraft(), (torch.randn(6, 3),), name="t.py::test_narrowing_slow",
                                 dynamic_shapes={"x": {0: Dim("b", max=64)}})
    assert time.monotonic() - t0 < 30
    export = result.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    assert export.data["fix_checked"] is True and "cut" not in export.data["diagnosis"]
    assert "b = Dim('b', min=5, max=64)" in export.data["dynamic_shapes_fix"]
    assert export.data["diagnosis_s"] < 20


@needs_alarm
def test_a_cut_draft_export_unwinds_its_configuration(monkeypatch):
    import torch._functorch.config as functorch_config
    import torch.export.dynamic_shapes as dynamic_shapes_mod

    import pytest_export

    def broken(msg, spec):  # no fix from torch's message: draft_export runs, and hangs
        raise ValueError("Cannot convert symbols to int")

    monkeypatch.setattr(dynamic_shapes_mod, "refine_dynamic_shapes_from_suggested_fixes", broken)
    monkeypatch.setattr(diagnose, "LIMIT_FLOOR_S", 1.0)
    t0 = time.monotonic()
    result = pytest_export.check(NarrowingSlowDraft(), (torch.randn(6, 3),), name="t.py::test_narrowing_slow",
                                 dynamic_shapes={"x": {0: Dim("b", max=64)}})
    assert time.monotonic() - t0 < 40
    export = result.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    diag = export.data["diagnosis"]
    assert diag["cut"] is True and diag["cut_by"] == "limit", diag
    assert diag["dynamic_shapes_fix_error"].startswith("ValueError")
    assert "diagnosis cut after" in export.message and "(draft_export did not finish)" in export.message
    # the cut unwound draft_export's configuration: later cases in this process export as before
    assert not functorch_config.fake_tensor_propagate_real_tensors
    assert not functorch_config.generate_fake_kernels_from_real_mismatches


@needs_alarm
def test_a_cut_check_of_the_fix_keeps_torchs_suggestion_unconfirmed(no_draft, monkeypatch):
    import pytest_export

    checking: list = []

    class HangsWhenChecked(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 4:
                x = x[:4]
            deadline = time.monotonic() + 60  # for a minute at most
            while checking and torch.compiler.is_exporting() and time.monotonic() < deadline:
                time.sleep(0.05)
            return x + 1

    real = diagnose.checked_fix

    def check_hangs(*a, **k):
        checking.append(True)
        return real(*a, **k)

    monkeypatch.setattr(diagnose, "checked_fix", check_hangs)
    monkeypatch.setattr(diagnose, "LIMIT_FLOOR_S", 1.0)
    t0 = time.monotonic()
    result = pytest_export.check(HangsWhenChecked(), (torch.randn(6, 3),), name="t.py::test_hangs_when_checked",
                                 dynamic_shapes={"x": {0: Dim("b", max=64)}})
    assert time.monotonic() - t0 < 40
    export = result.stages["export"]
    assert export.status == "failed" and export.data["exception"] == "UserError", export
    assert no_draft == [] and checking
    diag = export.data["diagnosis"]
    assert diag["cut"] is True and diag["cut_by"] == "limit", diag
    assert export.data["fix_checked"] is False and "dynamic_shapes_fix" not in export.data
    assert "b = Dim('b', min=5, max=64)" in diag["dynamic_shapes_fix_torch"]  # built before the check was cut
    assert "(checking torch's suggested fix did not finish)" in export.message
    assert "not confirmed): its check (exporting again with it) was cut by the time limit" in export.message
    assert "b = Dim('b', min=5, max=64)" in export.message and "paste back:" not in export.message
