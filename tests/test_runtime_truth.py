"""The deployment runtimes held to the same truth as eager: their memory plan to the cap, their state to eager's,
their tolerances to what their kernel libraries' reduction order allows, and every failure to a message.

Tests that lower skip, with the install line, without the ``[executorch]`` / ``[onnx]`` extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.results import HarnessError
from pytest_export.declare import settings
from pytest_export.declare.options import SessionOptions, merge
from pytest_export.declare.values import parse_runtime_tolerance
from pytest_export.runtimes.checks import runtime_tolerance
from pytest_export.util import describe_exception

FAST = SessionOptions(check=True, examples=3, skip_stages=("serde", "decomp", "retrace"))


def _needs(module: str):
    return pytest.importorskip(module, reason=f"needs the [{module.split('.')[0]}] extra")


class Counter(torch.nn.Module):
    """Eager starts every call from count 0: its second call must not see 2 in the runtime either."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return x * self.count


class Cache(torch.nn.Module):
    """A KV-cache-like buffer: a call writes its first t rows; rows a larger earlier call wrote must not leak."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 32, 8))

    def forward(self, x):
        self.cache[:, : x.shape[1]].copy_(x)
        return self.cache.sum(1) + x.sum(1)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["executorch", "onnx"])
@pytest.mark.parametrize("model", [Counter, Cache])
def test_a_stateful_model_runs_in_the_runtime_from_eagers_state(model, runtime, tmp_path):
    _needs("executorch.runtime" if runtime == "executorch" else "onnxruntime")
    torch.manual_seed(0)
    x, ds = ((torch.randn(4, 3), {"x": {0: Dim("b", min=2, max=16)}}) if model is Counter
             else (torch.randn(1, 5, 8), {"x": {1: Dim("t", min=2, max=32)}}))
    res = pytest_export.check(model(), (x,), dynamic_shapes=ds, workdir=tmp_path, session=FAST, **{runtime: True})
    st = res.stages[runtime]
    assert st.status == "passed", st.message
    assert st.data["sizes_checked"] >= 2  # more than one call, each against eager's reset buffer


ATTENTION = '''
import pytest, torch
from torch.export import Dim

class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        return (self.q(x) @ self.k(x).transpose(-1, -2)).softmax(-1) @ self.v(x)

@pytest.mark.exportable(dynamic_shapes={"x": {1: Dim("t", min=2, max=16384)}}, executorch="portable")
def test_attention():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(1, 32, 16),)
'''


def _peak(tmp_path, skip: str) -> tuple[str, int]:
    """A run of ``test_cap.py`` under a 128 MB cap in its own process: its output and its peak RSS (``wait4``)."""
    argv = [sys.executable, "-m", "pytest", "test_cap.py", "--export-check", "--export-max-memory", "128MB",
            "--export-skip-stages", skip, "--export-examples", "3", "-p", "no:cacheprovider",
            "-p", "no:xdist", "--export-report", str(tmp_path / "report.json")]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return out, usage.ru_maxrss * 1024


@pytest.mark.slow
def test_the_runtimes_memory_plan_is_held_to_the_cap(tmp_path):
    """Planned at t=16384 the program needs ~2.1 GB before it runs; under a 128 MB cap it is planned at the
    largest size that fits, the stage grows the run's peak by no more than the cap, and the terminal says how far
    the runtime ran and why."""
    _needs("executorch.runtime")
    (tmp_path / "test_cap.py").write_text(textwrap.dedent(ATTENTION))
    _, without = _peak(tmp_path, "serde,decomp,retrace,executorch")
    out, with_stage = _peak(tmp_path, "serde,decomp,retrace")
    import json

    st = json.loads((tmp_path / "report.json").read_text())["cases"][0]["stages"]["executorch"]
    memory = st["memory"]
    assert memory["declared_need"] > 2**30 and memory["need"] <= memory["max_memory"] == 128 * 10**6
    assert memory["bounds"]["t"] < 16384
    assert f"executorch: run to t={memory['bounds']['t']} (its memory plan at the declared max needs" in out
    assert "runtime short of max:" in out
    # the stage (lowering in its child, the plan, eager's forward beside it) grows the run by no more than the cap
    assert with_stage - without <= memory["max_memory"], f"{with_stage / 1e6:.0f} MB vs {without / 1e6:.0f} MB"


WIDE = '''
import pytest, torch
from torch.export import Dim

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=1, max=65536)}}, executorch=["xnnpack"])
def test_wide():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 16)).eval(), \\
        (torch.randn(4, 16),)
'''


@pytest.mark.slow
def test_a_delegate_is_lowered_within_the_bounds_its_plan_fits(tmp_path):
    """XNNPACK sizes its tensors at the upper bounds it is lowered with, at its first run whatever that run's size:
    lowered at b=65536 (1 GB between the two layers) and only planned within the cap, a first run at b=4 grew the
    process by that much. Lowered again within the bounds the plan chose, the stage grows the run by no more than
    the cap."""
    _needs("executorch.runtime")
    (tmp_path / "test_cap.py").write_text(WIDE)
    _, without = _peak(tmp_path, "serde,decomp,retrace,executorch")
    out, with_stage = _peak(tmp_path, "serde,decomp,retrace")
    import json

    st = json.loads((tmp_path / "report.json").read_text())["cases"][0]["stages"]["executorch"]
    assert st["status"] == "passed" and st["delegates"], st
    assert st["memory"]["bounds"]["b"] < 65536 and "executorch: run to b=" in out
    assert with_stage - without <= st["memory"]["max_memory"], f"{with_stage / 1e6:.0f} MB vs {without / 1e6:.0f} MB"
def test_the_runtime_tolerance_allows_for_reduction_order_only():
    """float32 sums in another order differ at rel ~1e-6..1e-5: that passes; a wrong kernel's 1e-3 does not."""
    pick = runtime_tolerance("executorch", merge(SessionOptions(), {}))
    x = torch.randn(1000)
    assert pick(x) == (1e-4, 1e-4) and pick(torch.tensor([1, 2])) == (None, None)
    from pytest_export.torchside.compare import Mismatch, compare_leaves

    compare_leaves(x * (1 + 6e-6), x, pick)
    with pytest.raises(Mismatch, match=r"rtol=0.0001, atol=0.0001"):
        compare_leaves(x * (1 + 1e-3) + 1e-3, x, pick)
    with pytest.raises(Mismatch):  # integers stay exact
        compare_leaves(torch.tensor([1, 3]), torch.tensor([1, 2]), pick)


