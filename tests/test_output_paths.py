"""The files a run writes: a path it cannot write to is a usage error at configure time, naming the option, the
path and why, before any case runs; a write that fails at the end of the run (a full disk, a permission changed
during it) is a line at the end of the terminal summary, the other files and the rest of the summary still
written, the case lines ended with their last line, never a traceback from ``pytest_sessionfinish``."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import LIN, write_cases

CASE = LIN + '''
@pytest.mark.exportable
def test_lin():
    open("ran", "w").close()
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)
'''


@pytest.mark.parametrize("args, message", [
    (["--export-report", "blocker/r.json"], "--export-report blocker/r.json: blocker is a file, so the directory "
                                            "blocker cannot be made"),
    (["--export-report", "folder"], "--export-report folder: folder is a directory"),
    (["--export-coverage", "blocker/deeper/cov.json"], "--export-coverage blocker/deeper/cov.json: blocker is a "
                                                       "file, so the directory blocker/deeper cannot be made"),
    (["--export-repro", "blocker"], "--export-repro blocker: blocker is a file, not a directory"),
    (["--export-summary-md", "locked/new/s.md"], "--export-summary-md locked/new/s.md: the directory locked/new does "
                                                 "not exist and cannot be made (locked is not writable)"),
    (["--export-baseline", "locked/b.json", "--export-baseline-update"],
     "--export-baseline locked/b.json: the directory locked is not writable"),
])
def test_a_path_the_run_cannot_write_is_a_usage_error_before_any_case_runs(pytester, monkeypatch, args, message):
    write_cases(pytester, CASE)
    (pytester.path / "blocker").write_text("a file where a folder must be")
    (pytester.path / "folder").mkdir()
    (pytester.path / "locked").mkdir()
    access = os.access  # root may write anywhere: the locked folder is locked by os.access, as for any user

    def denied(path, mode, *a, **kw):
        return False if os.path.basename(os.fspath(path)) == "locked" and mode & os.W_OK else access(path, mode, *a, **kw)

    monkeypatch.setattr(os, "access", denied)
    result = pytester.runpytest("--export-check", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert message in err and "give a path in a writable directory" in err, err
    assert not (pytester.path / "ran").exists()  # no case ran
    assert "Traceback" not in err + result.stdout.str()


def test_a_good_path_in_a_folder_not_made_yet_is_made(pytester):
    write_cases(pytester, CASE)
    result = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "--export-report", "new/deep/r.json")
    assert result.ret == 0
    assert json.loads((pytester.path / "new/deep/r.json").read_text())["cases"]


FAILS_AT_THE_END = LIN + '''
import os

@pytest.mark.exportable
def test_lin():
    # after configure, before the end: the report's and the baseline's paths become folders, so their writes fail
    os.makedirs("out/r.json/x")
    os.makedirs("b.json/x")
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)
'''


def test_a_write_that_fails_at_the_end_is_a_line_of_the_summary(pytester):
    write_cases(pytester, FAILS_AT_THE_END)
    result = pytester.runpytest("--export-check", "-p", "no:cacheprovider", "-p", "no:xdist", "--export-summary=full",
                                "--export-report", "out/r.json", "--export-coverage", "cov.json",
                                "--export-baseline", "b.json", "--export-baseline-update")
    out = result.stdout.str()
    assert "Traceback" not in out + result.stderr.str() and "INTERNALERROR" not in out
    result.stdout.fnmatch_lines([
        "*export summary*",  # the summary before it, whole
        "decomposition coverage:*",
        "pytest-export: --export-baseline b.json: not written (Is a directory); the baseline keeps its old entries",
        "pytest-export: --export-report out/r.json: not written (Is a directory)",
        "pytest-export: the case lines out/r.jsonl hold every case: python -m pytest_export merge, gate and show "
        "read them",
        "*1 passed*",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # CI must not pass without the report it asked for
    assert json.loads((pytester.path / "cov.json").read_text())["ops"]  # the other files are still written
    lines = (pytester.path / "out/r.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "session-finish"  # the case lines end with their last line
    assert json.loads(lines[-1])["exitstatus"] == 1
