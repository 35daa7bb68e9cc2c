"""Progress (issue #31): a long case shows the stage it is in. Under ``-v`` a line per stage as it starts; on a
terminal a live status after the dots, erased so the dots line goes on cleanly; nothing under ``-q``,
``--export-summary=off``, output that is not a terminal, ``-s`` or xdist.

``PYTEST_EXPORT_PROGRESS_AFTER`` stands in for the 3 seconds a case runs before its live status shows, so no
test waits for them.
"""

from __future__ import annotations

import re

import pytest

from pytest_export.report.progress import AFTER_ENV, PROGRESS_AFTER, short_name, status_line, threshold
from tests.helpers import LIN, cases_by_name, run_check, write_cases

CASES = LIN + '''
class Slowish(torch.nn.Module):
    def forward(self, x):
        time.sleep(0.01)
        return x * 2

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("n", min=2, max=8)}}, examples=2)
def test_slowish():
    return Slowish(), (torch.randn(4, 3),)

@pytest.mark.exportable
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)
'''

# a terminal, as pytest's own output is where it decides to rewrite a line ("collecting ...")
TTY = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.isatty = lambda: True
'''

PROGRESS_LINE = re.compile(r"export-check \S+::test_\w+: \w+ \(after \d+\.\d s\)")


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv(AFTER_ENV, "0")
    write_cases(pytester, "import time\n" + CASES)
    return pytester


def progress_lines(result) -> list[str]:
    return [ln for ln in result.stdout.lines if PROGRESS_LINE.search(ln)]


def rendered(text: str) -> list[str]:
    """What a terminal shows for ``text``: backspace moves left, a carriage return to the line's start, a
    character overwrites the one under the cursor."""
    lines = []
    for raw in text.split("\n"):
        cells: list[str] = []
        pos = 0
        for ch in raw:
            if ch == "\b":
                pos = max(pos - 1, 0)
            elif ch == "\r":
                pos = 0
            else:
                cells[pos:pos + 1] = [ch]
                pos += 1
        lines.append("".join(cells).rstrip())
    return lines


def test_verbose_shows_a_line_per_stage_as_it_starts(suite):
    result, data = run_check(suite, "-v", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    for name, case in cases_by_name(data).items():
        stages = list(case["stages"])  # the stages the runner started, in their order
        assert {"eager", "export", "compare"} <= set(stages), stages
        shown = [PROGRESS_LINE.search(ln).group(0) for ln in progress_lines(result) if f"::{name}:" in ln]
        # every one of them, in that order, each under the case's short name
        assert [ln.split(": ", 1)[1].split(" (", 1)[0] for ln in shown] == list(stages), (name, shown)
        assert all(ln.startswith(f"export-check test_cases.py::{name}: ") for ln in shown)
    # each line on its own, indented; pytest's own PASSED line follows the case's stages
    out = result.stdout.lines
    first = next(i for i, ln in enumerate(out) if "::test_slowish: eager" in ln)
    assert out[first].startswith("    export-check ")
    assert any(ln.startswith("test_cases.py::test_slowish PASSED") for ln in out[first:])


@pytest.mark.parametrize("args", [("-q",), ("-v", "--export-summary=off"), ()],
                         ids=["quiet", "summary-off", "not-a-terminal"])
def test_quiet_off_and_logs_show_nothing(suite, args):
    result, _ = run_check(suite, *args, "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    assert not progress_lines(result), result.stdout.str()
    assert "\b" not in result.stdout.str()


def test_a_terminal_shows_the_live_status_and_erases_it(suite):
    suite.makeconftest(TTY)
    result, _ = run_check(suite, "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    text = result.stdout.str()
    # the status was there, stage after stage, after the dots
    for stage in ("eager", "export", "compare", "guards", "fuzz"):
        assert f" export-check test_cases.py::test_slowish: {stage} (after " in text, text
    # and what the terminal shows at the end is the dots line as pytest wrote it, nothing of the status left
    screen = rendered(text)
    assert not any("export-check test_cases" in ln for ln in screen), screen
    dots = [ln for ln in screen if ln.startswith("test_cases.py ")]
    assert len(dots) == 1 and re.fullmatch(r"test_cases\.py \.\. +\[100%\]", dots[0]), dots


def test_a_case_shorter_than_the_threshold_shows_no_live_status(suite, monkeypatch):
    suite.makeconftest(TTY)
    monkeypatch.setenv(AFTER_ENV, "600")
    result, _ = run_check(suite, "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    assert "export-check test_cases" not in result.stdout.str()


def test_a_terminal_under_capture_no_shows_nothing(suite):
    """``-s``: the test's own output reaches the terminal between two writes of the status, so none is written."""
    suite.makeconftest(TTY)
    result, _ = run_check(suite, "-s", "-p", "no:xdist")
    result.assert_outcomes(passed=2)
    assert "export-check test_cases" not in result.stdout.str()


@pytest.mark.slow
def test_xdist_workers_show_nothing(suite):
    result, data = run_check(suite, "-n", "2", "-v")
    result.assert_outcomes(passed=2)
    assert len(data["cases"]) == 2
    assert not progress_lines(result), result.stdout.str()


def test_the_runner_reports_each_stage_then_the_end():
    from pytest_export.api import build, run

    calls: list[tuple[str, float]] = []
    import torch

    case = build("lin", torch.nn.Linear(3, 2), (torch.randn(2, 3),), None, {})
    result = run(case, {}, nodeid="lin", progress=lambda stage, seconds: calls.append((stage, seconds)))
    assert [s for s, _ in calls] == [*result.stages, ""]
    seconds = [t for _, t in calls]
    assert seconds == sorted(seconds) and seconds[0] >= 0


def test_status_line_fits_the_room_left_on_the_line():
    full = " export-check test_x.py::test_bert: guards (after 12.3 s)"
    assert status_line("test_x.py::test_bert", "guards", 12.34, 200) == full
    assert status_line("test_x.py::test_bert", "guards", 12.34, len(full)) == full
    cut = status_line("test_x.py::test_bert", "guards", 12.34, len(full) - 5)
    assert cut == " export-check ...y::test_bert: guards (after 12.3 s)" and len(cut) == len(full) - 5
    assert status_line("test_x.py::test_bert", "guards", 12.34, 20) == ""
    assert status_line("test_x.py::test_bert", "guards", 1.0, 0) == ""
    ascii_only = " export-check test_x.py::test_?[?]: export (after 1.0 s)"
    assert status_line("test_x.py::test_é[ü]", "export", 1.0, 200) == ascii_only


def test_short_name_and_threshold(monkeypatch):
    assert short_name("tests/models/test_x.py::TestA::test_bert[a/b]") == "test_x.py::TestA::test_bert[a/b]"
    assert short_name("test_x.py::test_bert") == "test_x.py::test_bert"
    monkeypatch.delenv(AFTER_ENV, raising=False)
    assert threshold() == PROGRESS_AFTER == 3.0
    for value, seconds in [("0", 0.0), ("0.5", 0.5), ("-1", 3.0), ("nan", 3.0), ("soon", 3.0)]:
        monkeypatch.setenv(AFTER_ENV, value)
        assert threshold() == seconds, value
