"""`guards` and `fuzz` through real pytest runs: report fields, warnings, replay, the same draws in every run mode,
xdist."""

from __future__ import annotations

import pytest

from tests.helpers import cases_by_name, run_check, statuses, write_cases

CASES = '''
class BranchOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1


class EvenOnly(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] % 2:
            raise ValueError("odd batch")
        return x * 2


class Band(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] == 37:
            raise ValueError("one size the model does not support")
        return x * 2


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}})
def test_band():
    return Band(), (torch.randn(8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO}})
def test_narrowed():
    return BranchOnSize(), (torch.randn(8, 3),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}}REPLAY)
def test_even_only():
    return EvenOnly(), (torch.randn(8),)


class Gate(torch.nn.Module):
    def forward(self, x, y):
        return torch.sigmoid(x) * y


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}, "y": {0: Dim("b", min=2, max=16)}})
def test_clean():
    return Gate(), (torch.randn(4, 3), torch.randn(4, 3))
'''


def _write(pytester, replay: str = "") -> None:
    write_cases(pytester, CASES.replace("REPLAY", replay))


def test_report_carries_the_audit_the_fuzz_counterexample_and_the_warnings(pytester):
    _write(pytester)
    result, data = run_check(pytester, "--export-examples", "8", "-k", "not band", "--hypothesis-seed", "0")
    result.assert_outcomes(passed=2, failed=1)
    cases = cases_by_name(data)

    narrowed = cases["test_narrowed"]
    assert narrowed["outcome"] == "passed"
    (row,) = narrowed["shapes"]
    assert row["input"] == "x" and row["axis"] == 0 and row["declared"] == "Dim.AUTO"
    assert row["status"] == "narrowed" and row["achieved_range"] == [5, None]
    assert any("export kept only [5, inf]" in w for w in narrowed["warnings"])

    even = cases["test_even_only"]
    assert statuses(even)["fuzz"] == "failed" and statuses(even)["guards"] == "failed"
    found = even["stages"]["fuzz"]["counterexample"]
    assert found["sizes"] == {"b": 3} and found["shapes"] == {"x": [3]}
    assert found["reproduce"] and "eager raised on in-range sizes" in found["error"]
    assert even["stages"]["fuzz"]["examples"] >= 1

    clean = cases["test_clean"]
    assert clean["stages"]["fuzz"]["examples"] == 8
    assert [r["status"] for r in clean["shapes"]] == ["kept", "kept"]

    out = result.stdout.str()
    assert "ExportWarning: test_cases.py::test_narrowed: x.shape[0] was declared Dim.AUTO" in out
    assert "declared vs achieved dynamic shapes:" in out
    assert "smallest failing sizes: b=3" in out


def test_export_warnings_can_be_made_errors(pytester):
    _write(pytester)
    result, data = run_check(pytester, "--export-examples", "4", "-k", "narrowed",
                             "-W", "error::pytest_export.ExportWarning")
    result.assert_outcomes(failed=1)
    assert "ExportWarning" in result.stdout.str()


def test_reproduce_blob_from_the_report_replays_the_failure(pytester):
    _write(pytester)
    _, data = run_check(pytester, "--export-examples", "8", "-k", "even", "--hypothesis-seed", "0")
    blob = cases_by_name(data)["test_even_only"]["stages"]["fuzz"]["counterexample"]["reproduce"]
    assert blob
    _write(pytester, f", reproduce={blob!r}")
    result, data = run_check(pytester, "-k", "even")
    result.assert_outcomes(failed=1)
    fuzz = cases_by_name(data)["test_even_only"]["stages"]["fuzz"]
    assert fuzz["counterexample"]["sizes"] == {"b": 3}
    assert fuzz["examples"] == 1  # exactly the replayed example


@pytest.mark.slow
def test_every_run_mode_draws_the_same_sizes(pytester, monkeypatch):
    """One verdict per commit (#51): the search is seeded by the case, never by the clock, an example database or
    the profile CI loads: a developer's run, a second run beside the first one's files, and a CI=true run draw the
    same sizes and reach the same verdicts."""
    monkeypatch.delenv("CI", raising=False)
    _write(pytester)
    args = ("--export-examples", "12", "-k", "band or even or clean")
    _, first = run_check(pytester, *args, "--hypothesis-profile", "default", subprocess=True)
    _, second = run_check(pytester, *args, "--hypothesis-profile", "default", subprocess=True)
    monkeypatch.setenv("CI", "true")
    _, ci = run_check(pytester, *args, subprocess=True)

    def fuzzed(data):
        return {name: (case["outcome"], case["stages"]["fuzz"].get("drawn"), case["stages"]["fuzz"].get("examples"),
                       case["stages"]["fuzz"].get("counterexample", {}).get("sizes"))
                for name, case in cases_by_name(data).items()}

    assert fuzzed(first) == fuzzed(second) == fuzzed(ci)
    assert fuzzed(first)["test_even_only"][3] == {"b": 3}  # shrunk to the smallest odd size, every run
    assert len(fuzzed(first)["test_clean"][1]) == 12


