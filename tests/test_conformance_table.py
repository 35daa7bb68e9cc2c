"""``python -m pytest_export table``: the conformance table per model and torch version, kept as an expected file
(issue #55): the same reports give the same text, a changed verdict is a diff and exit status 1."""

from __future__ import annotations

import json
import subprocess
import sys

from pytest_export.report.conformance import first_failure, found_message, model_of, model_table, model_verdict


def _case(name: str, outcome: str, **stages: tuple[str, str]) -> dict:
    return {"nodeid": f"corpus/breadth/test_breadth.py::test_transformers[{name}]", "outcome": outcome,
            "stages": {s: {"status": st, "message": msg, "duration": 0.1} for s, (st, msg) in stages.items()}}


def _report(version: str, cases: list[dict]) -> dict:
    return {"version": 1, "torch": version, "interrupted": False, "partial": False, "coverage": {}, "cases": cases}


BERT = _case("bert", "passed", eager=("passed", ""), export=("passed", ""))
GPT = _case("gpt2", "failed", eager=("passed", ""), export=("failed", "UserError: Constraints violated (seq)!\nmore"))


def test_rows_per_model_and_version_with_the_first_failures_reason():
    text = model_table([_report("2.14.1", [GPT, BERT]), _report("2.13.0+cpu", [BERT, GPT])])
    rows = [ln for ln in text.splitlines() if ln.startswith("| bert") or ln.startswith("| gpt2")]
    assert rows == ["| bert | 2.13.0+cpu | pass | pass | pass |  |", "| bert | 2.14.1 | pass | pass | pass |  |",
                    "| gpt2 | 2.13.0+cpu | FAIL | pass | FAIL | export: UserError: Constraints violated (seq)! |",
                    "| gpt2 | 2.14.1 | FAIL | pass | FAIL | export: UserError: Constraints violated (seq)! |"]
    assert "| 2.13.0+cpu | 2 | 1 | 1 | 0 | 0 |" in text  # counts per verdict, per version
    assert model_of("a.py::test_x") == "test_x" and first_failure(BERT) == ""


def test_check_exits_1_with_the_diff_where_a_verdict_changed(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(_report("2.13.0+cpu", [BERT, GPT])))
    fixed = _case("gpt2", "passed", eager=("passed", ""), export=("passed", ""))
    after.write_text(json.dumps(_report("2.13.0+cpu", [BERT, fixed])))
    expected = tmp_path / "conformance.md"
    run = lambda *a: subprocess.run([sys.executable, "-m", "pytest_export", "table", *a],  # noqa: E731
                                    capture_output=True, text=True)
    assert run(str(before), "-o", str(expected)).returncode == 0
    same = run(str(before), "--check", str(expected))
    assert same.returncode == 0 and same.stdout == ""
    changed = run(str(after), "--check", str(expected))
    assert changed.returncode == 1
    assert "-| gpt2 | 2.13.0+cpu | FAIL |" in changed.stdout and "+| gpt2 | 2.13.0+cpu | pass |" in changed.stdout
    missing = run(str(after), "--check", str(tmp_path / "nope.md"))
    assert missing.returncode == 4 and "--check" in missing.stderr and "nope.md" in missing.stderr


def test_a_later_report_of_the_same_version_replaces_its_cases():
    fixed = _case("gpt2", "passed", eager=("passed", ""), export=("passed", ""))
    text = model_table([_report("2.13.0+cpu", [BERT, GPT]), _report("2.13.0+cpu", [fixed])])
    rows = [ln for ln in text.splitlines() if ln.startswith("| gpt2")]
    assert rows == ["| gpt2 | 2.13.0+cpu | pass | pass | pass |  |"]
    assert "| 2.13.0+cpu | 2 | 2 | 0 | 0 | 0 |" in text  # one row per case, counted once


def test_the_table_states_torchs_verdict_not_the_runs_expectations():
    """A run against an expected file reports xfailed and XPASS stages: the table shows the verdict torch gave."""
    reason = "UserError: Constraints violated (seq)! see (a): here"
    held = _case("gpt2", "xfailed", eager=("passed", ""),
                 export=("xfailed", f"expected failure ({reason}): {reason}\nmore"))
    fixed = _case("bert", "failed", eager=("passed", ""),
                  export=("xpassed", f"XPASS(strict): expected to fail ({reason}) but passed on torch 2.13.0"))
    text = model_table([_report("2.13.0+cpu", [held, fixed])])
    rows = [ln for ln in text.splitlines() if ln.startswith("| bert") or ln.startswith("| gpt2")]
    assert rows == ["| bert | 2.13.0+cpu | pass | pass | pass |  |",
                    f"| gpt2 | 2.13.0+cpu | FAIL | pass | FAIL | export: {reason} |"]
    assert "| 2.13.0+cpu | 2 | 1 | 1 | 0 | 0 |" in text
    assert model_verdict({"stages": {"export": {"status": "error"}}, "outcome": "failed"}) == "error"
    assert found_message("plain message") == "plain message"
