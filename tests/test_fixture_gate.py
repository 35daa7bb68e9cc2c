"""The `export_check` fixture is gated exactly as the marker is: `xfail=`, the baseline's known failures, stale
entries (failing, or warning with --export-baseline-warn-stale) and new failures, with the same messages.

Each planted case exists twice, as a marked test and as a fixture call, and both must end the same way.
"""

from __future__ import annotations

import json

import pytest
import torch  # noqa: F401 - loaded here, before the inner runs, so pytester keeps numpy (see tests/conftest.py)

from tests.helpers import SHORTCUT, write_cases

CASES = '''
''' + SHORTCUT + '''

@pytest.mark.exportable
def test_marked():
    return Shortcut(), (torch.ones(3),)

def test_fixture(export_check):
    export_check(Shortcut(), (torch.ones(3),))
'''

XFAIL_CASES = '''
class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x + x + 1e-3

@pytest.mark.exportable(xfail={"compare": "planted shortcut"})
def test_marked():
    return Shortcut(), (torch.ones(3),)

def test_fixture(export_check):
    export_check(Shortcut(), (torch.ones(3),), xfail={"compare": "planted shortcut"})

def test_fixture_no_raise(export_check):
    result = export_check(Shortcut(), (torch.ones(3),), xfail={"compare": "planted shortcut"}, raise_on_failure=False)
    assert result.outcome == "xfailed"
'''

BOTH = ("test_marked", "test_fixture")


def run(pytester, *args):
    return pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", "-rxX", *args)


def baseline(pytester, failures):
    path = pytester.path / "baseline.json"
    path.write_text(json.dumps({"version": 2, "failures": failures, "non_core_ops": {}}))
    return str(path.name)


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("FIXED", raising=False)
    write_cases(pytester, CASES)
    return pytester


def _known(reason="planted"):
    return {f"test_cases.py::{name}": {"compare": {"reason": reason}} for name in BOTH}


def test_fixture_xfail_keyword_xfails_the_test_as_the_marker_does(pytester):
    write_cases(pytester, XFAIL_CASES)
    r = run(pytester)
    r.assert_outcomes(xfailed=2, passed=1)
    r.stdout.fnmatch_lines_random([f"XFAIL test_cases.py::{name} - compare: expected failure (planted shortcut)*"
                                   for name in BOTH])


def test_fixture_xfail_keyword_without_export_check(pytester):
    """The fixture checks without --export-check too, and still honours `xfail=`."""
    write_cases(pytester, XFAIL_CASES)
    r = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "-rx", "-k", "fixture")
    r.assert_outcomes(xfailed=1, passed=1)
    r.stdout.fnmatch_lines(["XFAIL test_cases.py::test_fixture - compare: expected failure (planted shortcut)*"])


def test_fixture_known_baseline_failure_xfails(suite):
    r = run(suite, "--export-baseline", baseline(suite, _known()))
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(xfailed=2)
    r.stdout.fnmatch_lines_random([f"XFAIL test_cases.py::{name} - known failure in the baseline: compare (planted) "
                                   "(signature compare: mismatch: output*)" for name in BOTH])


def test_fixture_new_failure_fails(suite):
    r = run(suite, "--export-baseline", baseline(suite, {}))
    assert r.ret == 1
    r.assert_outcomes(failed=2)
    out = r.stdout.str()
    assert out.count("new failure (not in the baseline): compare") == 2, out
    r.stdout.fnmatch_lines_random([f"*new: test_cases.py::{name}: new failure in compare*" for name in BOTH])


def test_fixture_stale_entry_fails_or_warns(suite, monkeypatch):
    monkeypatch.setenv("FIXED", "1")
    path = baseline(suite, _known())
    r = run(suite, "--export-baseline", path)
    assert r.ret == 1
    r.assert_outcomes(failed=2)
    assert r.stdout.str().count("stale: remove it: baseline baseline.json expects compare (planted) to fail") == 2
    r = run(suite, "--export-baseline", path, "--export-baseline-warn-stale")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines_random([f"*ExportBaselineWarning: test_cases.py::{name}: stale: remove it*"
                                   for name in BOTH])
    r.stdout.fnmatch_lines_random([f"stale (warning): test_cases.py::{name} [[]compare]: passes now" for name in BOTH])


def test_fixture_update_mode_records_and_xfails(suite):
    r = run(suite, "--export-baseline", "baseline.json", "--export-baseline-update")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(xfailed=2)
    r.stdout.fnmatch_lines_random([f"XFAIL test_cases.py::{name} - recorded in the baseline: compare*" for name in BOTH])
    assert set(json.loads((suite.path / "baseline.json").read_text())["failures"]) == {
        f"test_cases.py::{name}" for name in BOTH}


