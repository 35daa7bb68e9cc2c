"""Diagnosis of export failures: draft_export findings, and a corrected dynamic_shapes that exports when pasted back."""

from __future__ import annotations

import torch
from torch.export import Dim

from pytest_export.diagnose import to_python
from tests.helpers import cases_by_name, run_check, write_cases

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
    """torch prints the partial graph of a failed export to stderr from two nested frames; the case shows it once."""
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
    assert result.stdout.str().count("def forward(self, arg0_1") == 1
    assert data["cases"][0]["stages"]["export"]["diagnosis"]  # the diagnosis is kept
