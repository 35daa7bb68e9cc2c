"""--export-report's case lines (issue #23: a run stopped from outside keeps what it found).

Beside ``report.json`` the controller writes ``report.jsonl`` as the run goes, one flushed JSON line per event; a
run killed hard (SIGKILL) leaves the lines of every case that finished, and ``python -m pytest_export gate`` /
``merge`` read them as a partial report. SIGTERM (a CI job's timeout) ends the run as Ctrl-C does, so the final
report is still written, marked interrupted. Every wait here is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_export.__main__ import main
from pytest_export.report.files import lines_path, read_lines
from tests.helpers import HANGS, LIN, SHORTCUT, run_check, write_cases

CASES = LIN + SHORTCUT + HANGS + '''
@pytest.mark.exportable
def test_first():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

@pytest.mark.exportable
def test_second():
    if os.environ.get("PYTEST_EXPORT_TEST_HANG"):
        return Hangs(), (torch.ones(2),)
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable(tags=("small",))
def test_third():
    torch.manual_seed(1)
    return Lin().eval(), (torch.randn(4, 3),)
'''

WAIT_S = 300  # for a subprocess run to reach its hanging case: start, import torch, one export (2 shared cores)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def kinds(recs: list[dict], kind: str) -> list[dict]:
    return [r for r in recs if r["kind"] == kind]


def without_duration(case: dict) -> dict:
    return {k: v for k, v in case.items() if k != "duration"}


# ---- the file, beside the report ------------------------------------------------------------------------
@pytest.mark.parametrize("report, lines", [
    ("export-report.json", "export-report.jsonl"),
    ("out/shard-1.json", "out/shard-1.jsonl"),
    ("report", "report.jsonl"),
    ("report.jsonl", "report.jsonl.jsonl"),
])
def test_lines_path(report, lines):
    assert lines_path(report) == Path(lines)


def test_one_line_per_finished_case_agreeing_with_the_report(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_EXPORT_TEST_HANG", raising=False)
    write_cases(pytester, CASES)
    before = signal.getsignal(signal.SIGTERM)
    result, data = run_check(pytester, "-p", "no:xdist")
    result.assert_outcomes(passed=2, failed=1)  # test_second's compare fails
    assert signal.getsignal(signal.SIGTERM) == before  # the session put SIGTERM's handler back
    assert f"case lines: {Path('report.jsonl')}" in result.stdout.str()
    recs = records(pytester.path / "report.jsonl")

    header, finish = recs[0], recs[-1]
    assert header["kind"] == "session-start" and header["version"] == 1 and header["torch"] == data["torch"]
    assert header["options"]["report"] == "report.json" and "--export-check" in header["args"]
    assert finish == {"kind": "session-finish", "exitstatus": 1, "interrupted": False, "cases": 3}
    assert len(kinds(recs, "session-start")) == len(kinds(recs, "session-finish")) == 1

    # one case line per case, in the report's wire format; its test's duration on the case-end line
    lines = {r["case"]["nodeid"]: r["case"] for r in kinds(recs, "case")}
    assert len(kinds(recs, "case")) == len(lines) == len(data["cases"]) == 3
    for case in data["cases"]:
        assert lines[case["nodeid"]] == without_duration(case)
    ends = {r["nodeid"]: r["duration"] for r in kinds(recs, "case-end")}
    assert ends == {c["nodeid"]: c["duration"] for c in data["cases"]}
    assert [r["nodeid"] for r in kinds(recs, "case-start")] == [c["nodeid"] for c in data["cases"]]

    assert data["interrupted"] is False and data["partial"] is False and "unfinished" not in data
    built, notes = read_lines(pytester.path / "report.jsonl")
    assert notes == [] and built["cases"] == data["cases"] and built["partial"] is False


def test_a_new_run_starts_its_lines_afresh(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_EXPORT_TEST_HANG", raising=False)
    write_cases(pytester, CASES)
    run_check(pytester, "-p", "no:xdist")
    run_check(pytester, "-p", "no:xdist", "-k", "third")
    recs = records(pytester.path / "report.jsonl")
    assert len(kinds(recs, "session-start")) == 1
    assert [r["case"]["nodeid"] for r in kinds(recs, "case")] == ["test_cases.py::test_third"]


def test_no_lines_without_a_report(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_EXPORT_TEST_HANG", raising=False)
    write_cases(pytester, CASES)
    pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "first")
    assert not list(pytester.path.glob("*.jsonl"))


# ---- merge and gate on case lines (hand-written: fast) ----------------------------------------------------
def case(nodeid: str, outcome: str = "passed") -> dict:
    return {"nodeid": nodeid, "outcome": outcome, "stages": {
        "export": {"status": "passed", "message": "", "duration": 0.1},
        "compare": {"status": "passed", "message": "", "duration": 0.1}}}


def write_lines(path: Path, *recs: dict, tail: str = "") -> Path:
    head = {"kind": "session-start", "version": 1, "torch": "2.13.0+cpu", "started": "2026-12-04T00:00:00+00:00",
            "args": [], "options": {}}
    path.write_text("".join(json.dumps(r) + "\n" for r in (head, *recs)) + tail)
    return path


KILLED = ({"kind": "case-start", "nodeid": "t.py::a"}, {"kind": "case", "case": case("t.py::a")},
          {"kind": "case-end", "nodeid": "t.py::a", "duration": 1.5}, {"kind": "case-start", "nodeid": "t.py::b"})
CUT = '{"kind": "case", "case": {"nodeid": "t.py::b", "outc'  # killed mid-write: no newline, no closing brace


def test_a_cut_last_line_is_skipped_with_a_note(tmp_path, capsys):
    path = write_lines(tmp_path / "r.jsonl", *KILLED, tail=CUT)
    built, notes = read_lines(path)
    assert [c["nodeid"] for c in built["cases"]] == ["t.py::a"] and built["cases"][0]["duration"] == 1.5
    assert built["partial"] is True and built["unfinished"] == ["t.py::b"]
    assert notes == [f"{path}:6: skipped a line that is not a whole case line (the last line, cut off: the run was "
                     "killed while writing it)"]
    (tmp_path / "b.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    assert main(["gate", str(path), "--baseline", str(tmp_path / "b.json")]) == 1  # a partial report never passes
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == (f"partial report: {path}: the run did not finish; 1 case recorded; it stopped "
                                   "while running t.py::b")
    assert out.splitlines()[-1] == f"gate failed: the report is partial; 1 case of {path} against the baseline " \
                                   f"{tmp_path / 'b.json'}"
    assert "skipped a line" in err and "Traceback" not in err


def test_a_partial_report_leaves_the_entries_of_cases_it_lacks_alone(tmp_path, capsys):
    path = write_lines(tmp_path / "r.jsonl", *KILLED)
    base = {"version": 2, "non_core_ops": {}, "failures": {"t.py::b": {"compare": {"reason": "known"}},
                                                           "t.py::a": {"compare": {"reason": "fixed"}}}}
    (tmp_path / "b.json").write_text(json.dumps(base))
    assert main(["gate", str(path), "--baseline", str(tmp_path / "b.json")]) == 1
    out = capsys.readouterr().out
    assert "stale: remove it: t.py::a [compare]: passes now" in out  # a case it holds is judged
    assert "t.py::b" not in out.replace("it stopped while running t.py::b", "")  # the one it lacks is not stale


def test_merge_of_case_lines_and_a_report_is_partial(tmp_path, capsys):
    path = write_lines(tmp_path / "shard-2.jsonl", *KILLED, tail=CUT)
    (tmp_path / "shard-1.json").write_text(json.dumps({"version": 1, "torch": "2.13.0+cpu", "interrupted": False,
                                                       "partial": False, "cases": [case("t.py::z")]}))
    (tmp_path / "shard-1.jsonl").write_text(CUT)  # beside its report: left out (`merge shard-*.json*`)
    out_path = tmp_path / "merged.json"
    shards = sorted(str(p) for p in tmp_path.glob("shard-*.json*"))
    assert len(shards) == 3 and main(["merge", "-o", str(out_path), *shards]) == 0
    out, err = capsys.readouterr()
    assert f"merged 2 reports (2 cases) into {out_path}" in out
    merged = json.loads(out_path.read_text())
    assert merged["partial"] is True and merged["unfinished"] == ["t.py::b"]
    assert [c["nodeid"] for c in merged["cases"]] == ["t.py::a", "t.py::z"]
    assert f"partial report: {path}: the run did not finish; 1 case recorded" in out
    assert "(partial: a report it merges is partial)" in out and "cut off" in err
    # the merged report is partial too: the gate says so
    (tmp_path / "b.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    assert main(["gate", str(out_path), "--baseline", str(tmp_path / "b.json")]) == 1
    assert f"partial report: {out_path}: the run did not finish; 2 cases recorded" in capsys.readouterr().out


def test_lines_of_a_run_that_finished_are_a_whole_report(tmp_path, capsys):
    path = write_lines(tmp_path / "r.jsonl", *KILLED[:3],
                       {"kind": "session-finish", "exitstatus": 0, "interrupted": False, "cases": 1})
    built, notes = read_lines(path)
    assert built["partial"] is False and built["interrupted"] is False and notes == []
    (tmp_path / "b.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    assert main(["gate", str(path), "--baseline", str(tmp_path / "b.json")]) == 0
    assert "partial" not in capsys.readouterr().out


@pytest.mark.parametrize("text", ["", "{not json\n", '{"kind": "case", "case": {"nodeid": "t.py::a"}}\n',
                                  '{"kind": "session-start", "version": 7}\n'])
def test_a_file_that_is_not_case_lines_is_a_usage_error(tmp_path, capsys, text):
    (tmp_path / "r.jsonl").write_text(text)
    (tmp_path / "b.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    gate = ["gate", str(tmp_path / "r.jsonl"), "--baseline", str(tmp_path / "b.json")]
    merge = ["merge", "-o", str(tmp_path / "m.json"), str(tmp_path / "r.jsonl")]
    for argv in (gate, merge):
        with pytest.raises(SystemExit) as exc:  # a report that cannot be read exits at once, as a usage error
            main(argv)
        assert exc.value.code == 4
        err = capsys.readouterr().err
        assert "r.jsonl: not pytest-export case lines" in err and "Traceback" not in err


# ---- runs stopped from outside (subprocesses) ---------------------------------------------------------------
@pytest.fixture
def hanging_run(pytester):
    """A pytest run whose second case hangs in export, with the file its output goes to (a pipe could fill up and
    block it); killed at the end whatever the test did to it."""
    write_cases(pytester, CASES)
    out = pytester.path / "run.out"
    with out.open("w") as fh:
        proc = pytester.popen([sys.executable, "-m", "pytest", "--export-check", "--export-report", "report.json",
                               "-p", "no:cacheprovider", "-p", "no:xdist", "-v"],
                              stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTEST_EXPORT_TEST_HANG": "1"})
    yield proc, out
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def wait_until_second_case_runs(proc: subprocess.Popen, out: Path, lines: Path) -> None:
    """Poll (bounded) until the first case's lines are written and the second case has started."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if lines.exists() and '"case-start", "nodeid": "test_cases.py::test_second"' in lines.read_text():
            return
        time.sleep(0.1)
    pytest.fail(f"the run did not reach its second case in {WAIT_S} s:\n{out.read_text()}")


