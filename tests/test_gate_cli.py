"""python -m pytest_export gate|durations on hand-written reports and baselines (fast; no torch, no pytest run).

Each rule of the in-run gate is planted in a report's case dicts and must come out of the command with the in-run
gate's text and exit status; the end-to-end equality with a real unsharded run is in ``test_shards.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_export.__main__ import main
from pytest_export.gate import baseline as bl

SIG = "mismatch"
XPASS = "XPASS(strict): expected to fail (planted) but passed; remove the xfail entry"  # as the runner words it


def case(nodeid: str, outcome: str = "passed", non_core: tuple[str, ...] = (), **stages: str) -> dict:
    """A report's case dict: ``compare="failed"`` gives that stage that status (failed ones with a signature)."""
    out = {"nodeid": nodeid, "outcome": outcome, "stages": {}}
    for name, status in stages.items():
        out["stages"][name] = {"status": status, "message": f"{name}: planted {status}", "duration": 0.1}
        if status == "failed":
            out["stages"][name]["signature"] = SIG
        if status == "xpassed":
            out["stages"][name]["message"] = XPASS
    out["stages"]["decomp"] = {"status": "passed", "non_core": list(non_core)}
    return out


def write(tmp_path, cases, failures=None, non_core_ops=None, version=2, scope=None):
    report = {"version": 1, "torch": "2.13.0+cpu", "cases": cases, **({"scope": scope} if scope else {})}
    (tmp_path / "report.json").write_text(json.dumps(report))
    (tmp_path / "baseline.json").write_text(json.dumps({"version": version, "failures": failures or {},
                                                        "non_core_ops": non_core_ops or {}}))