def test_fixture_second_call_is_gated_by_its_own_entry(pytester):
    write_cases(pytester, '''
class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x + x + 1e-3

def test_two(export_check):
    export_check(torch.nn.ReLU(), (torch.ones(3),))
    export_check(Shortcut(), (torch.ones(3),))
''')
    r = run(pytester, "--export-baseline", baseline(pytester, {"test_cases.py::test_two#2": {"compare": {"reason": "r"}}}))
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(xfailed=1)
    r.stdout.fnmatch_lines(["XFAIL test_cases.py::test_two - known failure in the baseline: compare (r) (signature "
                            "compare: mismatch: output*)"])


# ---- raise_on_failure=False: the test decides, and every summary and gate says what it decided (#32) ----------------

DECIDES = SHORTCUT + '''
def test_decides(export_check):
    result = export_check(Shortcut(), (torch.ones(3),), raise_on_failure=False)
    assert result.stages["compare"].status == "failed"  # the test looked at the failure, and accepts it
    if os.environ.get("REJECT"):
        pytest.fail("planted: the test does not accept it")

def test_fine(export_check):
    export_check(torch.nn.ReLU(), (torch.ones(3),))
'''


@pytest.mark.parametrize("reject", [False, True], ids=["accepted", "rejected"])
def test_a_case_its_test_decides_counts_as_its_test_ends(pytester, capsys, monkeypatch, reject):
    from pytest_export.__main__ import main

    monkeypatch.delenv("FIXED", raising=False)
    monkeypatch.delenv("REJECT", raising=False)
    if reject:
        monkeypatch.setenv("REJECT", "1")
    write_cases(pytester, "import os\n" + DECIDES)
    path = baseline(pytester, {})
    r = run(pytester, "--export-baseline", path, "--export-report", "report.json")
    assert r.ret == int(reject), r.stdout.str()
    r.assert_outcomes(passed=2 - reject, failed=int(reject))
    out = r.stdout.str()
    assert "new failure" not in out and "new: " not in out, out
    head = "2 cases: 1 passed, 1 failing" if reject else "2 cases: 2 passed"
    assert head in out, out
    data = json.loads((pytester.path / "report.json").read_text())
    case = next(c for c in data["cases"] if c["nodeid"].endswith("test_decides"))
    assert case["raise_on_failure"] is False and "baseline" not in case
    assert (case["item"], case["verdict"]) == (("failed", "failed") if reject else ("passed", "passed"))
    # the gate on the report, and on the merged report, ends as the run did
    assert main(["merge", "-o", str(pytester.path / "merged.json"), str(pytester.path / "report.json")]) == 0
    for name in ("report.json", "merged.json"):
        capsys.readouterr()
        rc = main(["gate", str(pytester.path / name), "--baseline", str(pytester.path / path)])
        lines = capsys.readouterr().out.splitlines()
        assert rc == r.ret, lines
        assert not any(line.startswith("new: ") for line in lines), lines
        if reject:
            assert "failed: test_cases.py::test_decides: its test failed (export_check(raise_on_failure=False): the " \
                   "test decides)" in lines, lines
    # an update records nothing for it: the baseline is the gate's, and this case is its test's
    r = run(pytester, "--export-baseline", path, "--export-baseline-update")
    assert r.ret == int(reject), r.stdout.str()
    assert json.loads((pytester.path / path).read_text())["failures"] == {}


def test_an_error_fails_even_a_test_that_decides(pytester):
    """The harness could not decide: there is no verdict to hand to the test, so it fails as everywhere."""
    write_cases(pytester, '''
class Opaque:
    __slots__ = ("k",)
    def __init__(self, k):
        self.k = k

class ReturnsOpaque(torch.nn.Module):
    def forward(self, x):
        return x + 1, Opaque(x * 2)

def test_decides(export_check):
    result = export_check(ReturnsOpaque(), (torch.ones(3),), raise_on_failure=False)
    assert result.stages["eager"].status == "error"  # never reached: the error fails the test at the call
''')
    r = run(pytester, "--export-report", "report.json")
    assert r.ret == 1
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*test_decides [[]eager]: error: the harness could not decide; errors are never expected*"])
    (case,) = json.loads((pytester.path / "report.json").read_text())["cases"]
    assert (case["item"], case["verdict"]) == ("failed", "error")