def test_a_runtime_tolerance_is_set_per_runtime_on_the_marker_and_the_ini():
    opts = merge(SessionOptions(runtime_tolerance={"onnx": (1e-3, None)}),
                 {"rtol": 0.5, "runtime_tolerance": {"executorch": {"atol": 1e-7}}})
    assert runtime_tolerance("executorch", opts)(torch.zeros(2)) == (1e-4, 1e-7)
    assert runtime_tolerance("onnx", opts)(torch.zeros(2)) == (1e-3, 1e-4)
    parse = settings.BY_NAME["export_runtime_tolerance"].parse
    assert parse(["executorch:1e-4:1e-5,onnx:0:0"], "--export-runtime-tolerance") == {
        "executorch": (1e-4, 1e-5), "onnx": (0.0, 0.0)}
    assert parse_runtime_tolerance({"onnx": (None, 1e-3)}) == {"onnx": (None, 1e-3)}
    for bad, said in [(["tflite:1:1"], "unknown runtime 'tflite'"), (["executorch:1e-4"], "is not RUNTIME:RTOL:ATOL"),
                      (["executorch:x:1"], "executorch's rtol must be a number >= 0")]:
        with pytest.raises(ValueError, match=said):
            parse(bad, "--export-runtime-tolerance")
    with pytest.raises(pytest_export.UsageError, match="'runtime_tolerance'.*unknown key 'rtl'"):
        pytest_export.check(torch.nn.Linear(2, 2), (torch.randn(3, 2),), runtime_tolerance={"onnx": {"rtl": 1}})


