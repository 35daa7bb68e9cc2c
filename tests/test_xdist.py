"""The report is the same with and without xdist, and survives a worker that dies."""

from __future__ import annotations

import pytest

from tests.helpers import run_check, write_cases

CASES = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x)

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(3, 4),)

@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable(xfail={"compare": "known shortcut"})
def test_shortcut_xfail():
    return Shortcut(), (torch.ones(3),)

class Narrowing(torch.nn.Module):
    def forward(self, x):
        return x[:4] if x.shape[0] > 4 else x

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("n", max=16)}}, xfail={"export": "narrows n"})
def test_narrowing():
    return Narrowing(), (torch.randn(6),)
'''


def _timing(key: str) -> bool:
    """Fields that differ from run to run: the duration, the stages' seconds (``diagnosis_s``, ``load_s``), the
    sizes fuzz drew (Hypothesis' search is random here: no seed, not its derandomized ``ci`` profile), and the
    cost model's calibration in ``ranges`` (measured times; the default memory cap is divided among workers), and
    ``serde``'s ``memory`` (the cap it is held to, and the resident growth measured)."""
    return key in ("duration", "traceback", "drawn", "ranges", "memory") or key.endswith("_s")


def _normalized(data):
    out = []
    for case in data["cases"]:
        stages = {n: {k: v for k, v in s.items() if not _timing(k)} for n, s in case["stages"].items()}
        # torch_output is what torch printed while the case ran: torch warns once per process, so which case of a
        # worker catches a warning depends on the order the worker ran them in
        out.append({**{k: v for k, v in case.items() if not _timing(k) and k != "torch_output"}, "stages": stages})
    return out


def test_report_identical_with_n0_n2_and_without_xdist(pytester):
    write_cases(pytester, CASES)
    always = "--export-diagnose=always"  # test_narrowing's expected export failure is diagnosed too (#26)
    runs = {
        "no-xdist": run_check(pytester, "-p", "no:xdist", always, "--export-coverage", "c_off.json",
                              report="r_off.json"),
        "n0": run_check(pytester, "-n", "0", always, "--export-coverage", "c0.json", report="r0.json"),
        "n2": run_check(pytester, "-n", "2", always, "--junitxml", "j2.xml", "--export-coverage", "c2.json",
                        report="r2.json", subprocess=True),
    }
    for name, (result, data) in runs.items():
        result.assert_outcomes(passed=1, failed=1, xfailed=2)
        assert data is not None, name
        assert len(data["cases"]) == 4
    reference = _normalized(runs["no-xdist"][1])
    for name in ("n0", "n2"):
        assert _normalized(runs[name][1]) == reference, name
    coverage = [(pytester.path / f"c{n}.json").read_text() for n in ("_off", "0", "2")]
    assert coverage[0] == coverage[1] == coverage[2]
    assert (pytester.path / "c2.md").read_text() == (pytester.path / "c_off.md").read_text()
    # session data (torch version, Core ATen op count) reached the controller from the workers
    d2 = runs["n2"][1]
    assert d2["torch"] == runs["no-xdist"][1]["torch"] and d2["torch"]
    assert d2["coverage"]["core_ops_total"] > 100
    assert d2["coverage"]["core_ops_reached"]
    # JUnit XML written by the controller carries the workers' stage properties
    import xml.etree.ElementTree as ET

    props = {tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")}
             for tc in ET.parse(pytester.path / "j2.xml").getroot().iter("testcase")}
    assert props["test_shortcut"]["export.compare"] == "failed"
    assert props["test_shortcut_xfail"]["export.compare"] == "xfailed"
    narrowing = [c for c in d2["cases"] if c["nodeid"].endswith("test_narrowing")][0]
    assert "n = Dim('n', min=5, max=16)" in narrowing["stages"]["export"]["diagnosis"]["dynamic_shapes_fix"]
    lin = [c for c in d2["cases"] if c["nodeid"].endswith("test_lin")][0]
    assert lin["stages"]["export"]["range_constraints"] and lin["stages"]["decomp"]["ops_after"]


CRASH = '''
import os

class Dies(torch.nn.Module):
    def forward(self, x):
        os._exit(3)   # the worker process dies in the middle of the case

class Fine(torch.nn.Module):
    def forward(self, x):
        return x + 1

