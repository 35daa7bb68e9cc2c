"""Issue #26: one story in every summary, --export-summary=full|short|off, --export-diagnose=auto|always|never.

A baseline-gated run's Markdown summary, terminal stage table and conformance table label known (baselined)
failures "known", and all of them agree with pytest's own outcome line; serially and under xdist.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.helpers import SHORTCUT, run_check, write_cases

CASES = '''
''' + SHORTCUT + '''

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

@pytest.mark.exportable(tags=["basics"])
def test_ok():
    return Twice(), (torch.ones(3),)

@pytest.mark.exportable(tags=["basics"])
def test_broken():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_dd():
    return DataDependent(), (torch.ones(3),)

@pytest.mark.exportable(xfail={"export": "a branch on data"})
def test_dd_xfail():
    return DataDependent(), (torch.ones(3),)

if os.environ.get("GATE"):
    @pytest.mark.xfail(reason="upstream")
    @pytest.mark.exportable
    def test_marked():
        return Shortcut(), (torch.ones(2),)

    @pytest.mark.exportable
    def test_new():
        return Shortcut(), (torch.ones(4),)

    @pytest.mark.exportable
    def test_new_dd():
        return DataDependent(), (torch.ones(4),)

    @pytest.mark.exportable
    def test_err():
        raise RuntimeError("the case cannot be built")

    @pytest.fixture
    def broken_fixture():
        raise RuntimeError("setup fails")

    @pytest.mark.exportable
    def test_setup(broken_fixture):
        return Twice(), (torch.ones(3),)
'''

# what the gate run's items are, as pytest counts them and as the summaries say why
PYTEST = {"passed": 1, "xfailed": 4, "failed": 3, "errors": 1}
VERDICTS = {"passed": 1, "known": 2, "new": 2, "error": 2, "xfailed": 2}
CASE_ROW = {"passed": 1, "failed": 4, "known": 2, "xfailed": 2, "skipped": 0}  # failed: new and errors
HEAD = ("9 cases: 1 passed, 2 known failures (in the baseline; pytest: xfailed), 2 new failures (not in the "
        "baseline; pytest: failed), 2 errors (the harness could not decide; pytest: 1 error, 1 failed), "
        "2 xfailed (xfail= or @pytest.mark.xfail)")
WORDS = {"passed": "passed", "known failure": "known", "new failure": "new", "failing": "failed", "error": "error",
         "xfailed": "xfailed", "xpassed": "xpassed", "skipped": "skipped", "stale baseline entr": "stale"}


@pytest.fixture
def gated(pytester, monkeypatch):
    """The suite, its baseline recorded (the known failures: test_broken's compare, test_dd's export), and the
    cases that the gate run adds switched on."""
    monkeypatch.delenv("FIXED", raising=False)
    monkeypatch.delenv("GATE", raising=False)
    write_cases(pytester, CASES)
    update = pytester.runpytest("--export-check", "--export-baseline", "baseline.json", "--export-baseline-update",
                                "-p", "no:cacheprovider", "-p", "no:xdist")
    update.assert_outcomes(passed=1, xfailed=3)
    failures = json.loads((pytester.path / "baseline.json").read_text())["failures"]
    assert {n: sorted(s) for n, s in failures.items()} == {"test_cases.py::test_broken": ["compare"],
                                                           "test_cases.py::test_dd": ["export"]}
    monkeypatch.setenv("GATE", "1")
    return pytester


def gate(pytester, *args):
    return run_check(pytester, "--export-baseline", "baseline.json", "--export-summary-md", "summary.md", *args)


def head_counts(head: str) -> dict[str, int]:
    """``9 cases: 1 passed, 2 known failures (...)`` -> {"passed": 1, "known": 2}."""
    body = re.sub(r"\s*\([^)]*\)", "", head.split(": ", 1)[1])
    out = {}
    for part in body.split(", "):
        n, words = part.split(" ", 1)
        out[next(v for w, v in WORDS.items() if words.startswith(w))] = int(n)
    return out


def table_row(lines: list[str], name: str, sep: str = "|") -> dict[str, str]:
    """The row ``name`` of the text or Markdown table whose header comes first before it, by column."""
    at = next(i for i, ln in enumerate(lines) if ln.strip(" |").split(sep)[0].strip() == name)
    header = next(lines[i] for i in range(at, -1, -1) if lines[i].strip(" |").startswith(("stage", "tag")))
    cells = lambda ln: [c.strip() for c in ln.strip().strip("|").split(sep)]  # noqa: E731
    return dict(zip(cells(header), cells(lines[at])))


def check_agreement(result, md: str) -> None:
    """The pytest outcome line, the Markdown head and (case) row, the terminal (case) row and the conformance
    table's outcome tell one story."""
    outcomes = result.parseoutcomes()
    assert {k: outcomes.get(k, 0) for k in PYTEST} == PYTEST, outcomes
    out = result.stdout.lines
    out = out[next(i for i, ln in enumerate(out) if "= export summary (torch " in ln):]  # not the failures' tables
    # the Markdown summary: its head and its stage table's (case) row
    md_head = md.splitlines()[0]
    assert md_head.startswith("### torch.export check (torch ") and md_head.endswith(HEAD), md_head
    verdicts = head_counts(md_head.split("): ", 1)[1])
    assert verdicts == VERDICTS
    md_row = {k: int(v) for k, v in table_row(md.splitlines(), "(case)").items() if k != "stage"}
    assert md_row == CASE_ROW
    assert "known: failures in the baseline (pytest counts them as xfailed)" in md
    # the terminal: the head line, the (case) row, the conformance table's `all` outcome cell
    assert HEAD in out
    term_row = {k: int(v) for k, v in table_row(out, "(case)").items() if k != "stage"}
    assert term_row == md_row
    all_row = table_row(out, "all")
    cell = dict(zip(("passed", "failed", "known", "xfailed", "skipped"), map(int, all_row["outcome"].split("/"))))
    assert cell == term_row
    # ... and pytest's line: known and other xfails are its xfailed; new failures and errors its failed and errors
    assert term_row["passed"] == outcomes["passed"] == verdicts["passed"]
    assert term_row["known"] + term_row["xfailed"] == outcomes["xfailed"] == verdicts["known"] + verdicts["xfailed"]
    assert term_row["failed"] == outcomes["failed"] + outcomes["errors"] == verdicts["new"] + verdicts["error"]
    assert term_row["skipped"] == outcomes.get("skipped", 0) == verdicts.get("skipped", 0)
    # the export stage: test_dd's failure is known, test_dd_xfail's expected, test_new_dd's new
    export = table_row(out, "export")
    assert (export["known"], export["xfailed"], export["failed"]) == ("1", "1", "1"), export


