"""One verdict per commit (issue #51): the same tree gives the same verdicts in every run mode, so a baseline written
in one mode gates every other mode's run of the unchanged tree with exit 0.

The cases hold one of each kind of finding whose stage could depend on the draw or the mode: a program that refuses
one in-range size (proved by `guards`; `fuzz` may draw it), a mismatch only random sizes can meet (no planned probe
lands on it), an eager error at the top of the range (an edge), and a clean case. The modes: serial, `-n 2`, a fresh
copy under `CI=true` (no `.hypothesis/`, Hypothesis' own `ci` profile), and two shards merged and gated offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import write_cases

CASES = '''
class Refuses37(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 37:  # export keeps the guard x.shape[0] != 37: the program refuses 37
            return x - 1
        return x * 2


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO(min=2, max=64)}})
def test_proved_refusal():
    return Refuses37(), (torch.randn(8),)


class WrongAtSevens(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] % 10 == 7:  # eager differs from the program there
            return x * 3
        return x * 2


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}}, examples=40)
def test_fuzz_only_mismatch():
    return WrongAtSevens(), (torch.randn(8),)


class RaisesAtTop(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] == 64:
            raise ValueError("the model cannot take 64")
        return x + 1


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}})
def test_eager_error_at_an_edge():
    return RaisesAtTop(), (torch.randn(8),)


@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=64)}})
def test_clean():
    return torch.nn.ReLU(), (torch.randn(8),)
'''


def _pytest(cwd: Path, *args: str, ci: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "--export-check", "-p", "no:cacheprovider", "-p",
                           "no:randomly", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _gate(cwd: Path, report: str, baseline: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_export", "gate", report, "--baseline", baseline], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _fresh_copy(src: Path, dst: Path) -> Path:
    """The tree as a fresh checkout has it: the test file and the baselines, none of a run's files."""
    dst.mkdir()
    for path in src.iterdir():
        if path.suffix in (".py", ".ini", ".toml") or path.name.startswith("baseline"):
            shutil.copy(path, dst / path.name)
    return dst


def _failures(path: Path) -> dict:
    return json.loads(path.read_text())["failures"]


@pytest.mark.slow
def test_a_baseline_written_in_any_mode_gates_every_other_mode_with_exit_0(pytester, tmp_path):
    write_cases(pytester, CASES)
    root = pytester.path
    # the baseline written in each mode (each run also leaves its report)
    serial = _pytest(root, "--export-baseline", "baseline-serial.json", "--export-baseline-update",
                     "--export-report", "serial.json")
    assert serial.returncode == 0, serial.stdout + serial.stderr
    xdist = _pytest(root, "-n", "2", "--export-baseline", "baseline-xdist.json", "--export-baseline-update",
                    "--export-report", "xdist.json")
    assert xdist.returncode == 0, xdist.stdout + xdist.stderr
    fresh = _fresh_copy(root, tmp_path / "fresh")
    ci = _pytest(fresh, "--export-baseline", "baseline-ci.json", "--export-baseline-update",
                 "--export-report", "ci.json", ci=True)
    assert ci.returncode == 0, ci.stdout + ci.stderr
    shutil.copy(fresh / "baseline-ci.json", root / "baseline-ci.json")
    shutil.copy(fresh / "ci.json", root / "ci.json")

    baselines = ["baseline-serial.json", "baseline-xdist.json", "baseline-ci.json"]
    recorded = [_failures(root / b) for b in baselines]
    assert recorded[0] == recorded[1] == recorded[2], recorded
    # every kind of finding is in it, each in the stages that find it on every run
    by_case = {nodeid.split("::")[-1]: sorted(stages) for nodeid, stages in recorded[0].items()}
    assert by_case["test_proved_refusal"] == ["guards"], by_case  # fuzz leaves the proved refusal to guards
    assert "fuzz" in by_case["test_fuzz_only_mismatch"], by_case
    assert "test_clean" not in by_case and "test_eager_error_at_an_edge" in by_case, by_case

    # two shards, merged, gated offline
    for group in ("1", "2"):
        shard = _pytest(root, "--splits", "2", "--group", group, "--export-baseline", "baseline-serial.json",
                        "--export-report", f"shard-{group}.json")
        assert shard.returncode == 0, shard.stdout + shard.stderr
    merge = subprocess.run([sys.executable, "-m", "pytest_export", "merge", "-o", "merged.json", "shard-1.json",
                            "shard-2.json"], cwd=root, capture_output=True, text=True, timeout=300)
    assert merge.returncode == 0, merge.stdout + merge.stderr

    # each mode's run of the unchanged tree against each mode's baseline: no `new`, no `stale`
    for report in ("serial.json", "xdist.json", "ci.json", "merged.json"):
        for baseline in baselines:
            gate = _gate(root, report, baseline)
            assert gate.returncode == 0, f"{report} against {baseline}:\n{gate.stdout}{gate.stderr}"
    # and in a run, under CI=true in a fresh copy, against the baseline written serially
    again = _pytest(_fresh_copy(root, tmp_path / "again"), "-n", "2", "--export-baseline", "baseline-serial.json",
                    ci=True)
    assert again.returncode == 0, again.stdout + again.stderr