REFUSES_37 = '''
class Refuses37(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 37:
            return x - 1
        return x * 2


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO(min=2, max=64)}})
def test_refuses():
    return Refuses37(), (torch.randn(8),)
'''


def test_fuzz_leaves_what_guards_proved_to_guards(pytester):
    """A program that refuses one in-range size by a guard: `guards` proves it and fails every run; `fuzz` leaves
    the refused size to it whenever it draws it, so the baseline records one stage, whatever the draw (#51)."""
    write_cases(pytester, REFUSES_37)
    result, data = run_check(pytester, "--export-examples", "300")
    result.assert_outcomes(failed=1)
    case = cases_by_name(data)["test_refuses"]
    assert case["stages"]["guards"]["status"] == "failed"
    assert "refused where x.shape[0] == 37: 1 of 63 sizes" in case["stages"]["guards"]["message"]
    fuzz = case["stages"]["fuzz"]
    assert fuzz["status"] == "passed", fuzz
    assert fuzz["left_to_guards"] >= 1 and {"x.shape[0]": 37, "mode": "left to guards"} in fuzz["drawn"], fuzz
    assert "left to guards" in fuzz["message"]


def test_a_stale_reproduce_blob_is_a_warning_not_an_error(pytester):
    """The model was fixed, the blob stayed in the marker: Hypothesis cannot reproduce it. `fuzz` runs as without
    it and passes, and a warning names the keyword to remove (#51); never an `error` that cannot be baselined."""
    _write(pytester)
    _, data = run_check(pytester, "--export-examples", "8", "-k", "even")
    blob = cases_by_name(data)["test_even_only"]["stages"]["fuzz"]["counterexample"]["reproduce"]
    assert blob
    write_cases(pytester, CASES.replace("REPLAY", f", reproduce={blob!r}").replace('raise ValueError("odd batch")',
                                                                                 "pass"))
    result, data = run_check(pytester, "--export-examples", "8", "-k", "even")
    result.assert_outcomes(passed=1)
    case = cases_by_name(data)["test_even_only"]
    fuzz = case["stages"]["fuzz"]
    assert fuzz["status"] == "passed" and fuzz["examples"] == 8, fuzz
    assert any("no longer reproduces a failure" in w and "remove reproduce=" in w for w in case["warnings"]), case


def test_examples_keyword_and_option(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=16)}}, examples=3)
def test_three():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=16)}})
def test_default():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=16)}}, examples=0)
def test_none():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
''')
    result, data = run_check(pytester, "--export-examples", "5")
    result.assert_outcomes(passed=3)
    cases = cases_by_name(data)
    assert [cases[n]["stages"]["fuzz"]["examples"] for n in ("test_three", "test_default")] == [3, 5]
    # examples=0 checks nothing: skipped with the reason, never `passed` (issue #18)
    none = cases["test_none"]["stages"]["fuzz"]
    assert none["status"] == "skipped" and none["message"] == "skipped: no examples requested (examples=0)"


@pytest.mark.slow
def test_guards_and_fuzz_agree_under_xdist(pytester):
    _write(pytester)
    # no seed given: the search is seeded by the case, so both runs draw the same sizes (#51)
    args = ("--export-examples", "12", "-k", "not band")
    _, serial = run_check(pytester, *args, report="serial.json")
    result, parallel = run_check(pytester, *args, "-n", "2", report="parallel.json")
    result.assert_outcomes(passed=2, failed=1)

    def essentials(data):
        out = {}
        for name, case in cases_by_name(data).items():
            out[name] = (case["outcome"], statuses(case), case.get("shapes"), case.get("warnings"),
                         case["stages"]["guards"].get("probes"),
                         case["stages"]["fuzz"].get("counterexample", {}).get("sizes"))
        return out

    assert essentials(serial) == essentials(parallel)