def check_lists(md: str) -> None:
    assert "- `test_cases.py::test_new`: failing (new) in compare" in md
    assert "- `test_cases.py::test_new_dd`: failing (new) in export" in md
    assert "- `test_cases.py::test_err`: error (the harness could not decide)" in md
    assert "- `test_cases.py::test_dd`: known failure in export" in md
    assert "- `test_cases.py::test_broken`: known failure in compare" in md
    assert "test_marked`" not in md and "test_dd_xfail`" not in md  # xfailed: neither failing nor known


def test_every_summary_tells_the_story_pytest_tells(gated):
    result, data = gate(gated, "-p", "no:xdist")
    assert result.ret == 1
    md = (gated.path / "summary.md").read_text()
    check_agreement(result, md)
    check_lists(md)
    verdicts = {c["nodeid"].split("::")[-1]: (c["item"], c["verdict"]) for c in data["cases"]}
    assert verdicts == {"test_ok": ("passed", "passed"), "test_broken": ("xfailed", "known"),
                        "test_dd": ("xfailed", "known"), "test_dd_xfail": ("xfailed", "xfailed"),
                        "test_marked": ("xfailed", "xfailed"), "test_new": ("failed", "new"),
                        "test_new_dd": ("failed", "new"), "test_err": ("failed", "error"),
                        "test_setup": ("error", "error")}
    # --export-diagnose=auto: the known failure's and the expected failure's exports are not diagnosed; the new one is
    export = {c["nodeid"].split("::")[-1]: c["stages"].get("export", {}) for c in data["cases"]}
    assert "diagnosis" not in export["test_dd"] and "diagnosis" not in export["test_dd_xfail"]
    assert export["test_dd"]["diagnosis_skipped"] == ("diagnosis skipped: known failure (in the baseline "
                                                      "baseline.json); --export-diagnose=always runs it")
    assert export["test_dd"]["message"].endswith(export["test_dd"]["diagnosis_skipped"])
    assert export["test_dd_xfail"]["diagnosis_skipped"].startswith("diagnosis skipped: expected failure (xfail=")
    assert export["test_new_dd"]["diagnosis"]["failure_types"] == ["DATA_DEPENDENT_ERROR"]
    assert "diagnosis_skipped" not in export["test_new_dd"]


