"""--export-baseline, --export-baseline-update, --export-baseline-warn-stale: every ratchet transition."""

from __future__ import annotations

import json

import pytest

from pytest_export.gate import baseline as bl
from tests.helpers import HANGS, LIN, SHORTCUT, write_cases

CASES = '''
''' + SHORTCUT + LIN + '''

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
    entry = data["failures"]["test_cases.py::test_broken"]["compare"]
    assert set(entry) == {"reason", "signature"} and "disagrees with eager" in entry["reason"]
    assert data["version"] == bl.BASELINE_VERSION == 2
    assert data["non_core_ops"] == {"aten._native_batch_norm_legit_functional.default": ["test_cases.py::test_bn_train"]}
    text = (suite.path / "baseline.json").read_text()
    assert text == bl.Baseline(data["failures"], data["non_core_ops"]).dumps()  # sorted, stable

    r = run(suite, "-rx")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=2, xfailed=1)
    r.stdout.fnmatch_lines(["*known failure in the baseline: compare*"])


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    assert read(suite) == {"version": 2, "failures": {}, "non_core_ops": {}}


@pytest.mark.parametrize("content, expected", [
    (None, "no such file; create it with --export-baseline-update"),
    ("{not json", "not readable JSON"),
    ('{"version": 1, "failures": {"t": ["compare"]}}', "failures['t'] must be a {stage: reason} object"),
    ('{"version": 7}', '"version": 2'),
    ('{"version": 2, "failures": {"t": {"compare": "a reason"}}}',
     "failures['t']['compare'] must be an object {\"reason\": str, \"signature\": str}"),
    ('{"version": 2, "failures": {"t": {"compare": {"reason": "r", "signature": 3}}}}',
     "failures['t']['compare'] must be an object"),
    # a hand-edited typo would never match a failure: named at start-up, with the stages there are (#24)
    ('{"version": 2, "failures": {"t.py::c": {"exprot": {"reason": "r"}}}}',
     "failures['t.py::c']['exprot']: no stage is called 'exprot' (did you mean 'export'?); the stages are eager, "
     "export, compare, serde, decomp, guards, fuzz, retrace, unflatten, cuda, aoti"),
])
def test_bad_baseline_is_a_usage_error(suite, content, expected):
    if content is not None:
        (suite.path / "baseline.json").write_text(content)
    for update in ((), ("--export-baseline-update",)) if content else ((),):
        r = run(suite, *update)
        assert r.ret == pytest.ExitCode.USAGE_ERROR
        assert "baseline.json" in r.stderr.str() and expected in r.stderr.str(), r.stderr.str()
        assert "passed" not in r.stdout.str()  # at start-up, before any case runs
        assert content is None or (suite.path / "baseline.json").read_text() == content


# ---- an update of a run that stopped early writes nothing (#24) -------------------------------------------------

STOPPED = '''
@pytest.mark.exportable
def test_ok():
    return torch.nn.ReLU(), (torch.ones(3),)

@pytest.mark.exportable
def test_stops():
    if os.environ.get("CTRL_C"):
        raise KeyboardInterrupt
    raise KeyError("no such checkpoint")  # an error: it fails its item, in update mode too

@pytest.mark.exportable
def test_after():
    return torch.nn.Tanh(), (torch.ones(3),)