class Wide(torch.nn.Module):
    """One output element sums 4,590 float32 products: the portable kernels' order differs from ATen's."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4590, 64, bias=False)

    def forward(self, x):
        return self.linear(x)


@pytest.mark.slow
def test_the_measured_error_is_shown_and_a_tight_runtime_tolerance_fails_only_that_runtime(tmp_path):
    _needs("executorch.runtime")
    torch.manual_seed(0)
    args = (torch.randn(16, 4590),)
    res = pytest_export.check(Wide(), args, workdir=tmp_path, session=FAST, executorch="portable")
    st = res.stages["executorch"]
    assert st.status == "passed" and "max rel error" in st.message and "tolerance rtol 1e-04" in st.message
    tight = pytest_export.check(Wide(), args, workdir=tmp_path, session=FAST, executorch="portable",
                                runtime_tolerance={"executorch": (0.0, 0.0)})
    assert tight.stages["executorch"].status == "failed" and tight.stages["compare"].status == "passed"
    assert "(rtol=0, atol=0)" in tight.stages["executorch"].message


def test_the_other_backend_tells_a_partitioners_defect_from_the_models():
    _needs("executorch.runtime")
    from pytest_export.runtimes.lowering import other_backend

    text, record = other_backend(("xnnpack",), lambda other: None)
    assert 'with the portable kernels alone (executorch="portable") the runtime runs this right' in text
    assert "the XNNPACK partitioner's" in text and record == {"backends": ["portable"], "status": "passed"}
    text, record = other_backend(("portable",), lambda other: "it disagrees with eager: max abs error 1")
    assert 'with the XNNPACK partitioner (executorch="xnnpack") it fails too (it disagrees' in text
    assert record["status"] == "failed"


def test_an_other_backend_the_harness_could_not_run_is_undecided_not_failing_too():
    """The other backend's plan past the memory cap (ResNet-50 at real width, portable: 3.75 GB) had read "it fails
    too (not run: ...): not the XNNPACK partitioner's alone": a limit of the harness told as a verdict."""
    _needs("executorch.runtime")
    from pytest_export.runtimes.lowering import other_backend

    def attempt(other):
        raise HarnessError("its memory plan needs ~3.75 GB > max_memory 1.58 GB")

    text, record = other_backend(("xnnpack",), attempt)
    assert "it could not be checked (its memory plan needs ~3.75 GB" in text and "fails too" not in text
    assert record["status"] == "error"


def test_an_exception_without_a_message_says_so_and_where():
    def bare():
        raise AssertionError  # as a bare ``assert`` in a runtime's Python layer raises it

    with pytest.raises(AssertionError) as info:
        bare()
    text = describe_exception(info.value)
    assert text.startswith("AssertionError: (no message; raised at ") and "in bare" in text


def test_onnx_runtimes_copy_of_the_weights_is_held_to_the_cap_and_is_an_error_past_it(tmp_path):
    _needs("onnxruntime")
    _needs("onnxscript")
    res = pytest_export.check(torch.nn.Linear(256, 256), (torch.randn(4, 256),), workdir=tmp_path, session=FAST,
                              onnx=True, max_memory="64KB")
    st = res.stages["onnx"]
    # the harness could not decide whether the runtime is right: an error, never a skip or a pass
    assert st.status == "error" and "not run in ONNX Runtime: its copy of the weights needs" in st.message
    assert "> max_memory 64 kB" in st.message or "> max_memory 64" in st.message


@pytest.mark.slow
def test_the_lowerings_own_memory_is_held_to_the_cap_and_is_an_error_past_it(tmp_path):
    """ExecuTorch's lowering grows a process by about twice the weights (issue #42): it runs in a child held to the
    cap, and a lowering that would pass it is stopped, an error naming the option to raise, never a pass or a skip."""
    _needs("executorch.runtime")
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(12)]).eval()  # 50 MB of weights
    res = pytest_export.check(model, (torch.randn(2, 1024),), workdir=tmp_path, session=FAST, executorch="portable",
                              max_memory="48MB")
    st = res.stages["executorch"]
    assert st.status == "error", st.message
    assert "ExecuTorch's lowering and memory planning needed more than max_memory 48 MB" in st.message
    assert "raise --export-max-memory" in st.message
    roomy = pytest_export.check(model, (torch.randn(2, 1024),), workdir=tmp_path, session=FAST, executorch="portable",
                                max_memory="1GB")
    st = roomy.stages["executorch"]
    assert st.status == "passed", st.message
    assert 50 * 10**6 < st.data["lower_memory"] < 10**9  # the child's own memory, seen and recorded
