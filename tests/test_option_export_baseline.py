"""--export-baseline, --export-baseline-update, --export-baseline-warn-stale: every ratchet transition."""

from __future__ import annotations

import json

import pytest

from pytest_export import baseline as bl
from tests.helpers import write_cases

CASES = '''
import os

class Shortcut(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting() or os.environ.get("FIXED"):
            return x * 2
        return x + x + 1e-3

class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
    def forward(self, x):
        return self.l(x)

@pytest.mark.exportable
def test_broken():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_ok():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

if os.environ.get("WITH_BN"):
    @pytest.mark.exportable
    def test_bn_train():
        torch.manual_seed(0)
        return torch.nn.BatchNorm1d(3).train(), (torch.randn(4, 3),)

if os.environ.get("NEW_FAILURE"):
    @pytest.mark.exportable
    def test_new_broken():
        return Shortcut(), (torch.ones(2),)
'''


def run(pytester, *args):
    return pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist",
                              "--export-baseline", "baseline.json", *args)


def read(pytester):
    return json.loads((pytester.path / "baseline.json").read_text())


@pytest.fixture
def suite(pytester, monkeypatch):
    for var in ("FIXED", "WITH_BN", "NEW_FAILURE"):
        monkeypatch.delenv(var, raising=False)
    write_cases(pytester, CASES)
    return pytester


def test_update_writes_a_sorted_file_and_the_gate_then_passes(suite, monkeypatch):
    monkeypatch.setenv("WITH_BN", "1")
    r = run(suite, "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=2, xfailed=1)  # the failure is recorded, not failed
    data = read(suite)
    assert list(data["failures"]) == ["test_cases.py::test_broken"]
    assert set(data["failures"]["test_cases.py::test_broken"]) == {"compare"}
    assert "disagrees with eager" in data["failures"]["test_cases.py::test_broken"]["compare"]
    assert data["non_core_ops"] == {"aten._native_batch_norm_legit_functional.default": ["test_cases.py::test_bn_train"]}
    text = (suite.path / "baseline.json").read_text()
    assert text == bl.Baseline(data["failures"], data["non_core_ops"]).dumps()  # sorted, stable

    r = run(suite, "-rx")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=2, xfailed=1)
    r.stdout.fnmatch_lines(["*known failure in the baseline: compare*"])


def test_new_failure_fails_the_session(suite, monkeypatch):
    assert run(suite, "--export-baseline-update").ret == 0
    monkeypatch.setenv("NEW_FAILURE", "1")
    r = run(suite)
    assert r.ret == 1
    r.assert_outcomes(passed=1, failed=1, xfailed=1)
    r.stdout.fnmatch_lines(["*new failure (not in the baseline): compare*", "*new: test_cases.py::test_new_broken*"])


def test_new_non_core_op_fails_the_session(suite, monkeypatch):
    assert run(suite, "--export-baseline-update").ret == 0
    monkeypatch.setenv("WITH_BN", "1")
    r = run(suite)
    assert r.ret == 1
    r.assert_outcomes(passed=1, failed=1, xfailed=1)
    r.stdout.fnmatch_lines(["*new non-core op after decomposition (not in the baseline): "
                            "aten._native_batch_norm_legit_functional.default*"])


def test_stale_entry_fails_unless_warned(suite, monkeypatch):
    assert run(suite, "--export-baseline-update").ret == 0
    monkeypatch.setenv("FIXED", "1")
    r = run(suite)
    assert r.ret == 1
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*stale: remove it*compare*passes now*"])
    r = run(suite, "--export-baseline-warn-stale")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["*ExportBaselineWarning*stale*", "*stale (warning): test_cases.py::test_broken*"])


def test_stale_non_core_op_and_removed_case_fail_a_full_run(suite, monkeypatch):
    monkeypatch.setenv("WITH_BN", "1")
    assert run(suite, "--export-baseline-update").ret == 0
    monkeypatch.delenv("WITH_BN")
    r = run(suite)
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(passed=1, xfailed=1)  # every item is fine: the session fails on the stale op
    r.stdout.fnmatch_lines(["*stale: remove it: non-core op aten._native_batch_norm_legit_functional.default*"])
    # a subset run cannot tell a removed case from an unselected one
    r = run(suite, "-k", "ok or broken")
    assert r.ret == 0, r.stdout.str()


