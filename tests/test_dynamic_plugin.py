"""`guards` and `fuzz` through real pytest runs: report fields, warnings, replay, the example database, xdist."""

from __future__ import annotations

import shutil

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
    shutil.rmtree(pytester.path / ".hypothesis", ignore_errors=True)  # replay from the blob, not the database
    _write(pytester, f", reproduce={blob!r}")
    result, data = run_check(pytester, "-k", "even")
    result.assert_outcomes(failed=1)
    fuzz = cases_by_name(data)["test_even_only"]["stages"]["fuzz"]
    assert fuzz["counterexample"]["sizes"] == {"b": 3}
    assert fuzz["examples"] == 1  # exactly the replayed example


def test_the_example_database_replays_a_failure_first_per_case(pytester, monkeypatch):
    # Hypothesis' own "ci" profile (loaded where CI is set) has no database: run as a developer does,
    # in a subprocess so that the profile this suite runs under is left alone
    monkeypatch.delenv("CI", raising=False)
    _write(pytester)
    args = ("--export-examples", "300", "-k", "band", "--hypothesis-seed", "3", "--hypothesis-profile", "default")
    _, first = run_check(pytester, *args, subprocess=True)
    _, second = run_check(pytester, *args, subprocess=True)
    fuzz = [cases_by_name(d)["test_band"]["stages"]["fuzz"] for d in (first, second)]
    assert [f["counterexample"]["sizes"] for f in fuzz] == [{"b": 37}, {"b": 37}]
    runs = [f["examples"] for f in fuzz]
    assert runs[1] < runs[0], runs  # the saved failure is tried first: no search before it


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


def test_guards_and_fuzz_agree_under_xdist(pytester):
    _write(pytester)
    # a fixed seed: both runs search the same sizes, wherever Hypothesis' database lives in each process
    args = ("--export-examples", "12", "-k", "not band", "--hypothesis-seed", "0")
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