'''
# written compactly: any rewrite shows, and an update that ran would drop test_ok's entry (it passes)
PLANTED = json.dumps({"version": 2, "failures": {"test_cases.py::test_ok": {"compare": {"reason": "old"}}},
                      "non_core_ops": {}})


@pytest.mark.parametrize("how, args, why", [
    ("a collection error", (), "1 error during collection: test_broken.py"),
    ("-x", ("-x",), "stopping after 1 failures"),
    ("--maxfail", ("--maxfail", "1"), "stopping after 1 failures"),
    ("Ctrl-C", (), "interrupted (Ctrl-C, SIGTERM)"),
])
def test_an_update_of_a_run_that_stopped_early_writes_nothing(pytester, monkeypatch, how, args, why):
    monkeypatch.delenv("CTRL_C", raising=False)
    write_cases(pytester, "import os\n" + STOPPED)
    if how == "a collection error":
        pytester.makepyfile(test_broken="import no_such_module_here\n")
    if how == "Ctrl-C":
        monkeypatch.setenv("CTRL_C", "1")
    (pytester.path / "baseline.json").write_text(PLANTED)
    r = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", "--export-baseline",
                           "baseline.json", "--export-baseline-update", *args, no_reraise_ctrlc=True)
    assert r.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED), r.stdout.str()
    assert (pytester.path / "baseline.json").read_text() == PLANTED
    r.stdout.fnmatch_lines([f"baseline baseline.json not updated: the run stopped early ({why}); nothing was "
                            "written; rerun it to the end to update the baseline"])


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("-x",)], ids=["a collection error", "-x"])
def test_an_update_under_xdist_that_stopped_early_writes_nothing(pytester, monkeypatch, args):
    """xdist's controller goes on after a collection error (it runs the tests, exit status 1): the update still
    writes nothing, as without -n, where pytest stops."""
    monkeypatch.delenv("CTRL_C", raising=False)
    write_cases(pytester, "import os\n" + STOPPED)
    if not args:
        pytester.makepyfile(test_broken="import no_such_module_here\n")
    (pytester.path / "baseline.json").write_text(PLANTED)
    r = pytester.runpytest_subprocess("--export-check", "-p", "no:cacheprovider", "-n", "2", "--export-baseline",
                                      "baseline.json", "--export-baseline-update", *args)
    assert r.ret != 0
    assert (pytester.path / "baseline.json").read_text() == PLANTED
    r.stdout.fnmatch_lines(["baseline baseline.json not updated: the run stopped early (*); nothing was written*"])


def test_a_strict_xpass_fails_an_update_too(pytester):
    """An update records failures; an unexpected pass of the marker's ``xfail=`` is none: it still fails (#24)."""
    write_cases(pytester, LIN + '''
@pytest.mark.exportable(xfail={"compare": "planted: it used to disagree"})
def test_clean():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)
''')
    r = run(pytester, "--export-baseline-update")
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*XPASS(strict): expected to fail (planted: it used to disagree)*remove the xfail*"])
    assert read(pytester)["failures"] == {}


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


# ---- signatures (version 2) -------------------------------------------------------------------

def _write(pytester, failures, version=2):
    (pytester.path / "baseline.json").write_text(json.dumps({"version": version, "failures": failures,
                                                             "non_core_ops": {}}))


def _report_stage(pytester, name, stage):
    data = json.loads((pytester.path / "r.json").read_text())
    return [c for c in data["cases"] if c["nodeid"].endswith(name)][0]["stages"][stage]


def test_update_records_the_signature_of_each_failure(suite):
    r = run(suite, "--export-baseline-update", "--export-report", "r.json")
    assert r.ret == 0, r.stdout.str()
    entry = read(suite)["failures"]["test_cases.py::test_broken"]["compare"]
    stage = _report_stage(suite, "test_broken", "compare")
    # the rule: the stage's own signature, else its exception type, else its first line with digits as '#'
    assert entry["signature"] == bl.signature_of(stage) and entry["signature"]
    assert not any(ch.isdigit() for ch in entry["signature"]) and len(entry["signature"]) <= 120
    r = run(suite)  # the same failure again: known
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=1, xfailed=1)


@pytest.mark.slow
def test_a_listed_stage_that_fails_differently_is_a_new_failure(suite):
    assert run(suite, "--export-baseline-update", "--export-report", "r.json").ret == 0
    now = bl.signature_of(_report_stage(suite, "test_broken", "compare"))
    _write(suite, {"test_cases.py::test_broken": {"compare": {"reason": "it used to raise",
                                                              "signature": "GuardOnDataDependentSymNode"}}})
    r = run(suite)
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines([f"*new failure in compare: different failure than the baseline's: "
                            f"was GuardOnDataDependentSymNode, now {now}*",
                            "*new: test_cases.py::test_broken: new failure in compare (different failure*"])
    # an update accepts the new signature, and the gate passes again
    assert run(suite, "--export-baseline-update").ret == 0
    assert read(suite)["failures"]["test_cases.py::test_broken"]["compare"]["signature"] == now
    assert run(suite).ret == 0


@pytest.mark.parametrize("version, entry", [(1, "an old reason"), (2, {"reason": "an old reason"})])
def test_an_entry_without_signature_matches_any_failure_of_its_stage(suite, version, entry):
    """Version-1 files (reason strings) and entries whose signature was left out keep the legacy match."""
    _write(suite, {"test_cases.py::test_broken": {"compare": entry}}, version=version)
    r = run(suite, "-rx")
    assert r.ret == 0, r.stdout.str()
    r.assert_outcomes(passed=1, xfailed=1)
    r.stdout.fnmatch_lines(["*known failure in the baseline: compare (an old reason)*"])
    # an update of a subset keeps the unrun entry as it was, and writes version 2
    r = run(suite, "--export-baseline-update", "-k", "test_ok")
    assert r.ret == 0, r.stdout.str()
    assert read(suite) == {"version": 2, "non_core_ops": {},
                           "failures": {"test_cases.py::test_broken": {"compare": {"reason": "an old reason"}}}}


# ---- errors are never expected ----------------------------------------------------------------

HANGING = '''
''' + HANGS + '''

