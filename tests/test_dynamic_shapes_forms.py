"""Every form `dynamic_shapes` takes reaches export intact: unbounded Dims, ShapesCollection, AdditionalInputs."""

from __future__ import annotations

import torch
from torch.export import AdditionalInputs, Dim, ShapesCollection

import pytest_export


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


def test_unbounded_dim_records_an_open_range():
    # sympy's int_oo raises AttributeError (not OverflowError) from int(); the export stage must not crash on it
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)),
                              dynamic_shapes={"x": {0: Dim("b")}, "y": {0: Dim("b")}})
    assert res.outcome == "passed", res.failure_text()
    assert list(res.stages["export"].data["range_constraints"].values()) == [[0, None]]


def test_shapes_collection_is_resolved_on_the_case_inputs():
    # a ShapesCollection is keyed by tensor identity; the harness exports clones of the inputs
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    sc = ShapesCollection()
    b = Dim("b", min=2, max=16)
    sc[x] = {0: b}
    sc[y] = {0: b}
    res = pytest_export.check(Add(), (x, y), dynamic_shapes=sc)
    assert res.outcome == "passed", res.failure_text()
    assert list(res.stages["export"].data["range_constraints"].values()) == [[2, 16]]


def test_additional_inputs_make_the_varying_axis_dynamic():
    ai = AdditionalInputs()
    ai.add((torch.randn(6, 3), torch.randn(6, 3)))
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=ai)
    assert res.outcome == "passed", res.failure_text()
    (bounds,) = res.stages["export"].data["range_constraints"].values()
    assert bounds[1] is None


# ---- a declaration that does not fit its case is the test's mistake: a usage error (issue #32) ------------

MISFITS = '''
class Two(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y

B = Dim("b", min=2, max=16)

@pytest.mark.exportable(dynamic_shapes={"x": {0: B}, "z": None}, xfail={"export": "known"})
def test_wrong_key():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes=({0: B},), xfail={"export": "known"})
def test_wrong_length():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("c", min=8, max=16)}, "y": None})
def test_example_outside():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

def test_fixture(export_check):
    export_check(Two(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes={"x": {0: B}, "w": None})
'''

EXPECTED = {
    "test_wrong_key": "test_cases.py::test_wrong_key: dynamic_shapes key 'z' is not an input of this case (inputs "
                      "given: x, y). Use forward's argument names as keys, or a tuple by position",
    "test_wrong_length": "test_cases.py::test_wrong_length: dynamic_shapes has 1 entries but the case gives 2 inputs "
                         "(x, y). Give one entry per input, None for static ones",
    "test_example_outside": "test_cases.py::test_example_outside: dynamic_shapes['x'][0]: the example's x.shape[0] is "
                            "4, outside its own declared range [8, 16] of Dim('c', min=8, max=16). Use an example "
                            "inside the declared range, or widen the range",
    "test_fixture": "test_cases.py::test_fixture: dynamic_shapes key 'w' is not an input of this case",
}


def test_a_declaration_that_does_not_fit_is_a_usage_error_never_xfailed_or_baselined(pytester):
    import json

    from tests.helpers import cases_by_name, run_check, write_cases

    write_cases(pytester, MISFITS)
    result, data = run_check(pytester, "-p", "no:randomly", "--export-baseline", "baseline.json",
                             "--export-baseline-update")
    result.assert_outcomes(failed=4)  # xfail= on export does not apply: the case never got there
    cases = cases_by_name(data)
    out = result.stdout.str()
    for name, text in EXPECTED.items():
        case = cases[name]
        assert case["outcome"] == "error" and case["error"].startswith(text), case
        assert case["stages"] == {}, case  # nothing ran on a declaration that does not fit
        assert text in out, (name, out)
    assert "not exported:" not in out
    baseline = pytester.path / "baseline.json"
    failures = json.loads(baseline.read_text())["failures"] if baseline.exists() else {}
    assert failures == {}, failures  # an --export-baseline-update run records none of them


def test_a_shapes_collection_of_other_tensors_is_a_usage_error():
    sc = ShapesCollection()
    stray = torch.randn(4, 3)  # kept alive: the collection holds ids, which a freed tensor's successor may reuse
    sc[stray] = {0: Dim("b", max=16)}
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=sc, name="t.py::test_sc")
    assert res.outcome == "error" and res.stages == {}, res.failure_text()
    assert res.error.startswith("t.py::test_sc: dynamic_shapes (a ShapesCollection) does not fit the case's inputs")
    assert "not found in args" in res.error and "Key it by the very tensors the case passes" in res.error


class MaskThroughKwargs(torch.nn.Module):
    def forward(self, x, **kwargs):
        return x * 2 + kwargs["mask"]


def test_a_var_keyword_entry_is_read_as_torch_reads_it():
    # torch's own form for forward(self, x, **kwargs): top-level keys are forward's argument names, the
    # **kwargs entry a dict by keyword. The harness reads it (each keyword's axes declared), never a usage error;
    # what export makes of it is torch's verdict
    rows = Dim("rows", min=2, max=16)
    res = pytest_export.check(MaskThroughKwargs(), (torch.randn(3, 4),), {"mask": torch.ones(3, 4)},
                              dynamic_shapes={"x": {0: rows}, "kwargs": {"mask": {0: rows}}})
    assert res.outcome != "error" and "export" in res.stages, res.failure_text()
    export = res.stages["export"]
    if torch.__version__ < "2.14":
        assert export.status == "failed" and "Must provide a tree_name" in export.message, res.failure_text()
    else:
        assert export.status == "passed" and list(export.data["range_constraints"].values()) == [[2, 16]]
    # a keyword the case does not pass is still named, as any other key
    res = pytest_export.check(MaskThroughKwargs(), (torch.randn(3, 4),), {"mask": torch.ones(3, 4)},
                              dynamic_shapes={"x": {0: rows}, "kwargs": {"pad": {0: rows}}}, name="t.py::test_kw")
    assert res.outcome == "error" and "dynamic_shapes key 'pad' is not an input of this case" in res.error