@pytest.mark.slow
def test_under_xdist_too(gated):
    result, data = gate(gated, "-n", "2")
    assert result.ret == 1
    md = (gated.path / "summary.md").read_text()
    check_agreement(result, md)
    check_lists(md)


@pytest.mark.slow
def test_the_gate_command_judges_the_verdicts_again(gated):
    from pytest_export.declare.options import SessionOptions
    from pytest_export.gate import baseline as bl
    from pytest_export.gate.judge import judge_report
    from pytest_export.gate.scope import Scope

    _, data = gate(gated, "-p", "no:xdist", "-k", "not setup")
    cases = judge_report(bl.load(gated.path / "baseline.json"), data["cases"],
                         SessionOptions(check=True, baseline="baseline.json"), Scope.from_json(data["scope"])).cases
    # the in-run gate's verdicts, found again from the report (a setup error has no case to judge again)
    assert {c["nodeid"]: c["verdict"] for c in cases} == {c["nodeid"]: c["verdict"] for c in data["cases"]}


@pytest.mark.parametrize("how", [["--export-diagnose=never"], ["--export-no-diagnose"]], ids=["never", "no-diagnose"])
def test_never_diagnoses_new_failures_either(gated, how):
    result, data = gate(gated, "-p", "no:xdist", "-k", "dd", *how)
    export = {c["nodeid"].split("::")[-1]: c["stages"]["export"] for c in data["cases"]}
    assert sorted(export) == ["test_dd", "test_dd_xfail", "test_new_dd"]
    for stage in export.values():
        assert "diagnosis" not in stage and "diagnosis_skipped" not in stage and "diagnosis" not in stage["message"]


def test_always_diagnoses_known_failures(gated):
    result, data = gate(gated, "-p", "no:xdist", "-k", "test_dd", "--export-diagnose=always")
    export = {c["nodeid"].split("::")[-1]: c["stages"]["export"] for c in data["cases"]}
    for name in ("test_dd", "test_dd_xfail"):
        assert export[name]["diagnosis"]["failure_types"] == ["DATA_DEPENDENT_ERROR"], name
        assert "diagnosis_skipped" not in export[name]
    # a diagnosis changes no verdict
    assert {c["nodeid"].split("::")[-1]: c["verdict"] for c in data["cases"]} == {
        "test_dd": "known", "test_dd_xfail": "xfailed"}
    result.assert_outcomes(xfailed=2)