def gate(tmp_path, capsys, *args):
    rc = main(["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "baseline.json"), *args])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


KNOWN = {"t.py::broken": {"compare": {"reason": "planted", "signature": SIG}}}
BN = "aten._native_batch_norm_legit_functional.default"


@pytest.mark.parametrize("cases, failures, ops, rc, lines", [
    # known failures and known non-core ops: nothing to say
    ([case("t.py::ok", export="passed"), case("t.py::broken", "failed", compare="failed"),
      case("t.py::bn", non_core=(BN,), export="passed")], KNOWN, {BN: ["t.py::bn"]}, 0,
     ["gate passed: nothing new or stale, 1 known failure; 3 cases of {report} against the baseline {baseline}"]),
    # a failure the baseline does not list
    ([case("t.py::ok", "failed", compare="failed")], {}, {}, 1,
     ["new: t.py::ok: new failure in compare", "gate failed: 1 case with a new failure or non-core op; 1 case of "
      "{report} against the baseline {baseline}"]),
    # a listed stage that fails differently
    ([case("t.py::broken", "failed", compare="failed")],
     {"t.py::broken": {"compare": {"reason": "old", "signature": "GuardOnDataDependentSymNode"}}}, {}, 1,
     ["new: t.py::broken: new failure in compare (different failure than the baseline's: was "
      "GuardOnDataDependentSymNode, now mismatch)"]),
    # a non-core op the baseline does not list
    ([case("t.py::bn", non_core=(BN,), export="passed")], {}, {}, 1, [f"new: t.py::bn: new non-core op {BN}"]),
    # errors are never expected, listed or not
    ([case("t.py::broken", "failed", compare="error")], KNOWN, {}, 1,
     ["error (never baselined): t.py::broken [compare]: the harness could not decide; fix what stopped it and rerun"]),
    ([{"nodeid": "t.py::crashed", "outcome": "error", "stages": {}, "error": "the worker running it crashed"}], {}, {},
     1, ["error (never baselined): t.py::crashed [case]: the harness could not decide; fix what stopped it and rerun",
         "gate failed: 1 error; 1 case of {report} against the baseline {baseline}"]),
    # a listed stage that passes now
    ([case("t.py::broken", compare="passed")], KNOWN, {}, 1,
     ["stale: remove it: t.py::broken [compare]: passes now"]),
    # entries of a case that ran on no shard, and an op no case carries
    ([case("t.py::ok", export="passed")], {**KNOWN, "t.py::gone": {"serde": {"reason": "r"}}}, {BN: ["t.py::gone"]}, 1,
     ["stale: remove it: t.py::broken [compare]: the case did not run (removed or renamed?)",
      "stale: remove it: t.py::gone [serde]: the case did not run (removed or renamed?)",
      f"stale: remove it: non-core op {BN}: no case carries it after decomposition any more",
      "gate failed: 3 stale entries; 1 case of {report} against the baseline {baseline}"]),
    # a strict XPASS fails its test in the run; no baseline line names it, so the gate says it
    ([case("t.py::xp", "failed", compare="xpassed")], {}, {}, 1,
     [f"failed: t.py::xp [compare]: xpassed: {XPASS}",
      "gate failed: 1 other failing case; 1 case of {report} against the baseline {baseline}"]),
])
def test_each_rule_of_the_in_run_gate(tmp_path, capsys, cases, failures, ops, rc, lines):
    write(tmp_path, cases, failures, ops)
    got, out, err = gate(tmp_path, capsys)
    assert got == rc, out
    assert out[0] == f"export baseline {tmp_path / 'baseline.json'}"
    for line in lines:
        assert line.format(report=tmp_path / "report.json", baseline=tmp_path / "baseline.json") in out, out
    assert not err


def test_the_gate_lines_are_the_in_run_gates(tmp_path, capsys):
    """Every line before the verdict is one ``gate.judge.finish`` writes at the end of a run over the same judged
    cases."""
    from pytest_export.declare.options import SessionOptions
    from pytest_export.gate.judge import finish, judge
    from pytest_export.results import CaseResult

    cases = [case("t.py::new", "failed", compare="failed"), case("t.py::broken", compare="passed"),
             case("t.py::bn", non_core=(BN,), export="passed")]
    failures = {**KNOWN, "t.py::gone": {"serde": {"reason": "r"}}}
    write(tmp_path, cases, failures)
    rc, out, _ = gate(tmp_path, capsys)
    base = bl.Baseline({n: dict(s) for n, s in failures.items()})
    options = SessionOptions(check=True, baseline="baseline.json")
    judged = []
    for c in sorted(cases, key=lambda c: c["nodeid"]):  # as the items of a run (items.settle -> gate.judge) ...
        r = CaseResult.from_json(c)
        judge(r, base, options)
        judged.append(r.to_json())
    assert rc == 1  # ... then the session's end, over the whole suite
    assert out[1:-1] == finish(base, judged, [""], options).messages


def test_warn_stale_passes_with_warnings_but_never_hides_new_failures(tmp_path, capsys):
    write(tmp_path, [case("t.py::broken", compare="passed")], KNOWN)
    rc, out, _ = gate(tmp_path, capsys, "--warn-stale")
    assert rc == 0
    assert out[1:] == ["stale (warning): t.py::broken [compare]: passes now",
                       f"gate passed: 1 stale entry (a warning), 0 known failures; 1 case of "
                       f"{tmp_path / 'report.json'} against the baseline {tmp_path / 'baseline.json'}"]
    write(tmp_path, [case("t.py::broken", compare="passed"), case("t.py::new", "failed", compare="failed")], KNOWN)
    rc, out, _ = gate(tmp_path, capsys, "--warn-stale")
    assert rc == 1 and "new: t.py::new: new failure in compare" in out


def test_a_verdict_from_a_shards_run_is_judged_again(tmp_path, capsys):
    """The case's ``baseline`` field says what its shard's gate found against the shard's baseline; the command
    judges the case against the baseline it is given."""
    c = case("t.py::broken", "failed", compare="failed")
    c["baseline"] = {"new": {"compare": "not in the baseline then"}}
    write(tmp_path, [c], KNOWN)
    rc, out, _ = gate(tmp_path, capsys)
    assert rc == 0 and not any(line.startswith("new: ") for line in out), out


EMPTY = '{"version": 1, "cases": []}'


@pytest.mark.parametrize("report, baseline, message", [
    (None, "{}", "report.json: no such report; write it with pytest --export-check --export-report PATH, or merge "
                 "the shards' reports with python -m pytest_export merge"),
    ('{"cases": 3}', "{}", "report.json: not a pytest-export report"),
    ("{not json", "{}", "report.json: Expecting property name"),
    ('{"version": 1, "cases": [{"outcome": "passed"}]}', "{}", 'report.json: cases[0]: expected an object with a '
                                                               '"nodeid", got one without "nodeid"; correct the field'),
    ('{"version": 1, "cases": [{"nodeid": "t.py::a", "stages": {"export": "passed"}}]}', "{}",
     'cases[0] (t.py::a): stages.export: expected an object with a "status", got "passed"'),
    (EMPTY, None, "--baseline {baseline}: no such file; create it with --export-baseline-update"),
    (EMPTY, "{not json", "--baseline {baseline}: not readable JSON"),
    (EMPTY, '{"version": 7}', '--baseline {baseline}: expected a JSON object with "version": 2'),
    (EMPTY, '{"version": 2, "failures": {"t.py::a": {"exprot": {"reason": "r"}}}}',
     "--baseline {baseline}: failures['t.py::a']['exprot']: no stage is called 'exprot' (did you mean 'export'?); "
     "the stages are eager, export, compare"),
    ('{"version": 1, "cases": [], "scope": {"split": {"splits": "2"}}}', "{}",
     'report.json: scope.split must be {{"splits": int, "groups": [int, ...]}} or null'),
])
def test_a_missing_or_malformed_file_is_a_usage_error(tmp_path, capsys, report, baseline, message):
    if report is not None:
        (tmp_path / "report.json").write_text(report)
    if baseline is not None:
        (tmp_path / "baseline.json").write_text(baseline)
    with pytest.raises(SystemExit) as exc:  # a report that cannot be read exits at once; the baseline's reader returns
        raise SystemExit(main(["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "baseline.json")]))
    assert exc.value.code == 4
    err = capsys.readouterr().err
    assert message.format(baseline=tmp_path / "baseline.json") in err, err


def test_markdown_for_the_job_page(tmp_path, capsys, monkeypatch):
    write(tmp_path, [case("t.py::new", "failed", compare="failed")], {})
    md = tmp_path / "summary.md"
    assert gate(tmp_path, capsys, "--markdown", str(md))[0] == 1
    text = md.read_text()
    # the head tells the gate's own judgement against the baseline (the report's run had none: "failing")
    assert text.startswith("### torch.export check (torch 2.13.0+cpu): 1 case: 1 new failure (not in the baseline")
    assert "- new: t.py::new: new failure in compare\n- gate failed: 1 case with a new failure" in text
    # like --export-summary-md: by default appended to $GITHUB_STEP_SUMMARY, and never replacing what is there
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    gate(tmp_path, capsys)
    assert step.read_text().startswith("earlier step\n### torch.export check")
    gate(tmp_path, capsys, "--markdown", str(step))
    assert step.read_text().count("### torch.export check") == 2
    gate(tmp_path, capsys, "--markdown", str(md))  # another file: written, and the job page is left alone
    assert step.read_text().count("### torch.export check") == 2 and md.read_text() == text
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    md.unlink()
    gate(tmp_path, capsys)
    assert not md.exists()


def test_entry_point_exit_statuses_and_no_torch(tmp_path):
    write(tmp_path, [case("t.py::broken", "failed", compare="failed")], KNOWN)
    # the gate job installs the package alone (--no-deps): the report commands import neither torch nor pytest
    code = ("import sys; from pytest_export.__main__ import main; rc = main(sys.argv[1:]); "
            "print(any(m.split('.')[0] in ('torch', 'pytest', '_pytest') for m in sys.modules)); sys.exit(rc)")
    argv = ["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "baseline.json")]
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "False", r.stdout + r.stderr
    (tmp_path / "baseline.json").write_text('{"version": 2}')
    r = subprocess.run([sys.executable, "-m", "pytest_export", *argv], capture_output=True, text=True)
    assert r.returncode == 1 and "new: t.py::broken: new failure in compare" in r.stdout
    r = subprocess.run([sys.executable, "-m", "pytest_export", *argv[:2], "--baseline", str(tmp_path / "none.json")],
                       capture_output=True, text=True)
    assert r.returncode == 4 and "none.json: no such file" in r.stderr


# ---- the report's scope: what the in-run gate decided from (#24) ---------------------------------------------

GONE = {"t.py::gone": {"serde": {"reason": "r"}}}
GONE_LINE = "stale: remove it: t.py::gone [serde]: the case did not run (removed or renamed?)"


@pytest.mark.parametrize("scope, lines", [
    ({}, [GONE_LINE]),  # a whole run of its rootdir: what a report without a scope is taken for
    ({"deselected": ["t.py::gone"]}, []),  # a conftest, -k, --export-tags
    ({"skipped": ["t.py::gone"]}, []),  # skipif, importorskip
    ({"skipped": ["t.py"]}, []),  # a module-level importorskip
    ({"ignored": ["t.py"]}, []),  # --ignore, collect_ignore
    ({"errors": ["t.py"]}, []),  # a file that cannot be imported (--continue-on-collection-errors): see below
    ({"folders": None}, []),  # -k, a file, a test id
    ({"folders": ["other"]}, []),  # pytest other/
    ({"split": {"splits": 2, "groups": [1, 2]}}, [GONE_LINE]),  # the merged shards: the whole run
])
def test_the_reports_scope_says_which_absent_case_is_gone(tmp_path, capsys, scope, lines):
    write(tmp_path, [case("t.py::ok", export="passed")], GONE, scope=scope)
    rc, out, _ = gate(tmp_path, capsys)
    assert rc == (1 if lines or "errors" in scope else 0) and [x for x in out if x.startswith("stale")] == lines, out


@pytest.mark.parametrize("scope, line, found", [
    # xdist runs the tests after a collection error; pytest exits 1, and so must the gate (#32)
    ({"errors": ["tests/test_b.py"], "stopped": "1 error during collection: tests/test_b.py"},
     "incomplete run: {report}: 1 collection error: pytest could not collect tests/test_b.py (an import error?), so "
     "its cases did not run, and the run failed on it", "1 collection error"),
    ({"errors": ["tests/test_b.py", "tests/test_c.py"]},  # --continue-on-collection-errors: it still exits 1
     "incomplete run: {report}: 2 collection errors: pytest could not collect tests/test_b.py, tests/test_c.py (an "
     "import error?), so their cases did not run, and the run failed on it", "2 collection errors"),
    ({"stopped": "stopping after 1 failures"},  # -x, --maxfail
     "incomplete run: {report}: the run stopped early (stopping after 1 failures): it did not run every case it "
     "selected", "the run stopped early"),
])
def test_a_run_that_did_not_collect_or_run_everything_never_passes(tmp_path, capsys, scope, line, found):
    write(tmp_path, [case("t.py::ok", export="passed")], {}, scope=scope)
    rc, out, _ = gate(tmp_path, capsys)
    report = tmp_path / "report.json"
    assert rc == 1 and out[0] == line.format(report=report), out
    assert out[-1] == f"gate failed: {found}; 1 case of {report} against the baseline {tmp_path / 'baseline.json'}"


def test_a_merge_short_of_a_shard_is_partial(tmp_path, capsys):
    """Each shard's report records its group: a merge without one fails the gate, naming it, instead of calling
    its cases' entries stale."""
    shard = {"version": 1, "torch": "2.13.0+cpu", "cases": [case("t.py::ok", export="passed")],
             "scope": {"split": {"splits": 3, "groups": [1]}, "selected": ["t.py::ok"]}}
    (tmp_path / "shard-1.json").write_text(json.dumps(shard))
    shard["scope"]["split"]["groups"] = [3]
    shard["cases"] = [case("t.py::other", export="passed")]
    (tmp_path / "shard-3.json").write_text(json.dumps(shard))
    assert main(["merge", "-o", str(tmp_path / "report.json"), str(tmp_path / "shard-1.json"),
                 str(tmp_path / "shard-3.json")]) == 0
    merge_out = capsys.readouterr().out
    assert "(partial: a pytest-split group has no finished report)" in merge_out
    (tmp_path / "baseline.json").write_text(json.dumps({"version": 2, "failures": GONE}))
    rc, out, _ = gate(tmp_path, capsys)
    assert rc == 1 and not any(x.startswith("stale") for x in out), out
    assert out[0].startswith(f"partial report: {tmp_path / 'report.json'}: no finished report of pytest-split "
                             "group 2 of 3; 2 cases recorded")


@pytest.mark.parametrize("mark, failing, lines", [
    ({"strict": False}, False, ["xfailed by @pytest.mark.xfail: t.py::new: new failure in compare"]),
    ({"strict": True}, False, ["xfailed by @pytest.mark.xfail: t.py::new: new failure in compare"]),
    # the gate fails an item with pytest.fail, which a raises= filter does not name: pytest fails it
    ({"strict": False, "raises": True}, True, ["new: t.py::new: new failure in compare"]),
])
def test_pytests_xfail_mark_from_the_scope(tmp_path, capsys, mark, failing, lines):
    write(tmp_path, [case("t.py::new", "failed", compare="failed")], {}, scope={"xfail": {"t.py::new": mark}})
    rc, out, _ = gate(tmp_path, capsys)
    assert rc == int(failing) and out[1:-1] == lines, out


def test_a_strict_xfail_mark_on_a_passing_case_fails(tmp_path, capsys):
    write(tmp_path, [case("t.py::ok", export="passed")], {}, scope={"xfail": {"t.py::ok": {"strict": True}}})
    rc, out, _ = gate(tmp_path, capsys)
    assert rc == 1 and out[1] == "failed: t.py::ok: XPASS(strict): it passes, and its @pytest.mark.xfail is strict"


# ---- durations ----------------------------------------------------------------------------------------

def report_with(path, durations):
    cases = [{"nodeid": n, "outcome": "passed", "stages": {}, **({} if d is None else {"duration": d})}
             for n, d in durations.items()]
    path.write_text(json.dumps({"version": 1, "torch": "2.13.0+cpu", "cases": cases}))
    return str(path)


def test_durations_are_written_in_pytest_splits_format(tmp_path, capsys):
    a = report_with(tmp_path / "shard-1.json", {"t.py::b": 2.5, "t.py::a": 0.25, "t.py::a#2": None})
    b = report_with(tmp_path / "shard-2.json", {"t.py::c[strict-cpu]": 1.0})
    out = tmp_path / ".test_durations"
    assert main(["durations", a, b, "-o", str(out)]) == 0
    assert "wrote the durations of 3 cases to" in capsys.readouterr().out
    expected = {"t.py::a": 0.25, "t.py::b": 2.5, "t.py::c[strict-cpu]": 1.0}
    # what pytest-split's --store-durations writes: json.dump(durations, f, sort_keys=True, indent=4)
    assert out.read_text() == json.dumps(expected, sort_keys=True, indent=4) + "\n"


def test_durations_merge_into_the_file_as_pytest_split_does(tmp_path, capsys):
    out = tmp_path / ".test_durations"
    out.write_text(json.dumps({"t.py::a": 9.0, "t.py::plain_test": 0.5}))  # a test that is no export case stays
    assert main(["durations", report_with(tmp_path / "r.json", {"t.py::a": 1.0}), "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == {"t.py::a": 1.0, "t.py::plain_test": 0.5}
    assert "(kept 1 other test it had)" in capsys.readouterr().out
    out.write_text(json.dumps([["t.py::old", 3.0]]))  # pytest-split's older list of pairs, read as it reads it
    assert main(["durations", str(tmp_path / "r.json"), "-o", str(out)]) == 0
    assert json.loads(out.read_text()) == {"t.py::a": 1.0, "t.py::old": 3.0}
    out.write_text('"junk"')
    assert main(["durations", str(tmp_path / "r.json"), "-o", str(out)]) == 1
    assert "not a pytest-split durations file" in capsys.readouterr().err
    assert out.read_text() == '"junk"'  # left as it was


def test_durations_of_a_report_without_them_warn(tmp_path, capsys):
    out = tmp_path / ".test_durations"
    assert main(["durations", report_with(tmp_path / "old.json", {"t.py::a": None}), "-o", str(out)]) == 0
    assert "old.json: no case has a duration" in capsys.readouterr().err
    assert json.loads(out.read_text()) == {}


def test_the_readmes_commands_are_the_commands():
    """Every ``python -m pytest_export`` line of the README and docs/ (the CI matrix of "Many machines" included)
    parses."""
    import re
    import shlex
    from pathlib import Path

    from pytest_export.__main__ import make_parser

    root = Path(__file__).resolve().parent.parent
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    code = "\n".join(re.findall(r"```(?:bash|yaml)\n(.*?)```", text, re.S))
    lines = re.findall(r"python -m pytest_export (.*?)(?:  #.*)?$", code, re.M)
    commands = {}
    for line in lines:
        argv = shlex.split(line)
        commands.setdefault(argv[0], []).append(make_parser().parse_args(argv))
    assert set(commands) == {"merge", "show", "diff", "gate", "durations", "table"}, lines
    ci = (root / "docs" / "ci.md").read_text(encoding="utf-8")
    matrix = ci.split("\n## Many machines\n", 1)[1].split("\n## ", 1)[0]
    assert "--markdown \"$GITHUB_STEP_SUMMARY\"" in matrix and "durations report.json -o .test_durations" in matrix
    assert "--splits 3 --group ${{ matrix.group }}" in matrix and "| 3 shards, `-n 1` each |" in matrix
