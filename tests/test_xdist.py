"""The report is the same with and without xdist, and survives a worker that dies."""

from __future__ import annotations

import pytest

from tests.helpers import run_check, write_cases

CASES = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x)

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(3, 4),)

@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable(xfail={"compare": "known shortcut"})
def test_shortcut_xfail():
    return Shortcut(), (torch.ones(3),)

class Narrowing(torch.nn.Module):
    def forward(self, x):
        return x[:4] if x.shape[0] > 4 else x

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("n", max=16)}}, xfail={"export": "narrows n"})
def test_narrowing():
    return Narrowing(), (torch.randn(6),)
'''


def _normalized(data):
    out = []
    for case in data["cases"]:
        stages = {n: {k: v for k, v in s.items() if k not in ("duration", "traceback")} for n, s in case["stages"].items()}
        out.append({**case, "stages": stages})
    return out


@pytest.mark.slow
def test_report_identical_with_n0_n2_and_without_xdist(pytester):
    write_cases(pytester, CASES)
    runs = {
        "no-xdist": run_check(pytester, "-p", "no:xdist", "--export-coverage", "c_off.json", report="r_off.json"),
        "n0": run_check(pytester, "-n", "0", "--export-coverage", "c0.json", report="r0.json"),
        "n2": run_check(pytester, "-n", "2", "--junitxml", "j2.xml", "--export-coverage", "c2.json",
                        report="r2.json", subprocess=True),
    }
    for name, (result, data) in runs.items():
        result.assert_outcomes(passed=1, failed=1, xfailed=2)
        assert data is not None, name
        assert len(data["cases"]) == 4
    reference = _normalized(runs["no-xdist"][1])
    for name in ("n0", "n2"):
        assert _normalized(runs[name][1]) == reference, name
    coverage = [(pytester.path / f"c{n}.json").read_text() for n in ("_off", "0", "2")]
    assert coverage[0] == coverage[1] == coverage[2]
    assert (pytester.path / "c2.md").read_text() == (pytester.path / "c_off.md").read_text()
    # session data (torch version, Core ATen op count) reached the controller from the workers
    d2 = runs["n2"][1]
    assert d2["torch"] == runs["no-xdist"][1]["torch"] and d2["torch"]
    assert d2["coverage"]["core_ops_total"] > 100
    assert d2["coverage"]["core_ops_reached"]
    # JUnit XML written by the controller carries the workers' stage properties
    import xml.etree.ElementTree as ET

    props = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(pytester.path / "j2.xml").getroot().iter("testcase")}
    assert props["test_shortcut"]["export.compare"] == "failed"
    assert props["test_shortcut_xfail"]["export.compare"] == "xfailed"
    narrowing = [c for c in d2["cases"] if c["nodeid"].endswith("test_narrowing")][0]
    assert "n = Dim('n', min=5, max=16)" in narrowing["stages"]["export"]["diagnosis"]["dynamic_shapes_fix"]
    lin = [c for c in d2["cases"] if c["nodeid"].endswith("test_lin")][0]
    assert lin["stages"]["export"]["range_constraints"] and lin["stages"]["decomp"]["ops_after"]


CRASH = '''
import os

class Dies(torch.nn.Module):
    def forward(self, x):
        os._exit(3)   # the worker process dies in the middle of the case

class Fine(torch.nn.Module):
    def forward(self, x):
        return x + 1

@pytest.mark.exportable(tags=["crash"])
def test_dies():
    return Dies(), (torch.ones(2),)

@pytest.mark.exportable
def test_fine():
    return Fine(), (torch.ones(2),)
'''


@pytest.mark.slow
def test_killed_worker_case_is_an_error_and_the_report_is_still_written(pytester):
    write_cases(pytester, CRASH)
    result, data = run_check(pytester, "-n", "2", report="r.json", subprocess=True)
    assert result.ret == 1
    assert data is not None, result.stdout.str()
    by = {c["nodeid"].split("::")[-1]: c for c in data["cases"]}
    assert by["test_fine"]["outcome"] == "passed"
    assert by["test_dies"]["outcome"] == "error"
    assert "crashed" in by["test_dies"]["error"] and by["test_dies"]["tags"] == ["crash"]
    assert data["torch"]  # the surviving worker (or the controller) still knows the torch version