def test_update_prunes_on_a_full_run_only(suite, monkeypatch):
    monkeypatch.setenv("NEW_FAILURE", "1")
    monkeypatch.setenv("WITH_BN", "1")
    assert run(suite, "--export-baseline-update").ret == 0
    assert set(read(suite)["failures"]) == {"test_cases.py::test_broken", "test_cases.py::test_new_broken"}
    monkeypatch.delenv("NEW_FAILURE")
    monkeypatch.delenv("WITH_BN")
    monkeypatch.setenv("FIXED", "1")
    # subset (-k, a test id): cases that did not run keep their entries
    for subset in (["-k", "test_ok"], ["test_cases.py::test_ok"]):
        r = run(suite, "--export-baseline-update", *subset)
        assert r.ret == 0, r.stdout.str()
        data = read(suite)
        assert set(data["failures"]) == {"test_cases.py::test_broken", "test_cases.py::test_new_broken"}, subset
        assert list(data["non_core_ops"]) == ["aten._native_batch_norm_legit_functional.default"]
    # a file: test_broken ran and is fixed, so its entry goes; the case that is gone stays (a file is a subset)
    r = run(suite, "--export-baseline-update", "test_cases.py")
    assert set(read(suite)["failures"]) == {"test_cases.py::test_new_broken"}
    assert list(read(suite)["non_core_ops"]) == ["aten._native_batch_norm_legit_functional.default"]
    r = run(suite, "--export-baseline-update")  # the whole suite: everything stale is pruned
    assert r.ret == 0
    assert read(suite) == {"version": 1, "failures": {}, "non_core_ops": {}}


@pytest.mark.parametrize("content, expected", [
    (None, "no such file; create it with --export-baseline-update"),
    ("{not json", "not readable JSON"),
    ('{"version": 1, "failures": {"t": ["compare"]}}', "failures['t'] must be a {stage: reason} object"),
    ('{"version": 7}', '"version": 1'),
])
def test_bad_baseline_is_a_usage_error(suite, content, expected):
    if content is not None:
        (suite.path / "baseline.json").write_text(content)
    r = run(suite)
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert "baseline.json" in r.stderr.str() and expected in r.stderr.str(), r.stderr.str()


@pytest.mark.slow
def test_gate_under_xdist(suite, monkeypatch):
    monkeypatch.setenv("WITH_BN", "1")
    r = suite.runpytest_subprocess("--export-check", "-p", "no:cacheprovider", "-n", "2",
                                   "--export-baseline", "baseline.json", "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    assert set(read(suite)["failures"]) == {"test_cases.py::test_broken"}
    monkeypatch.delenv("WITH_BN")
    monkeypatch.setenv("NEW_FAILURE", "1")
    r = suite.runpytest_subprocess("--export-check", "-p", "no:cacheprovider", "-n", "2",
                                   "--export-baseline", "baseline.json")
    assert r.ret == 1
    r.stdout.fnmatch_lines(["*new: test_cases.py::test_new_broken: new failure in compare*",
                            "*stale: remove it: non-core op aten._native_batch_norm_legit_functional.default*"])


def test_gate_options_without_export_check_warn_that_nothing_is_gated(suite):
    """A CI line that forgot --export-check must not pass silently as if it gated something."""
    r = suite.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "--export-baseline", "baseline.json",
                        "--export-report", "r.json")
    r.stdout.fnmatch_lines(["*PytestConfigWarning: --export-report, --export-baseline have no effect without "
                            "--export-check*add --export-check*"])
    assert not (suite.path / "r.json").exists()
    r = suite.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "--export-baseline", "baseline.json",
                        "-W", "error::pytest.PytestConfigWarning")
    assert r.ret != 0
    r = suite.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "--export-check", "--export-baseline",
                        "baseline.json", "--export-baseline-update")
    assert "no effect without" not in r.stdout.str()
