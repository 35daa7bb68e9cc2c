"""python -m pytest_export merge|show|diff on real reports from pytester runs."""

from __future__ import annotations

import json
import sys

import pytest

from pytest_export.__main__ import main
from tests.helpers import LIN, run_check, write_cases

CASES = '''
import os

class Shortcut(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting() and not os.environ.get("FIXED"):
            return x * 2
        return x + x + (0 if os.environ.get("FIXED") else 1e-3)
''' + LIN + '''
@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

if os.environ.get("FIXED"):
    @pytest.mark.exportable
    def test_bn_train():
        torch.manual_seed(0)
        return torch.nn.BatchNorm1d(3).train(), (torch.randn(4, 3),)

    @pytest.mark.exportable
    def test_broken_now():
        return Shortcut(), (torch.ones(2),), {}
'''


@pytest.fixture
def made(pytester, monkeypatch):
    """Three real reports: two shards of the 'before' run, and an 'after' run where things changed."""
    monkeypatch.delenv("FIXED", raising=False)
    write_cases(pytester, CASES)
    run_check(pytester, "-p", "no:xdist", "-k", "shortcut", report="shard1.json")
    run_check(pytester, "-p", "no:xdist", "-k", "lin", report="shard2.json")
    run_check(pytester, "-p", "no:xdist", report="before.json")
    monkeypatch.setenv("FIXED", "1")
    (pytester.path / "test_cases.py").write_text((pytester.path / "test_cases.py").read_text().replace(
        "return Shortcut(), (torch.ones(2),), {}", "return Lin(), (torch.ones(3),), {'y': 1}"))
    run_check(pytester, "-p", "no:xdist", report="after.json")
    return pytester.path


@pytest.mark.slow
def test_merge_of_shards_equals_the_whole_run(made, capsys):
    assert main(["merge", "-o", str(made / "merged.json"), str(made / "shard1.json"), str(made / "shard2.json")]) == 0
    merged = json.loads((made / "merged.json").read_text())
    whole = json.loads((made / "before.json").read_text())

    def measured(value):
        """Without the resident growth measured (``serde``'s ``memory.measured``, ``ranges.largest.measured_bytes``):
        the allocator's state differs from process to process."""
        if isinstance(value, dict):
            return {k: measured(v) for k, v in value.items() if k not in ("measured", "measured_bytes")}
        return value

    def strip(report):
        return [measured({**{k: v for k, v in c.items() if k != "duration"},  # the test's seconds differ run to run
                          "stages": {n: {k: v for k, v in s.items() if k != "duration"} for n, s in c["stages"].items()}})
                for c in report["cases"]]

    assert strip(merged) == strip(whole)
    assert merged["coverage"] == whole["coverage"] and merged["torch"] == whole["torch"]
    assert "merged 2 reports (2 cases)" in capsys.readouterr().out


@pytest.mark.slow
def test_show_table_and_markdown(made, capsys):
    assert main(["show", str(made / "before.json")]) == 0
    out = capsys.readouterr().out
    assert "pytest-export report: 2 cases" in out
    assert "test_cases.py::test_shortcut | failed  | passed | passed | failed" in out
    assert "decomposition coverage:" in out
    assert main(["show", "--markdown", str(made / "before.json")]) == 0
    md = capsys.readouterr().out
    assert "| `test_cases.py::test_shortcut` | failed | passed | passed | failed |" in md


@pytest.mark.slow
def test_diff_reports_new_failures_fixed_and_coverage(made, capsys):
    rc = main(["diff", str(made / "before.json"), str(made / "after.json")])
    out = capsys.readouterr().out
    assert rc == 1  # a new failure
    assert "new failures: 1\n  - test_cases.py::test_broken_now [eager]: failed" in out
    assert "fixed: 1\n  - test_cases.py::test_shortcut [compare]" in out
    assert "added cases: 2" in out
    assert "non-core ops new after decomposition: 1\n  - aten._native_batch_norm_legit_functional.default" in out
    assert "Core ATen ops exercised: " in out
    assert main(["diff", str(made / "before.json"), str(made / "before.json")]) == 0


@pytest.mark.slow
def test_module_entry_point_and_bad_input(made, pytester):
    r = pytester.run(sys.executable, "-m", "pytest_export", "show", str(made / "after.json"))
    assert r.ret == 0 and "pytest-export report: 4 cases" in r.stdout.str()
    (made / "junk.json").write_text('{"cases": 3}')
    r = pytester.run(sys.executable, "-m", "pytest_export", "show", str(made / "junk.json"))
    assert r.ret == 4 and "junk.json: not a pytest-export report" in r.stderr.str()
    r = pytester.run(sys.executable, "-m", "pytest_export", "diff", str(made / "missing.json"), str(made / "after.json"))
    assert r.ret == 4 and "missing.json: no such report" in r.stderr.str()
    r = pytester.run(sys.executable, "-c", "import pytest_export.__main__, sys; print('torch' in sys.modules)")
    assert r.stdout.str().strip() == "False"


@pytest.mark.parametrize("case, message", [
    ({"outcome": "passed", "stages": {}}, 'cases[0]: expected an object with a "nodeid", got one without "nodeid"'),
    ({"nodeid": "t.py::a", "stages": {"export": "passed"}},
     'cases[0] (t.py::a): stages.export: expected an object with a "status", got "passed"'),
    ({"nodeid": "t.py::a", "stages": {"export": {"message": "no status"}}},
     'cases[0] (t.py::a): stages.export: expected an object with a "status", got one without "status"'),
    ("t.py::a", 'cases[0]: expected an object with a "nodeid", got "t.py::a"'),
])
@pytest.mark.parametrize("command", ["merge", "diff", "show", "durations"])
def test_a_malformed_case_is_named_not_a_traceback(tmp_path, capsys, case, message, command):
    """A hand-edited or truncated report: every command names the file, the case and the field, and exits with the
    usage error's status 4 (#24)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "torch": "2.13.0+cpu", "cases": [case]}))
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"version": 1, "torch": "2.13.0+cpu", "cases": []}))
    argv = {"merge": ["merge", "-o", str(tmp_path / "out.json"), str(good), str(bad)],
            "diff": ["diff", str(good), str(bad)], "show": ["show", str(bad)],
            "durations": ["durations", str(bad), "-o", str(tmp_path / "d.json")]}[command]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 4
    assert capsys.readouterr().err == (f"pytest-export: {bad}: {message}; correct the field by hand, or write the "
                                       "report again (pytest --export-check --export-report PATH)\n")
    assert not (tmp_path / "out.json").exists()