def test_the_known_export_is_the_items_mode(pytester, monkeypatch):
    """The baseline knows the non-strict item's export failure only: the strict item's is new, and diagnosed."""
    write_cases(pytester, '''
class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

@pytest.mark.exportable
def test_dd():
    return DataDependent(), (torch.ones(3),)
''')
    (pytester.path / "baseline.json").write_text(json.dumps({"version": 2, "failures": {
        "test_cases.py::test_dd[non-strict]": {"export": {"reason": "a branch on data"}}}}))
    result, data = run_check(pytester, "-p", "no:xdist", "--export-baseline", "baseline.json",
                             "--export-modes", "non-strict,strict")
    result.assert_outcomes(failed=1, xfailed=1)
    export = {c["nodeid"].split("::")[-1]: c["stages"]["export"] for c in data["cases"]}
    assert "diagnosis" not in export["test_dd[non-strict]"] and export["test_dd[non-strict]"]["diagnosis_skipped"]
    assert "diagnosis" in export["test_dd[strict]"]["message"] and "diagnosis_skipped" not in export["test_dd[strict]"]


# ---- --export-summary=full|short|off, and -q ------------------------------------------------------------------

SHORT = ["pytest-export: " + HEAD + "; report: report.json",
         "  error (the harness could not decide): test_cases.py::test_err",
         "  failing (new): test_cases.py::test_new [compare]",
         "  failing (new): test_cases.py::test_new_dd [export]",
         "  error (the harness could not decide): test_cases.py::test_setup"]


def ours(result) -> list[str]:
    """The lines the plugin writes at the end of a run (its report header left out)."""
    return [ln for ln in result.stdout.lines if ln.startswith("pytest-export:") and "--export-check on" not in ln]


def tables(result) -> list[str]:
    return [ln for ln in result.stdout.lines if re.search(r"export (summary|conformance|baseline) ", ln)
            or ln.startswith(("(case)", "tag ", "pytest-export: report written"))
            or ln.startswith("stage ") and "| passed |" in ln]


@pytest.mark.parametrize("how", [["--export-summary=short"], ["-q"]], ids=["short", "-q"])
def test_short_summary(gated, how):
    result, _ = gate(gated, "-p", "no:xdist", *how)
    assert result.ret == 1
    out = result.stdout.lines
    at = out.index(SHORT[0])
    assert out[at:at + len(SHORT)] == SHORT
    assert tables(result) == []  # no tables, no separators
    assert ours(result) == [SHORT[0]]  # new failures: in the lines above
    assert (gated.path / "summary.md").read_text().splitlines()[0].endswith(HEAD)  # the files are written alike
    assert json.loads((gated.path / "report.json").read_text())["cases"]


def test_short_summary_says_what_the_baseline_says(gated, monkeypatch):
    monkeypatch.setenv("FIXED", "1")  # test_broken passes now: its entry is stale
    result, _ = gate(gated, "-p", "no:xdist", "-q", "-k", "broken or ok")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "pytest-export: 2 cases: 1 passed, 1 stale baseline entry (the case passes now; pytest: failed); "
        "report: report.json",
        "  failing (stale baseline entry: it passes now): test_cases.py::test_broken",
        "pytest-export: baseline baseline.json: stale: remove it: test_cases.py::test_broken [compare]: passes now"])


def test_summary_off_prints_no_tables_and_writes_every_file(gated):
    result, _ = gate(gated, "-p", "no:xdist", "--export-summary=off", "--export-coverage", "coverage.json")
    assert result.ret == 1
    assert tables(result) == [] and ours(result) == []
    result.assert_outcomes(**{"passed": 1, "xfailed": 4, "failed": 3, "errors": 1})
    for name in ("summary.md", "report.json", "report.jsonl", "coverage.json", "coverage.md"):
        assert (gated.path / name).exists(), name


GREEN = '''
class Scale(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
    def forward(self, x):
        return x * self.k

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=2, max=16)}})
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_scale(k):
    return Scale(k), (torch.randn(4, 3),)
'''


