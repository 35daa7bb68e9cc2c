"""Terminal summary, --export-coverage (JSON + Markdown), --export-summary-md and $GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_check, write_cases

CASES = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
    def forward(self, x):
        return self.l(x).relu()

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x + x + 1e-3

@pytest.mark.exportable
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

@pytest.mark.exportable
def test_bn_train():
    torch.manual_seed(0)
    return torch.nn.BatchNorm1d(3).train(), (torch.randn(4, 3),)

@pytest.mark.exportable(xfail={"compare": "known shortcut"})
def test_shortcut():
    return Shortcut(), (torch.ones(3),)
'''

BN = "aten._native_batch_norm_legit_functional.default"


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    write_cases(pytester, CASES)
    return pytester


def test_terminal_summary_table_and_coverage_line(suite):
    result, data = run_check(suite, "-p", "no:xdist")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        f"*export summary (torch {data['torch']})*",  # the installed torch, whichever it is
        "stage *| passed | failed | skipped | xfailed",
        "eager *|      3 |      0 |       0 |       0",
        "compare *|      2 |      0 |       0 |       1",
        "(case) *|      2 |      0 |       0 |       1",
        f"decomposition coverage: * of {data['coverage']['core_ops_total']} Core ATen ops exercised (*%); "
        f"1 non-core op(s) survived decomposition: {BN} (1 case: test_cases.py::test_bn_train)",
    ])
    assert "Core ATen ops exercised:" not in result.stdout.str()
    verbose, _ = run_check(suite, "-p", "no:xdist", "-v")
    verbose.stdout.fnmatch_lines(["Core ATen ops exercised: *aten.addmm.default*"])


def test_coverage_json_and_markdown(suite):
    result, data = run_check(suite, "-p", "no:xdist", "--export-coverage", "out/cov.json")
    assert result.ret == 0
    cov = json.loads((suite.path / "out" / "cov.json").read_text())
    rows = {r["op"]: r for r in cov["ops"]}
    assert rows["aten.linear.default"] == {"op": "aten.linear.default", "core": False, "decomposed": True,
                                           "cases_before": ["test_cases.py::test_lin"], "cases_after": []}
    assert rows["aten.addmm.default"]["core"] is True
    assert rows["aten.addmm.default"]["cases_after"] == ["test_cases.py::test_lin"]
    assert rows[BN]["core"] is False and rows[BN]["cases_after"] == ["test_cases.py::test_bn_train"]
    assert cov["core_ops_total"] == data["coverage"]["core_ops_total"] > 100
    assert set(cov["core_ops_reached"]) == set(data["coverage"]["core_ops_reached"])
    md = (suite.path / "out" / "cov.md").read_text()
    assert "| op | core | decomposed | cases before | cases after |" in md
    assert "| `aten.linear.default` | no | yes | 1 | 0 |" in md
    assert f"| `{BN}` | no |" in md


@pytest.mark.slow
def test_summary_md_option_and_github_step_summary(suite, monkeypatch):
    result, _ = run_check(suite, "-p", "no:xdist", "--export-summary-md", "summary.md")
    text = (suite.path / "summary.md").read_text()
    assert text.startswith("### torch.export check (torch ") and "): 3 cases: 2 passed, 1 xfailed" in text
    assert "| compare | 2 | 0 | 0 | 1 |" in text and "decomposition coverage:" in text

    step = suite.path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result, _ = run_check(suite, "-p", "no:xdist")
    assert result.ret == 0
    content = step.read_text()
    assert content.startswith("earlier step\n### torch.export check (torch ") and "): 3 cases: " in content
    # the option wins over the environment
    run_check(suite, "-p", "no:xdist", "--export-summary-md", "other.md")
    assert step.read_text() == content and (suite.path / "other.md").exists()


def test_summary_md_lists_failing_cases(suite):
    (suite.path / "test_cases.py").write_text((suite.path / "test_cases.py").read_text().replace(
        '(xfail={"compare": "known shortcut"})', ""))
    result, _ = run_check(suite, "-p", "no:xdist", "--export-summary-md", "summary.md")
    assert result.ret == 1
    text = (suite.path / "summary.md").read_text()
    assert "1 failing" in text and "- `test_cases.py::test_shortcut`: failing in compare" in text


def test_written_files_follow_the_users_umask_and_one_naming_rule(pytester):
    import os
    import stat

    pytester.makepyfile(test_cases="""
import pytest, torch

@pytest.mark.exportable
def test_relu():
    return torch.nn.ReLU(), (torch.ones(2),)
""")
    old = os.umask(0o022)
    try:
        result = pytester.runpytest("--export-check", "--export-report", "out/report.json", "--export-coverage",
                                    "out/coverage.json", "--export-summary-md", "out/summary.md",
                                    "-p", "no:cacheprovider")
    finally:
        os.umask(old)
    result.assert_outcomes(passed=1)
    out = pytester.path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["coverage.json", "coverage.md", "report.json", "report.jsonl",
                                                     "summary.md"]
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, (p.name, oct(p.stat().st_mode))