@pytest.mark.exportable(timeout=2)  # the hanging case alone: a loaded machine must not time out the other
def test_hangs():
    return Hangs(), (torch.ones(2),)

@pytest.mark.exportable
def test_fine():
    return torch.nn.ReLU(), (torch.ones(2),)
'''


@pytest.mark.slow
def test_an_error_stage_fails_even_when_the_baseline_lists_it_and_is_never_recorded(pytester):
    write_cases(pytester, HANGING)
    # a legacy entry (no signature): it would match any outcome of `export` if errors were baselined
    _write(pytester, {"test_cases.py::test_hangs": {"export": "timed out"}}, version=1)
    r = run(pytester, "--export-timeout", "120", "--export-report", "r.json")
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(passed=1, failed=1)
    assert _report_stage(pytester, "test_hangs", "export")["status"] == "error"
    r.stdout.fnmatch_lines(["*test_cases.py::test_hangs [[]export]: error: the harness could not decide; "
                            "errors are never expected or baselined*",
                            "*error (never baselined): test_cases.py::test_hangs [[]export]*"])
    # update mode: the item still fails, and the error is not written into the baseline; the entry it had is
    # kept as it was, since a stage that erred confirms nothing (#32)
    for before, after in (({"export": "timed out"}, {"export": {"reason": "timed out"}}), ({}, None)):
        _write(pytester, {"test_cases.py::test_hangs": before} if before else {}, version=1)
        r = run(pytester, "--export-timeout", "120", "--export-baseline-update")
        assert r.ret == 1, r.stdout.str()
        r.assert_outcomes(passed=1, failed=1)
        r.stdout.fnmatch_lines(["*errors are never expected or baselined*"])
        assert read(pytester) == {"version": 2, "non_core_ops": {},
                                  "failures": {"test_cases.py::test_hangs": after} if after else {}}


def test_a_case_level_error_is_never_recorded(pytester):
    """A case that cannot be built is an error (outcome ``error``, no stages): an update records nothing, and
    a legacy version-1 ``case`` entry is dropped."""
    write_cases(pytester, '''
@pytest.mark.exportable
def test_cannot_build():
    raise KeyError("no such checkpoint")