@pytest.mark.exportable(tags=["crash"])
def test_dies():
    return Dies(), (torch.ones(2),)

@pytest.mark.exportable
def test_fine():
    return Fine(), (torch.ones(2),)
'''


@pytest.mark.slow
def test_killed_worker_case_is_an_error_and_the_report_is_still_written(pytester):
    write_cases(pytester, CRASH)
    result, data = run_check(pytester, "-n", "2", report="r.json", subprocess=True)
    assert result.ret == 1
    assert data is not None, result.stdout.str()
    by = {c["nodeid"].split("::")[-1]: c for c in data["cases"]}
    assert by["test_fine"]["outcome"] == "passed"
    assert by["test_dies"]["outcome"] == "error"
    assert "crashed" in by["test_dies"]["error"] and by["test_dies"]["tags"] == ["crash"]
    assert data["torch"]  # the surviving worker (or the controller) still knows the torch version


SMALL = '''
class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

@pytest.mark.exportable
def test_relu():
    return torch.nn.ReLU(), (torch.ones(2),)

@pytest.mark.exportable
def test_tanh():
    return torch.nn.Tanh(), (torch.ones(2),)

@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)
'''

WORKER_CRASH = ("node down", "DumpError", "replacing crashed worker")


@pytest.mark.slow
def test_workers_finish_cleanly_and_report_like_n0(pytester):
    """execnet sends builtin types only: a non-builtin in ``workeroutput`` (torch.__version__ is a TorchVersion)
    used to kill every worker at session end. The run must end with no crashed worker, and the same cases."""
    write_cases(pytester, SMALL)
    r0, d0 = run_check(pytester, "-n", "0", report="r0.json")
    r2, d2 = run_check(pytester, "-n", "2", report="r2.json", subprocess=True)
    output = r2.stdout.str() + r2.stderr.str()
    for text in WORKER_CRASH:
        assert text not in output, output
    r2.assert_outcomes(passed=2, failed=1)
    assert d0 is not None and d2 is not None, output

    def outcomes(data):
        return {c["nodeid"]: (c["outcome"], {n: s["status"] for n, s in c["stages"].items()}) for c in data["cases"]}

    assert outcomes(d2) == outcomes(d0)
    assert d2["torch"] == d0["torch"]


def test_to_builtins_makes_workeroutput_sendable():
    import execnet
    import torch

    from pytest_export.session import to_builtins

    data = {"torch": torch.__version__, "core_ops": frozenset({"aten.b", "aten.a"}),
            "op_facts": {"aten.a": {"core": True, "decomposed": None}}, "n": (1, 2.5)}
    with pytest.raises(execnet.DataFormatError):  # what killed the workers
        execnet.dumps(data)
    out = to_builtins(data)
    assert out == {"torch": str(torch.__version__), "core_ops": ["aten.a", "aten.b"],
                   "op_facts": {"aten.a": {"core": True, "decomposed": None}}, "n": [1, 2.5]}
    assert type(out["torch"]) is str
    assert execnet.loads(execnet.dumps(out)) == out
    with pytest.raises(TypeError, match=r"workeroutput\['x'\]: .*object cannot be sent from an xdist worker"):
        to_builtins({"x": object()})


SLOW_TEARDOWN = '''
import time

class Slow:
    def __del__(self):
        time.sleep(0.5)

def pytest_unconfigure(config):
    """A worker whose last garbage collection finalizes for 6 s: execnet sends it SIGINT after 5."""
    if hasattr(config, "workerinput"):
        for _ in range(12):
            a = Slow()
            a.me = a
'''


@pytest.mark.slow
def test_a_green_run_under_xdist_prints_no_interrupt_from_a_worker_tearing_down(pytester):
    """A worker still tearing down 5 s after its results were sent gets execnet's SIGINT. It landed in whatever
    finalizer pytest's last garbage collection ran: a green ``-n auto`` shard printed a
    ``PytestUnraisableExceptionWarning`` with a ``KeyboardInterrupt`` from Hypothesis' internals (#32)."""
    pytester.makeconftest(SLOW_TEARDOWN)
    pytester.makepyfile(test_plain="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "2", "--export-check", "-p", "no:cacheprovider")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, output
    assert "KeyboardInterrupt" not in output and "Unraisable" not in output, output
