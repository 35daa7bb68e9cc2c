"""``--export-devices cpu,cuda``: each device is its own item, exported and compared there; the ``cuda`` stage
compares the CUDA program with the CPU one. CI has no GPU: CUDA items are skipped with the reason there."""

from __future__ import annotations

import pytest
import torch

import pytest_export
from pytest_export.context import Context, StageFailure
from pytest_export.declare.case import Case
from pytest_export.declare.options import CaseOptions
from pytest_export.stages.cuda import compare_across_devices, tolerance_for
from pytest_export.stages.cuda import run as stage_cuda
from pytest_export.torchside.observe import Observation
from tests.helpers import cases_by_name, run_check, statuses, write_cases

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)")

CASES = '''
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.l(x).relu()

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}}, tags=["dev"])
def test_mlp():
    torch.manual_seed(0)
    return MLP(), (torch.randn(4, 8),)
'''


def test_cuda_items_are_skipped_with_the_reason_not_dropped(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-devices", "cpu,cuda", "--export-examples", "2")
    cases = cases_by_name(data)
    assert sorted(cases) == ["test_mlp[cpu]", "test_mlp[cuda]"]
    assert cases["test_mlp[cpu]"]["outcome"] == "passed" and cases["test_mlp[cpu]"]["device"] == "cpu"
    assert "cuda" not in cases["test_mlp[cpu]"]["stages"]
    if torch.cuda.is_available():
        result.assert_outcomes(passed=2)
        assert statuses(cases["test_mlp[cuda]"])["cuda"] == "passed"
    else:
        result.assert_outcomes(passed=1, skipped=1)
        assert cases["test_mlp[cuda]"]["outcome"] == "skipped"
        assert "CUDA is not available" in cases["test_mlp[cuda]"]["reason"]
        result.stdout.fnmatch_lines(["pytest-export: 2 cases: 1 passed, 1 skipped*"])  # green: one line, the skip in it
        full, _ = run_check(pytester, "--export-devices", "cpu,cuda", "--export-examples", "2", "--export-summary=full")
        full.stdout.fnmatch_lines(["*conformance*"])
        r2, _ = run_check(pytester, "--export-devices", "cuda", "-rs")
        r2.stdout.fnmatch_lines(["SKIPPED*CUDA is not available*test_mlp[[]cuda[]]*--export-devices*"])


def test_default_devices_follow_the_machine(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-examples", "2")
    expected = ["test_mlp[cpu]", "test_mlp[cuda]"] if torch.cuda.is_available() else ["test_mlp"]
    assert sorted(cases_by_name(data)) == expected


@pytest.mark.slow
def test_modes_and_devices_compose(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-modes", "non-strict,strict", "--export-devices", "cpu,cuda",
                             "--export-examples", "2", "-n", "2")
    assert sorted(cases_by_name(data)) == ["test_mlp[non-strict-cpu]", "test_mlp[non-strict-cuda]",
                                           "test_mlp[strict-cpu]", "test_mlp[strict-cuda]"]


def test_unknown_device_is_a_usage_error(pytester):
    write_cases(pytester, CASES)
    result, _ = run_check(pytester, "--export-devices", "tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--export-devices: unknown value 'tpu'; valid: cpu, cuda, cuda:N*"])


# ---- the cross-device comparison, on CPU tensors ---------------------------------------------

def _obs(out):
    return Observation(out, ((), {}), {})


def test_cross_device_tolerances_fit_the_dtype():
    x = torch.randn(16)
    assert tolerance_for(torch.float32) == (1e-3, 1e-4) and tolerance_for(torch.int64) == (0.0, 0.0)
    # a TF32-sized difference passes in float32; the same relative error fails in float64
    compare_across_devices(_obs(x * (1 + 5e-4)), _obs(x), None, None)
    with pytest.raises(Exception, match="rtol=1e-07"):
        compare_across_devices(_obs(x.double() * (1 + 5e-4)), _obs(x.double()), None, None)
    with pytest.raises(Exception, match="output"):
        compare_across_devices(_obs(torch.tensor([1, 2])), _obs(torch.tensor([1, 3])), None, None)
    # the case's own tolerances replace the table
    compare_across_devices(_obs(x + 0.5), _obs(x), 0.0, 1.0)


class Offset(torch.nn.Module):
    def __init__(self, offset):
        super().__init__()
        self.offset = offset

    def forward(self, x):
        return x + self.offset


def _ctx(device_module, source_module, tmp_path):
    x = torch.randn(4)
    ctx = Context(Case(device_module, (x,), {}), CaseOptions(), "test_x[cuda]", tmp_path,
                  source=Case(source_module, (x,), {}))
    ctx.ep = torch.export.export(device_module, (x,))
    return ctx


def test_cuda_stage_compares_the_device_program_with_the_cpu_program(tmp_path):
    # stands in for the device run: the stage compares ctx.ep with an export of ctx.source
    data = stage_cuda(_ctx(Offset(1.0), Offset(1.0), tmp_path))
    assert data["max_abs_error"] == 0.0
    with pytest.raises(StageFailure, match="disagrees with the one exported on cpu"):
        stage_cuda(_ctx(Offset(1.0), Offset(1.01), tmp_path))


# ---- on a machine with CUDA (benchmarks/cuda_check.sh runs these) ----------------------------

class DeviceBranch(torch.nn.Module):
    """A planted device-dependent defect: the CUDA path adds a bias the CPU path does not."""

    def forward(self, x):
        return x * 2 + (0.1 if x.is_cuda else 0.0)


@pytest.mark.cuda
@needs_cuda
def test_cuda_clean_case_passes_every_stage():
    torch.manual_seed(0)
    res = pytest_export.check(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()), (torch.randn(4, 8),),
                              device="cuda", dynamic_shapes=({0: torch.export.Dim("b", min=2, max=16)},))
    assert res.outcome == "passed", res.failure_text()
    assert res.stages["cuda"].status == "passed"


@pytest.mark.cuda
@needs_cuda
def test_cuda_device_dependent_branch_fails_the_cuda_stage():
    res = pytest_export.check(DeviceBranch(), (torch.randn(4),), device="cuda")
    assert res.stages["compare"].status == "passed", res.failure_text()  # on the device, export matches eager
    assert res.stages["cuda"].status == "failed"
    assert "disagrees with the one exported on cpu" in res.stages["cuda"].message


@pytest.mark.cuda
@needs_cuda
def test_cuda_items_run_through_the_plugin(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-devices", "cpu,cuda", "--export-examples", "3")
    result.assert_outcomes(passed=2)
    case = cases_by_name(data)["test_mlp[cuda]"]
    assert statuses(case)["cuda"] == "passed" and case["device"] == "cuda"


def test_export_check_fixture_takes_a_device(pytester):
    write_cases(pytester, '''
class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

def test_on_cpu(export_check):
    result = export_check(Twice(), (torch.randn(3),), device="cpu")
    assert "cuda" not in result.stages

def test_on_cuda(export_check):
    result = export_check(Twice(), (torch.randn(3),), device="cuda")
    assert result.stages["cuda"].status == "passed"

def test_bad_device(export_check):
    export_check(Twice(), (torch.randn(3),), device="tpu")
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:xdist", "-rs")
    result.stdout.fnmatch_lines(["*test_bad_device: export_check(device='tpu'): valid devices are cpu, cuda, cuda:N*"])
    if torch.cuda.is_available():
        result.assert_outcomes(passed=2, failed=1)
    else:
        result.assert_outcomes(passed=1, failed=1, skipped=1)
        result.stdout.fnmatch_lines(["SKIPPED*export_check(device='cuda'): CUDA is not available*"])