''')
    _write(pytester, {"test_cases.py::test_cannot_build": {"case": "KeyError"}}, version=1)
    r = run(pytester, "--export-baseline-update", "--export-report", "r.json")
    assert r.ret == 1, r.stdout.str()
    r.assert_outcomes(failed=1)
    assert json.loads((pytester.path / "r.json").read_text())["cases"][0]["outcome"] == "error"
    assert read(pytester)["failures"] == {}
    r.stdout.fnmatch_lines(["*error (never baselined): test_cases.py::test_cannot_build [[]case]*"])


def test_judge_and_update_never_treat_errors_as_known():
    case = {"nodeid": "t.py::c", "outcome": "failed",
            "stages": {"export": {"status": "error", "message": "timed out after 2 s"},
                       "compare": {"status": "failed", "message": "mismatch at 3 of 16", "exception": "Mismatch"}}}
    base = bl.Baseline({"t.py::c": {"export": {"reason": "timed out"}, "compare": {"reason": "r"}}})
    assert bl.failures_of(case) == {"compare": {"reason": "mismatch at 3 of 16", "signature": "Mismatch"}}
    assert bl.errors_of(case) == ["export"]
    assert bl.judge(case, base) == {"known": {"compare": "r"}}  # export: neither known, new nor stale
    # the errored stage confirms nothing: its entry is kept as it was, and the error itself is not recorded (#32)
    assert bl.updated(base, [case], None).failures == {"t.py::c": {"export": {"reason": "timed out"},
                                                                   "compare": bl.failures_of(case)["compare"]}}
    crashed = {"nodeid": "t.py::d", "outcome": "error", "stages": {}, "error": "the worker crashed"}
    assert bl.failures_of(crashed) == {} and bl.errors_of(crashed) == ["case"]


def test_signature_rule():
    assert bl.signature_of({"status": "failed", "signature": "mismatch", "exception": "X", "message": "m"}) == "mismatch"
    assert bl.signature_of({"status": "failed", "exception": "UserError", "message": "m"}) == "UserError"
    msg = "\n  size 17 is outside Dim('b', min=2, max=64) " + "x" * 200 + "\nmore"
    sig = bl.signature_of({"status": "failed", "message": msg})
    assert sig.startswith("size ## is outside Dim('b', min=#, max=##) xxx") and len(sig) == 120


def test_a_missing_baseline_is_a_usage_error_before_any_case_runs(pytester):
    write_cases(pytester, "@pytest.mark.exportable\ndef test_relu():\n    return torch.nn.ReLU(), (torch.ones(2),)\n")
    result = pytester.runpytest("--export-check", "--export-baseline", "ci/missing.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--export-baseline ci/missing.json: no such file; create it with "
                                 "--export-baseline-update*"])
    assert "passed" not in result.stdout.str() and "test_relu" not in result.stdout.str()


def test_the_summary_counts_items_as_pytest_does(pytester):
    write_cases(pytester, '''
''' + SHORTCUT + '''
@pytest.mark.exportable
def test_known():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_fine():
    return torch.nn.ReLU(), (torch.ones(3),)
''')
    update = pytester.runpytest("--export-check", "--export-baseline", "b.json", "--export-baseline-update",
                                "-p", "no:cacheprovider")
    update.assert_outcomes(passed=1, xfailed=1)
    result = pytester.runpytest("--export-check", "--export-baseline", "b.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, xfailed=1)
    # the known failure is an expected one: the `(case)` row says what pytest says, 1 passed and 1 xfailed, the
    # xfail a known one (#26: columns passed, failed, known, skipped, xfailed)
    result.stdout.re_match_lines([r"\(case\)\s+\|\s+1\s+\|\s+0\s+\|\s+1\s+\|\s+0\s+\|\s+0$"])


# ---- an update keeps what no stage confirmed (#32) ----------------------------------------------------------------

GUARDED = '''
class EvenOnly(torch.nn.Module):
    def forward(self, x):
        if os.environ.get("BREAK_EXPORT") and x.sum() > 0:  # a branch on data: export fails
            return x - 1
        if not torch.compiler.is_exporting() and x.shape[0] % 2:
            raise ValueError("odd batch")  # in range, refused by eager: guards fails
        return x * 2

