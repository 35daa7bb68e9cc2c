"""The JSON files the plugin writes are strict JSON: no ``Infinity`` or ``NaN`` tokens, which most parsers
(jq, JavaScript, Go) reject. Non-finite floats are written as the strings "inf", "-inf", "nan"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_export.report.files import write_json_atomic
from tests.helpers import cases_by_name, run_check, write_cases


def _strict_loads(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def test_write_json_atomic_writes_non_finite_floats_as_strings(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"a": float("inf"), "b": [float("nan")], "c": (-float("inf"), 1.5), "d": {2, 1}})
    data = _strict_loads(path.read_text())
    assert data == {"a": "inf", "b": ["nan"], "c": ["-inf", 1.5], "d": [1, 2]}


INF = '''
class ZeroInEager(torch.nn.Module):
    """Eager gives zeros; the traced program gives ones: the relative error against eager is infinite."""
    def forward(self, x):
        return x * 0 + 1 if torch.compiler.is_exporting() else x * 0

@pytest.mark.exportable
def test_zero_in_eager():
    return ZeroInEager(), (torch.ones(3),)
'''


def test_report_with_an_infinite_relative_error_is_strict_json(pytester):
    write_cases(pytester, INF)
    result, _ = run_check(pytester, "-p", "no:xdist", "--export-coverage", "cov.json",
                          "--export-summary-md", "summary.md")
    result.assert_outcomes(failed=1)
    data = _strict_loads(Path(pytester.path, "report.json").read_text())
    compare = cases_by_name(data)["test_zero_in_eager"]["stages"]["compare"]
    assert compare["status"] == "failed"
    assert compare["max_rel_error"] == "inf" and compare["max_abs_error"] == 1.0, compare
    _strict_loads(Path(pytester.path, "cov.json").read_text())


@pytest.mark.parametrize("value, text", [(float("inf"), '"inf"'), (float("-inf"), '"-inf"'), (float("nan"), '"nan"')])
def test_every_non_finite_float_has_its_string(tmp_path, value, text):
    path = tmp_path / "x.json"
    write_json_atomic(path, [value])
    assert text in path.read_text()