@pytest.mark.slow
def test_a_green_run_says_it_in_one_line(pytester):
    """Every case passed and nothing needs attention: the default end of the run is one line (cases, stages, the
    report's path); --export-summary=full and -v show the tables."""
    write_cases(pytester, GREEN)
    result, data = run_check(pytester, "-p", "no:xdist")
    assert result.ret == 0 and len(data["cases"]) == 5
    line = ("pytest-export: 5 cases: 5 passed (torch *); 8 stages: eager, export, compare, serde, decomp, guards, "
            "fuzz, retrace; report: report.json")
    result.stdout.fnmatch_lines([line, "*= 5 passed*"], consecutive=True)
    assert tables(result) == [] and len(ours(result)) == 1
    assert not [ln for ln in result.outlines if "decomposition coverage" in ln]
    for args in (["--export-summary=full"], ["-v"]):
        result, _ = run_check(pytester, "-p", "no:xdist", *args)
        result.stdout.fnmatch_lines(["*= export summary (torch *", "5 cases: 5 passed", "stage *| passed |*",
                                     "pytest-export: report written to report.json*"])
    result, _ = run_check(pytester, "-p", "no:xdist", "-q")  # -q: the short summary, one line here too
    assert ours(result) == ["pytest-export: 5 cases: 5 passed; report: report.json"]


def test_the_tables_are_the_default_where_a_case_needs_attention(gated):
    for args in ([], ["-q", "--export-summary=full"]):
        result, _ = gate(gated, "-p", "no:xdist", "-k", "ok or broken", *args)
        assert result.ret == 0
        result.stdout.fnmatch_lines(["*= export summary (torch *",
                                     "2 cases: 1 passed, 1 known failure (in the baseline; pytest: xfailed)",
                                     "stage *| passed | failed | known | skipped | xfailed",
                                     "*= export conformance (torch *", "pytest-export: report written to report.json*"])


def test_a_bad_summary_value_is_a_usage_error(pytester):
    write_cases(pytester, "")
    result = pytester.runpytest("--export-check", "--export-summary=loud", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--export-summary must be one of full, short, off, got 'loud'*"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the cuda items run where CUDA is available")
def test_skipped_cases_are_counted_as_pytest_counts_them(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable
def test_relu():
    return torch.nn.ReLU(), (torch.ones(2),)
''')
    result, data = run_check(pytester, "-p", "no:xdist", "-q", "--export-devices", "cpu,cuda")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["pytest-export: 2 cases: 1 passed, 1 skipped; report: report.json"])
    assert sorted(c["verdict"] for c in data["cases"]) == ["passed", "skipped"]


def test_a_known_failure_is_known_in_every_table(pytester, capsys):
    """The stage table, the deployment matrix and ``python -m pytest_export show`` use one word for a failure the
    baseline knows (#32): ``known``, not ``failed`` (with its signature in the matrix)."""
    from pytest_export.__main__ import main

    write_cases(pytester, '''
class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

@pytest.mark.exportable(tags=["basics"])
def test_dd():
    return DataDependent(), (torch.ones(3),)
''')
    args = ("--export-onnx", "--export-baseline", "baseline.json", "-p", "no:xdist")  # onnx: skipped behind export
    run_check(pytester, "--export-baseline-update", *args)
    result, data = run_check(pytester, *args)
    assert result.ret == 0, result.stdout.str()
    out = result.stdout.lines
    assert table_row(out, "export")["known"] == "1"  # the stage table
    matrix = out[next(i for i, ln in enumerate(out) if ln.startswith("deployment matrix")):]
    row = [c.strip() for c in next(ln for ln in matrix if ln.startswith("test_cases.py::test_dd")).split("|")]
    assert row[1:] == ["known (GuardOnDataDependentSymNode)", "-", "skipped", "-"], row
    total = [c.strip() for c in next(ln for ln in matrix if ln.startswith("all ")).split("|")]
    assert total[1] == "0/0/1/0/0", total
    assert any(ln.startswith("all: passed/failed/known/xfailed/skipped") for ln in matrix), matrix
    for markdown in ((), ("--markdown",)):
        capsys.readouterr()
        assert main(["show", str(pytester.path / "report.json"), *markdown]) == 0
        shown = capsys.readouterr().out.splitlines()
        cells = [c.strip(" `") for c in next(ln for ln in shown if "test_cases.py::test_dd" in ln).strip("|").split("|")]
        assert cells[1] == "known" and cells[3] == "known" and "failed" not in cells, cells  # outcome, export