@pytest.fixture
def weights():
    if os.environ.get("FLAKY_FIXTURE"):
        raise ConnectionError("planted: the download failed")
    return 2

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}})
def test_x(weights):
    if os.environ.get("FLAKY_TEST"):
        raise ConnectionError("planted: the download failed")
    return EvenOnly(), (torch.randn(8),)
'''
GUARDS_KNOWN = json.dumps({"version": 2, "non_core_ops": {},
                           "failures": {"test_cases.py::test_x": {"guards": {"reason": "odd batch"}}}})


@pytest.mark.parametrize("how, env, args", [
    ("--export-skip-stages guards", None, ("--export-skip-stages", "guards")),
    ("skipped behind a new export failure", "BREAK_EXPORT", ()),
    ("a fixture raised", "FLAKY_FIXTURE", ()),
    ("the test raised while building its case", "FLAKY_TEST", ()),
])
def test_an_update_keeps_the_entries_of_stages_that_reached_no_verdict(pytester, monkeypatch, how, env, args):
    """Only a stage that ran and passed removes its entry; one skipped, not run, or behind a case that could not be
    built confirms nothing: the next full run still finds its failure known, not new."""
    for var in ("BREAK_EXPORT", "FLAKY_FIXTURE", "FLAKY_TEST"):
        monkeypatch.delenv(var, raising=False)
    write_cases(pytester, "import os\n" + GUARDED)
    (pytester.path / "baseline.json").write_text(GUARDS_KNOWN)
    quick = ("--export-skip-stages", "fuzz,retrace")
    if env:
        monkeypatch.setenv(env, "1")
    r = run(pytester, "--export-baseline-update", *quick, *args)
    assert r.ret == (1 if env and env.startswith("FLAKY") else 0), r.stdout.str()
    entries = read(pytester)["failures"]["test_cases.py::test_x"]
    assert entries["guards"] == {"reason": "odd batch"}, how
    assert set(entries) == ({"guards", "export"} if env == "BREAK_EXPORT" else {"guards"})
    if env:
        monkeypatch.delenv(env)
    if env == "BREAK_EXPORT":  # export is fixed again: its new entry would be stale, which is another story
        (pytester.path / "baseline.json").write_text(GUARDS_KNOWN)
    r = run(pytester, *quick)  # the next full run: guards fails as it did, and the baseline still knows it
    assert r.ret == 0 and "new: " not in r.stdout.str(), r.stdout.str()
    r.assert_outcomes(xfailed=1)
    # and a stage that ran and passed does remove its entry
    (pytester.path / "baseline.json").write_text(json.dumps(
        {"version": 2, "non_core_ops": {}, "failures": {"test_cases.py::test_x": {
            "guards": {"reason": "odd batch"}, "serde": {"reason": "it used to fail"}}}}))
    assert run(pytester, "--export-baseline-update", *quick).ret == 0
    assert set(read(pytester)["failures"]["test_cases.py::test_x"]) == {"guards"}


def test_a_non_core_op_whose_decomposition_did_not_run_is_kept_and_not_stale():
    """decomp skipped behind a failed export lists no ops: its case still owns its non-core op (#32)."""
    from pytest_export.gate.scope import Scope

    skipped = {"nodeid": "t.py::bn", "outcome": "failed",
               "stages": {"export": {"status": "failed", "message": "m"}, "decomp": {"status": "skipped"}}}
    base = bl.Baseline({}, {"aten.bn.default": ["t.py::bn"]})
    assert bl.session_stale(base, [skipped], Scope()) == []
    assert bl.updated(base, [skipped], Scope()).non_core_ops == {"aten.bn.default": ["t.py::bn"]}
    ran = {"nodeid": "t.py::bn", "outcome": "passed", "stages": {"decomp": {"status": "passed", "non_core": []}}}
    assert bl.session_stale(base, [ran], Scope()) == [
        "non-core op aten.bn.default: no case carries it after decomposition any more"]
    assert bl.updated(base, [ran], Scope()).non_core_ops == {}
