"""Ops the memory count cannot see into (issue #43): a ``torch.library.custom_op`` whose body allocates is predicted
from what its real call held inside at the example, scaled by its input growth squared; numeric probes of its case
run under the memory guard, and a size the guard refuses stops numerics there, said in the coverage.

The end-to-end tests run pytest in a child process and read its peak resident memory (``os.wait4``): the guard
limits the whole process's address space while a probe runs, and the peak is the process's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pytest_export.memory.cost import MEMORY_MARGIN, Costs, Measure, counted
from pytest_export.memory.opaque import address_guard, extrapolate, measured_call, opaque_name, refused

MB = 10**6
CAP = 256 * MB

# the reproduction: n x n float32 made inside, n floats returned; at n=16384 the call takes 1.07 GB
HIDDEN = '''
import pytest, torch
from torch.export import Dim

@torch.library.custom_op("opaquetest::hidden", mutates_args=())
def hidden(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    return torch.ones(n, n).{grow}.sum(0) * x

@hidden.register_fake
def _(x):
    return torch.empty_like(x)

class Hidden(torch.nn.Module):
    def forward(self, x):
        return hidden(x) + 1

@pytest.mark.exportable(dynamic_shapes={{"x": {{0: Dim("n", min=2, max={top})}}}})
def test_hidden():
    return Hidden(), (torch.randn(64),)
'''
SQUARE = "clone()"  # n x n inside: the calibration's rule holds
CUBE = "unsqueeze(0).expand({n}, n, n).contiguous().sum(0)".format(n="n // 8")  # n^3 / 8: grows faster than it


def _child(tmp_path, grow: str, top: int, *extra: str) -> tuple[str, dict, int, int]:
    """Run the planted case in a child pytest under a 256 MB cap: (its output, the case's report, its exit code,
    its peak resident bytes)."""
    (tmp_path / "test_hidden.py").write_text(textwrap.dedent(HIDDEN.format(grow=grow, top=top)))
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "pytest", "test_hidden.py", "--export-check", "--export-max-memory", "256MB",
            "--export-skip-stages", "serde,decomp,retrace", "--export-examples", "3", "-p", "no:cacheprovider",
            "-p", "no:xdist", "--export-report", str(report), *extra]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    case = json.loads(report.read_text())["cases"][0]
    return out, case, os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> int:
    """The child's peak with the same case declared to the example's size only: the process, torch, export and
    the harness, no probe larger than the example."""
    out, case, code, peak = _child(tmp_path_factory.mktemp("baseline"), SQUARE, 64)
    assert code == 0, out
    return peak


@pytest.mark.slow
def test_a_custom_op_that_allocates_inside_is_calibrated_and_held_to_the_cap(tmp_path, baseline):
    """Predicted by its outputs alone, n=16384 (1.07 GB inside) ran numeric under a 256 MB cap and the process took
    1.05 GB. Calibrated, numerics stop below it, the coverage says why, and the process stays within the cap."""
    out, case, code, peak = _child(tmp_path, SQUARE, 16384)
    assert code == 0, out
    ranges = case["ranges"]
    row = ranges["dims"][0]
    assert row["shape_max"] == 16384 and row["numeric_max"] < 16384, row
    assert "needs ~" in row["why"] and "> max_memory 256 MB" in row["why"], row
    op = ranges["opaque"]["ops"]["opaquetest::hidden"]
    assert op["predicted"] == "calibrated" and op["hidden_bytes"] >= 64 * 64 * 4, op
    assert "n: numerics to" in out and "of 16384" in out
    assert "opaquetest::hidden (calibrated:" in out
    assert peak - baseline <= CAP, f"peak {peak / MB:.0f} MB, baseline {baseline / MB:.0f} MB"


@pytest.mark.slow
def test_an_op_that_grows_faster_than_its_calibration_is_stopped_by_the_guard(tmp_path, baseline):
    """n^3 / 8 floats inside: the squared rule predicts n=1024 at ~60 MB; it takes 537 MB. The guard refuses the
    allocation: the probe runs by shape instead, numerics stop below it, the case still passes (it was no fault of
    the program) and says so; under --export-require-numerics it is an error."""
    out, case, code, peak = _child(tmp_path, CUBE, 1024)
    assert code == 0, out
    assert case["outcome"] == "passed", out
    ranges = case["ranges"]
    stopped = ranges["opaque"]["stopped"]
    assert stopped and "stopped by the memory guard" in stopped[0], ranges["opaque"]
    row = ranges["dims"][0]
    assert row["numeric_max"] is not None and row["numeric_max"] < 1024, row
    assert "the guard stopped" in out and "stopped by the memory guard" in out
    assert peak - baseline <= CAP + 64 * 2**20, f"peak {peak / MB:.0f} MB, baseline {baseline / MB:.0f} MB"
    out, case, code, _ = _child(tmp_path, CUBE, 1024, "--export-require-numerics")
    assert case["outcome"] == "error" and "--export-require-numerics" in case["error"], case.get("error")


def test_the_hidden_bytes_scale_by_the_input_growth_squared_and_never_shrink():
    assert extrapolate(16_384, 256, 1024) == 16_384 * 16  # n 64 -> 256 floats: n x n grows 16x
    assert extrapolate(16_384, 256, 64) == 16_384  # a smaller call: what was measured (a workspace)
    assert extrapolate(500, 0, 1024) == 500
    costs = Costs(max_memory=CAP, budget=None)
    costs.example = Measure(0.0, 1000, 1000, 256, ops=2, opaque={"ns::op": {"calls": 1, "inputs": 256}})
    costs.real_peak = 1000
    costs.opaque = {"ns::op": {"calls": 1, "inputs": 256, "hidden": 16_384, "hidden_at": 256}}
    probe = Measure(0.0, 4000, 4000, 1024, ops=2, opaque={"ns::op": {"calls": 1, "inputs": 1024}})
    bare = Measure(0.0, 4000, 4000, 1024, ops=2)
    _, with_op = costs.predict(probe, 4.0)
    _, without = costs.predict(bare, 4.0)
    assert with_op - without == int(MEMORY_MARGIN * 16_384 * 16), (with_op, without)
    costs.opaque["ns::op"]["hidden"] = None  # not calibrated: its outputs alone, and the guard
    assert costs.predict(probe, 4.0) == costs.predict(bare, 4.0)


def test_what_an_opaque_call_holds_inside_is_measured_where_it_runs_real():
    @torch.library.custom_op("opaquetest::inside", mutates_args=())
    def inside(x: torch.Tensor) -> torch.Tensor:
        return torch.ones(512, 512).sum() * x  # 1 MB made and freed inside

    @inside.register_fake
    def _(x):
        return torch.empty_like(x)

    assert opaque_name(torch.ops.opaquetest.inside.default) == "opaquetest::inside"
    assert opaque_name(torch.ops.aten.add.Tensor) is None
    _, held = measured_call(torch.ops.opaquetest.inside.default, (torch.ones(4),), {})
    assert held is not None and 512 * 512 * 4 <= held < 2 * 512 * 512 * 4, held
    with counted(16) as m:
        inside(torch.ones(4))
    assert m.opaque["opaquetest::inside"]["hidden"] >= 512 * 512 * 4 and m.peak < 1024, m
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with counted(16, mode) as fake:
        inside(mode.from_tensor(torch.ones(4)))
    assert fake.opaque["opaquetest::inside"] == {"calls": 1, "inputs": 16, "hidden": None, "hidden_at": 0}


def test_the_guard_refuses_an_allocation_past_the_cap_as_an_error_and_is_lifted_after():
    if sys.platform != "linux":
        pytest.skip("the guard is Linux's RLIMIT_AS")
    import resource
    import threading

    before = resource.getrlimit(resource.RLIMIT_AS)
    with address_guard(64 * MB) as limit:
        assert limit is not None
        torch.ones(1024, 1024).sum()  # 4 MB: within
        started = threading.Thread(target=lambda: None)
        started.start()  # a new thread's stack fits the slack
        started.join()
        with pytest.raises(RuntimeError) as info:
            torch.empty(1024, 1024, 1024)  # 4.3 GB
    assert refused(str(info.value)), info.value
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert torch.empty(256, 1024, 1024).numel()  # 1.07 GB of address space, untouched: allowed again


def test_torchs_own_scalar_ops_are_not_opaque(tmp_path):
    """``x.device`` is ``prim::device`` in the dispatcher: torch's own, allocating nothing; it had put every zoo
    vision model under the memory guard with a line saying it could not be predicted."""
    import pytest_export

    assert opaque_name(torch.ops.prim.device.default) is None and opaque_name(torch.ops.aten.add.Tensor) is None

    class OnDevice(torch.nn.Module):
        def forward(self, x):
            return x + torch.ones(x.shape, device=x.device)

    b = torch.export.Dim("b", min=1, max=8)
    res = pytest_export.check(OnDevice(), (torch.randn(2, 3),), dynamic_shapes=({0: b},), workdir=tmp_path)
    assert res.outcome == "passed" and "opaque" not in res.info["ranges"]