@pytest.mark.slow
def test_sigkill_leaves_the_finished_cases_lines_for_gate_and_merge(pytester, hanging_run):
    proc, out = hanging_run
    lines = pytester.path / "report.jsonl"
    wait_until_second_case_runs(proc, out, lines)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not (pytester.path / "report.json").exists()
    recs = records(lines)
    assert [r["kind"] for r in recs] == ["session-start", "case-start", "case", "case-end", "case-start"]
    assert recs[2]["case"]["nodeid"] == "test_cases.py::test_first" and recs[2]["case"]["outcome"] == "passed"

    with lines.open("a") as fh:
        fh.write(CUT)  # as a kill in the middle of a write leaves it
    (pytester.path / "b.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    gate = subprocess.run([sys.executable, "-m", "pytest_export", "gate", "report.jsonl", "--baseline", "b.json"],
                          cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert gate.stdout.splitlines()[0] == ("partial report: report.jsonl: the run did not finish; 1 case recorded; "
                                           "it stopped while running test_cases.py::test_second")
    assert "report.jsonl:6: skipped a line" in gate.stderr and "Traceback" not in gate.stderr
    merge = subprocess.run([sys.executable, "-m", "pytest_export", "merge", "-o", "merged.json", "report.jsonl"],
                           cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert merge.returncode == 0, merge.stdout + merge.stderr
    assert "partial report: report.jsonl: the run did not finish; 1 case recorded" in merge.stdout
    merged = json.loads((pytester.path / "merged.json").read_text())
    assert merged["partial"] is True and merged["unfinished"] == ["test_cases.py::test_second"]
    assert [c["nodeid"] for c in merged["cases"]] == ["test_cases.py::test_first"]
    assert merged["cases"][0]["duration"] == recs[3]["duration"]


@pytest.mark.slow
def test_sigterm_ends_the_run_as_ctrl_c_with_a_report_marked_interrupted(pytester, hanging_run):
    proc, out = hanging_run
    lines = pytester.path / "report.jsonl"
    wait_until_second_case_runs(proc, out, lines)
    proc.send_signal(signal.SIGTERM)
    # pytest's exit status for an interrupted run; on a loaded machine the interrupt can land after pytest's own
    # handler, and the interpreter then reports it as a death by SIGINT: either way the run did not pass
    assert proc.wait(timeout=120) in (2, -signal.SIGINT), out.read_text()
    text = out.read_text()
    assert "KeyboardInterrupt: SIGTERM: pytest-export ends the run as Ctrl-C does" in text
    assert "pytest-export: report written to report.json" in text  # the session finished: summary, report

    data = json.loads((pytester.path / "report.json").read_text())
    assert data["interrupted"] is True and data["partial"] is True
    assert [c["nodeid"] for c in data["cases"]] == ["test_cases.py::test_first"]
    assert data["unfinished"] == ["test_cases.py::test_second"]
    assert records(lines)[-1] == {"kind": "session-finish", "exitstatus": 2, "interrupted": True, "cases": 1}


def test_an_interrupt_landing_where_python_has_no_line_still_ends_the_run_as_interrupted(pytester):
    """SIGTERM can land on an instruction Python gives no line (``tb_lineno`` None, seen inside torch's tracing):
    pytest's account of the interrupt crashed on that frame and the run ended with exit status 1, not 2."""
    pytester.makepyfile(test_cases="""
        import sys, types

        def test_interrupted():
            lineless = types.TracebackType(None, sys._getframe(), 10**6, -1)
            assert lineless.tb_lineno is None
            try:
                raise ValueError("the cause")
            except ValueError as cause:
                cause.__traceback__ = types.TracebackType(cause.__traceback__, sys._getframe(), 10**6, -1)
                raise KeyboardInterrupt("SIGTERM").with_traceback(lineless)
    """)
    result = pytester.runpytest_subprocess("--export-check", "--export-report", "report.json", "-p", "no:xdist")
    assert result.ret == 2, result.stdout.str() + result.stderr.str()
    assert "TypeError" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["*KeyboardInterrupt*"])
    assert json.loads((pytester.path / "report.json").read_text())["interrupted"] is True


@pytest.mark.slow
def test_under_xdist_only_the_controller_writes_the_lines(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_EXPORT_TEST_HANG", raising=False)
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-n", "2")
    result.assert_outcomes(passed=2, failed=1)
    recs = records(pytester.path / "report.jsonl")
    assert len(kinds(recs, "session-start")) == len(kinds(recs, "session-finish")) == 1
    nodeids = sorted(c["nodeid"] for c in data["cases"])
    assert len(nodeids) == 3
    for kind in ("case-start", "case-end"):
        assert sorted(r["nodeid"] for r in kinds(recs, kind)) == nodeids, kind
    lines = [r["case"] for r in kinds(recs, "case")]
    assert sorted(c["nodeid"] for c in lines) == nodeids  # one line per case, none twice
    assert {c["nodeid"]: c for c in lines} == {c["nodeid"]: without_duration(c) for c in data["cases"]}
    built, _ = read_lines(pytester.path / "report.jsonl")
    assert built["cases"] == data["cases"]
