"""Stage ``executorch``: the exported program lowered with ExecuTorch and run in its runtime, with planted defects.

The tests that lower skip, with the install line, where executorch is not installed. A lowering costs about a
second (the first of a process three more: XNNPACK's set-up); runs through the plugin with ``-n 2`` go to worker
processes, and tests/conftest.py keeps executorch loaded across in-process runs (its C extension loads once).
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.declare import settings
from pytest_export.declare.options import SessionOptions, merge
from pytest_export.report.conformance import deployment_matrix
from tests.helpers import cases_by_name, run_check, statuses, write_cases

INSTALL = 'pip install "pytest-export[executorch]"'
BATCH = Dim("b", min=2, max=16)
FAST = SessionOptions(check=True, examples=3, skip_stages=("serde", "decomp", "retrace"))
LOWER_ONLY = SessionOptions(check=True, skip_stages=("serde", "decomp", "guards", "fuzz", "retrace"))


def _executorch():
    """The runtime module, or a skip naming the extra (every test below that lowers calls it first)."""
    return pytest.importorskip("executorch.runtime", reason=f"the executorch stage needs the [executorch] extra: "
                                                            f"{INSTALL}")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x).relu().softmax(-1)


def _small(tmp_path, dynamic_shapes=None, session=FAST, **kw):
    torch.manual_seed(0)
    return pytest_export.check(Small(), (torch.randn(5, 8),), dynamic_shapes=dynamic_shapes or {"x": {0: BATCH}},
                               workdir=tmp_path, session=session, **{"executorch": True, **kw})


class Eigenvalues(torch.nn.Module):  # aten.linalg_eig: outside Core ATen, no partitioner takes it
    def forward(self, x):
        return torch.linalg.eigvals(x).abs()


class Sorted(torch.nn.Module):  # aten.sort: Core ATen, but the runtime's portable kernels have none
    def forward(self, x):
        return x.sort(-1).values + 1


# a custom operator: ExecuTorch runs one only through an out= kernel registered in its runtime
torch.library.define("pe_et_plant::scale_by_rows", "(Tensor x) -> Tensor")


@torch.library.impl("pe_et_plant::scale_by_rows", "CompositeExplicitAutograd")
def _scale_by_rows(x):
    return x * x.shape[0]


@torch.library.register_fake("pe_et_plant::scale_by_rows")
def _scale_by_rows_fake(x):
    return torch.empty_like(x)


class ScaleByRows(torch.nn.Module):
    def forward(self, x):
        return torch.ops.pe_et_plant.scale_by_rows(x) + 1


# ---- without executorch --------------------------------------------------------------------------------


def test_off_by_default():
    res = pytest_export.check(Small(), (torch.randn(5, 8),), session=LOWER_ONLY)
    assert "executorch" not in res.stages


def test_the_backend_list_comes_from_the_marker_or_the_option():
    assert merge(SessionOptions(), {"executorch": True}).executorch_backends == ("xnnpack",)
    opts = merge(SessionOptions(), {"executorch": "portable"})
    assert opts.executorch and opts.executorch_backends == ("portable",)
    opts = merge(SessionOptions(executorch=True, executorch_backends=("portable",)), {"executorch": None})
    assert opts.executorch and opts.executorch_backends == ("portable",)
    assert not merge(SessionOptions(executorch=True), {"executorch": False}).executorch
    parse = settings.BY_NAME["export_executorch_backends"].parse
    assert parse(None, "--export-executorch-backends") == ("xnnpack",)
    assert parse(["portable"], "--export-executorch-backends") == ("portable",)
    with pytest.raises(ValueError, match="--export-executorch-backends must name backends of xnnpack, portable"):
        parse(["xnnpack,portable"], "--export-executorch-backends")
    for bad in ("yes", ["vulkan"], ["xnnpack", "portable"], []):
        with pytest.raises(pytest_export.UsageError, match="'executorch' must name backends of xnnpack, portable"):
            pytest_export.check(Small(), (torch.randn(5, 8),), executorch=bad)


def test_without_the_extra_the_stage_is_skipped_with_the_install_line(pytester, monkeypatch):
    # as if executorch were not installed; monkeypatch puts it back for the worker's later tests
    monkeypatch.setitem(sys.modules, "executorch", None)
    write_cases(pytester, '''
@pytest.mark.exportable(executorch=True)
def test_marked():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
''')
    result, data = run_check(pytester, "--export-skip-stages", "serde,decomp,guards,fuzz,retrace")
    result.assert_outcomes(passed=1)
    st = cases_by_name(data)["test_marked"]["stages"]["executorch"]
    assert st["status"] == "skipped" and INSTALL in st["message"] and "executorch" in st["message"]


def test_the_deployment_matrix_has_an_executorch_column():
    def case(nodeid, **stages):
        return {"nodeid": nodeid, "stages": {k: ({"status": v} if isinstance(v, str) else v) for k, v in stages.items()}}

    cases = [case("corpus/test_deployment.py::test_clean", export="passed", onnx="passed", executorch="passed"),
             case("corpus/test_deployment.py::test_eig", export="passed",
                  executorch={"status": "failed", "signature": "unsupported-op"})]
    text = deployment_matrix(cases)
    rows = {ln.split("|")[0].strip(): [c.strip() for c in ln.split("|")[1:]] for ln in text.splitlines() if " | " in ln}
    assert rows["case"] == ["export", "aoti", "onnx", "executorch"]
    assert rows["test_deployment.py::test_clean"] == ["passed", "-", "passed", "passed"]
    assert rows["test_deployment.py::test_eig"] == ["passed", "-", "-", "failed (unsupported-op)"]
    assert rows["all"][-1] == "1/1/0/0"


# ---- lowered and run ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_clean_case_passes_and_records_its_data(tmp_path):
    _executorch()
    res = _small(tmp_path)
    st = res.stages["executorch"]
    assert st.status == "passed", res.failure_text()
    d = st.data
    assert d["backends"] == ["xnnpack"] and d["delegates"] == 1 and d["delegated_ops"] >= 2 and d["portable_ops"] == 0
    assert d["pte_bytes"] == (tmp_path / "executorch" / "model.pte").stat().st_size > 0
    assert d["lower_s"] > 0 and d["run_s"] >= 0 and d["load_s"] >= 0
    assert d["max_abs_error"] < 1e-5 and d["max_rel_error"] < 1e-3
    # the guards' numeric boundaries and fuzz's draws, each once, the largest first
    assert d["sizes_checked"] >= 4 and d["sizes"][0] == "sizes b=16" and "sizes b=2" in d["sizes"]
    # a bounded memory plan: max + 1 is refused with the runtime's reason; so is a wrong static size
    assert d["refused"] >= 2 and any(r.startswith("b=17 (max 16 + 1)") and "Attempted to resize a bounded tensor"
                                     in r for r in d["refusals"])
    assert "the ExecuTorch runtime matches eager on the example and" in st.message and "delegated" in st.message


def test_portable_means_no_partitioner(tmp_path):
    _executorch()
    res = _small(tmp_path, session=LOWER_ONLY, executorch="portable")
    st = res.stages["executorch"]
    assert st.status == "passed", res.failure_text()
    assert st.data["backends"] == ["portable"] and st.data["delegated_ops"] == 0 and st.data["delegates"] == 0
    assert st.data["portable_ops"] >= 3 and "aten.addmm.default" in st.data["portable_op_names"]


class Flagged(torch.nn.Module):  # constant inputs, as a language model's use_cache=False
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x, use_cache=True, scale=2):
        return self.linear(x) * scale if use_cache else self.linear(x)


@pytest.mark.slow
def test_constant_inputs_are_fed_as_the_runtime_expects_them(tmp_path):
    _executorch()
    res = pytest_export.check(Flagged(), (torch.randn(5, 8),), {"use_cache": False, "scale": 3}, executorch=True,
                              workdir=tmp_path, session=LOWER_ONLY)
    assert res.stages["executorch"].status == "passed", res.failure_text()


def test_an_operator_outside_core_aten_fails_naming_it_and_the_partitioner(tmp_path):
    _executorch()
    res = pytest_export.check(Eigenvalues(), (torch.randn(4, 4),), executorch=True, workdir=tmp_path,
                              session=LOWER_ONLY)
    st = res.stages["executorch"]
    assert st.status == "failed" and st.data["signature"] == "unsupported-op"
    assert st.data["unsupported_op"] == "aten.linalg_eig.default"
    assert ("operator `aten.linalg_eig.default`: the XNNPACK partitioner left it to the portable kernels, and it is "
            "outside the Core ATen opset") in st.message


def test_a_custom_operator_without_an_out_kernel_fails_naming_it(tmp_path):
    _executorch()
    res = pytest_export.check(ScaleByRows(), (torch.randn(5, 3),), executorch="portable", workdir=tmp_path,
                              session=LOWER_ONLY)
    st = res.stages["executorch"]
    assert st.status == "failed" and st.data["unsupported_op"] == "pe_et_plant::scale_by_rows"
    assert ("no partitioner was asked for (backends: portable), so it went to the portable kernels, and it has no "
            "out-variant kernel registered") in st.message


@pytest.mark.slow
def test_an_operator_the_runtime_has_no_kernel_for_fails_naming_it(tmp_path):
    _executorch()
    res = pytest_export.check(Sorted(), (torch.randn(5, 3),), executorch=True, workdir=tmp_path, session=LOWER_ONLY)
    st = res.stages["executorch"]
    assert st.status == "failed" and st.data["signature"] == "unsupported-op"
    assert st.data["unsupported_op"] == "aten::sort.values"
    assert "no kernel for `aten::sort.values`: the XNNPACK partitioner left it to the portable kernels" in st.message


@pytest.mark.slow
def test_a_wrong_result_at_a_probed_size_fails_there(tmp_path, monkeypatch):
    """Planted: the runtime's output is off by one wherever the batch is not the example's 5."""
    runtime = _executorch()
    real = runtime.Method.execute

    def off(self, inputs):
        out = real(self, inputs)
        return out if inputs[0].shape[0] == 5 else [o + 1 for o in out]

    monkeypatch.setattr(runtime.Method, "execute", off)
    res = _small(tmp_path)
    st = res.stages["executorch"]
    assert res.stages["guards"].status == "passed" and res.stages["fuzz"].status == "passed"
    assert st.status == "failed" and st.data["signature"] == "mismatch"
    assert "the ExecuTorch runtime disagrees with eager on sizes b=16" in st.message  # the largest first
    assert st.data["max_abs_error"] >= 0.9


@pytest.mark.slow
def test_a_wrong_result_on_the_example_fails(tmp_path, monkeypatch):
    runtime = _executorch()
    real = runtime.Method.execute
    monkeypatch.setattr(runtime.Method, "execute", lambda self, inputs: [o * 2 for o in real(self, inputs)])
    res = _small(tmp_path, session=LOWER_ONLY)
    st = res.stages["executorch"]
    assert st.status == "failed" and "the ExecuTorch runtime disagrees with eager on the example inputs" in st.message


@pytest.mark.slow
def test_an_in_range_size_the_runtime_refuses_fails_naming_it(tmp_path):
    """A dim without a max is planned at the example's size: the runtime refuses a larger in-range batch."""
    _executorch()
    res = _small(tmp_path, dynamic_shapes={"x": {0: Dim("b", min=2)}})
    st = res.stages["executorch"]
    assert res.stages["guards"].status == "passed"
    assert st.status == "failed" and st.data["signature"] == "refused-in-range"
    assert "the ExecuTorch runtime refused in-range sizes b=64, which the program runs" in st.message
    assert "Attempted to resize a bounded tensor with a maximum capacity of 40 elements" in st.message
    assert "b declared without a max" in st.message


PLUGIN_CASES = '''
class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.linear(x).relu()

@pytest.mark.exportable(executorch=True, dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}})
def test_marked():
    return Small(), (torch.randn(5, 8),)

@pytest.mark.exportable(executorch="portable", dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}})
def test_portable():
    return Small(), (torch.randn(5, 8),)

@pytest.mark.exportable
def test_plain():
    return Small(), (torch.randn(5, 8),)
'''


@pytest.mark.slow
def test_executorch_through_the_plugin_marker_with_xdist(pytester):
    _executorch()
    write_cases(pytester, PLUGIN_CASES)
    result, data = run_check(pytester, "-n", "2", "--export-examples", "2", "--export-skip-stages", "serde,decomp")
    result.assert_outcomes(passed=3)
    cases = cases_by_name(data)
    assert statuses(cases["test_marked"])["executorch"] == "passed"
    assert cases["test_marked"]["stages"]["executorch"]["sizes_checked"] >= 2
    assert cases["test_portable"]["stages"]["executorch"]["delegated_ops"] == 0
    assert "executorch" not in cases["test_plain"]["stages"]
    matrix = deployment_matrix(data["cases"])
    assert "executorch" in matrix.splitlines()[1] and "test_cases.py::test_marked" in matrix
