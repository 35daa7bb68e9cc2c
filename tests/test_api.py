"""The fixture and the plain-Python entry point."""

from __future__ import annotations

import pytest
import torch

import pytest_export
from tests.helpers import cases_by_name, run_check, write_cases


class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1


def test_plain_python_check_passes_and_fails(tmp_path):
    ok = pytest_export.check(Twice(), (torch.randn(3),), name="twice", workdir=tmp_path)
    assert ok.outcome == "passed" and ok.stages["serde"].data["bytes"] > 0
    bad = pytest_export.check(Shortcut(), (torch.randn(3),), name="shortcut")
    assert bad.outcome == "failed" and bad.stages["compare"].status == "failed"
    with pytest.raises(pytest_export.ExportCheckFailure, match="compare"):
        pytest_export.check(Shortcut(), (torch.randn(3),), raise_on_failure=True)
    with pytest.raises(pytest_export.UsageError, match="unknown exportable keyword 'stict'"):
        pytest_export.check(Twice(), (torch.randn(3),), stict=True)


def test_result_round_trips_through_json():
    res = pytest_export.check(Twice(), (torch.randn(3),), name="twice")
    again = pytest_export.CaseResult.from_json(res.to_json())
    assert again.to_json() == res.to_json()


def test_fixture_checks_and_records_in_report(pytester):
    write_cases(pytester, '''
class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

def test_fixture_pass(export_check):
    result = export_check(Twice(), (torch.randn(3),), dynamic_shapes=({0: Dim("n", max=16)},))
    assert result.outcome == "passed"

def test_fixture_fail(export_check):
    export_check(Shortcut(), (torch.randn(3),))

def test_fixture_no_raise(export_check):
    result = export_check(Shortcut(), (torch.randn(3),), raise_on_failure=False)
    assert result.stages["compare"].status == "failed"

def test_fixture_misuse(export_check):
    export_check(Twice(), (torch.randn(3),), rtol="big")
''')
    # the fixture checks whether or not --export-check is given
    result, data = run_check(pytester)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_fixture_misuse: exportable keyword 'rtol' must be a non-negative number*"])
    assert set(cases_by_name(data)) == {"test_fixture_pass", "test_fixture_fail", "test_fixture_no_raise"}
