"""Stage ``retrace``: ``export(ep.module())`` with the same inputs and dynamic_shapes, compared with eager."""

from __future__ import annotations

import torch
from torch.export import Dim

import pytest_export
from tests.helpers import cases_by_name, run_check, statuses, write_cases


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


class Sum(torch.nn.Module):
    def forward(self, *args):
        return args[0] + args[1]


def test_clean_program_re_exports_and_agrees():
    res = pytest_export.check(Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
    st = res.stages["retrace"]
    assert st.status == "passed", res.failure_text()
    assert st.data["sizes_checked"] >= 2  # boundary sizes, not only the example
    assert st.data["max_abs_error"] == 0.0


def test_var_positional_forward_exports_but_does_not_re_export():
    # torch 2.13: ep.module().forward takes (args_0, args_1), so {"args": (...)} no longer fits
    b = Dim("b", max=8)
    res = pytest_export.check(Sum(), (torch.randn(3), torch.randn(3)), dynamic_shapes={"args": ({0: b}, {0: b})})
    assert res.stages["export"].status == "passed", res.failure_text()
    assert res.stages["compare"].status == "passed"
    st = res.stages["retrace"]
    assert st.status == "failed"
    assert "does not export again" in st.message and "(args_0, args_1)" in st.message
    assert st.data["exception"] == "UserError"


class AutocastThenFloat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.linear(x)
        return y.float()


def test_strict_program_with_a_wrong_recorded_dtype_does_not_re_export():
    # torch 2.13: strict export records the cast after the autocast region with the wrong input dtype
    res = pytest_export.check(AutocastThenFloat(), (torch.randn(4, 8),), strict=True)
    assert res.stages["export"].status == "passed"
    st = res.stages["retrace"]
    assert st.status == "failed" and "Tensor dtype mismatch" in st.message
    assert "hint: ep.module().forward takes" not in st.message  # not a declaration problem


def test_the_same_forward_without_a_declaration_re_exports():
    res = pytest_export.check(Sum(), (torch.randn(3), torch.randn(3)))
    assert res.stages["retrace"].status == "passed", res.failure_text()


def _second_export(monkeypatch, change):
    """Plant a defect in the second export only (the one whose module is a GraphModule)."""
    real = torch.export.export

    def export(mod, args, kwargs=None, **kw):
        if isinstance(mod, torch.fx.GraphModule):
            mod, kw = change(mod, kw)
        return real(mod, args, kwargs, **kw)

    monkeypatch.setattr(torch.export, "export", export)


def test_re_exported_program_that_lost_its_dynamic_axis_fails(monkeypatch):
    _second_export(monkeypatch, lambda mod, kw: (mod, {**kw, "dynamic_shapes": None}))
    res = pytest_export.check(Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
    st = res.stages["retrace"]
    assert st.status == "failed"
    assert "inputs differ" in st.message
    assert st.data["first_input_axes"] == [[[2, 16], 3]] and st.data["input_axes"] == [[4, 3]]


def test_re_exported_program_that_computes_something_else_fails(monkeypatch):
    class Other(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1.5

    _second_export(monkeypatch, lambda mod, kw: (Other(), kw))
    res = pytest_export.check(Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
    st = res.stages["retrace"]
    assert st.status == "failed"
    assert "re-exported program disagrees with eager" in st.message


def test_retrace_through_the_plugin_and_xfail(pytester):
    write_cases(pytester, '''
class Sum(torch.nn.Module):
    def forward(self, *args):
        return args[0] + args[1]

B = Dim("b", max=8)

@pytest.mark.exportable(dynamic_shapes={"args": ({0: B}, {0: B})})
def test_varargs():
    return Sum(), (torch.randn(3), torch.randn(3))

@pytest.mark.exportable(dynamic_shapes={"args": ({0: B}, {0: B})}, xfail={"retrace": "ep.module() renames *args"})
def test_varargs_xfail():
    return Sum(), (torch.randn(3), torch.randn(3))

@pytest.mark.exportable
def test_plain():
    return Sum(), (torch.randn(3), torch.randn(3))
''')
    result, data = run_check(pytester, "--export-examples", "3")
    cases = cases_by_name(data)
    assert statuses(cases["test_varargs"])["retrace"] == "failed"
    assert statuses(cases["test_varargs_xfail"])["retrace"] == "xfailed"
    assert statuses(cases["test_plain"])["retrace"] == "passed"
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*retrace*failed*does not export again*"])


def test_re_exported_program_that_differs_only_at_other_sizes_fails(monkeypatch):
    class Other(torch.nn.Module):
        def forward(self, x):
            rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
            return x * 2 + 1 + (rows >= 4) * 0.5  # the same as Scale at the example's 4 rows, not beyond

    _second_export(monkeypatch, lambda mod, kw: (Other(), kw))
    res = pytest_export.check(Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
    st = res.stages["retrace"]
    assert st.status == "failed", res.failure_text()
    assert "disagrees with the first exported program at sizes b=" in st.message


@torch.library.custom_op("pytest_export_tests::keep_ten_rows", mutates_args=())
def keep_ten_rows(x: torch.Tensor) -> torch.Tensor:
    return x[:10].clone()


@keep_ten_rows.register_fake
def _(x):
    return torch.empty_like(x)  # wrong above 10 rows


class MeanOfKeptRows(torch.nn.Module):
    def forward(self, x):
        y = keep_ten_rows(x)
        return y.sum(0) / y.shape[0]


def test_a_program_wrong_at_other_sizes_is_not_retrace_s_finding():
    # guards and fuzz report the first program's own defect; re-exporting it changes nothing
    res = pytest_export.check(MeanOfKeptRows(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("r", min=2, max=64)}},
                              examples=3)
    assert res.stages["guards"].status == "failed"
    assert res.stages["retrace"].status == "passed", res.failure_text()
