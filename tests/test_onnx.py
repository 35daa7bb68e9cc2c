"""Stage ``onnx``: the exported program through ``torch.onnx.export`` and ONNX Runtime, with planted defects.

Each conversion costs a few seconds; the pytester runs that convert run in subprocesses (an xdist run, or
``subprocess=True``): pytester drops the modules an in-process run imported, and ``onnx``/``onnxscript`` hold
state (protobuf descriptors, torch.onnx's registry) that must not be imported twice.
"""

from __future__ import annotations

import functools
import importlib.util

import sys

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.declare.options import SessionOptions
from pytest_export.report.conformance import deployment_matrix
from tests.helpers import cases_by_name, run_check, statuses, write_cases

INSTALL = 'pip install "pytest-export[onnx]"'
needs_onnx = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime")),
    reason=f"the onnx stage needs the [onnx] extra: {INSTALL}")
BATCH = Dim("b", min=2, max=16)
FAST = SessionOptions(check=True, examples=3, skip_stages=("serde", "decomp", "retrace"))
CONVERT_ONLY = SessionOptions(check=True, skip_stages=("serde", "decomp", "guards", "fuzz", "retrace"))


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x).relu()


def _small(tmp_path, **kw):
    torch.manual_seed(0)
    return pytest_export.check(Small(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}},
                               onnx=True, workdir=tmp_path, session=FAST, **kw)


# a custom operator torch.onnx has no translation for; its eager kernel scales by the row count
torch.library.define("pe_onnx_plant::scale_by_rows", "(Tensor x) -> Tensor")


@torch.library.impl("pe_onnx_plant::scale_by_rows", "CompositeExplicitAutograd")
def _scale_by_rows(x):
    return x * x.shape[0]


@torch.library.register_fake("pe_onnx_plant::scale_by_rows")
def _scale_by_rows_fake(x):
    return torch.empty_like(x)


class ScaleByRows(torch.nn.Module):
    def forward(self, x):
        return torch.ops.pe_onnx_plant.scale_by_rows(x) + 1


class Eigenvalues(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.eigvals(x).abs()


def test_off_by_default():
    res = pytest_export.check(Small(), (torch.randn(5, 8),), session=CONVERT_ONLY)
    assert "onnx" not in res.stages


def test_bad_keyword_type_is_a_usage_error():
    with pytest.raises(pytest_export.UsageError, match="'onnx' must be True, False or None"):
        pytest_export.check(Small(), (torch.randn(5, 8),), onnx="yes")


@needs_onnx
def test_a_clean_case_passes_and_records_its_data(tmp_path):
    res = _small(tmp_path)
    st = res.stages["onnx"]
    assert st.status == "passed", res.failure_text()
    d = st.data
    assert isinstance(d["opset"], int) and d["opset"] >= 18
    assert d["onnx_bytes"] > 0 and (tmp_path / "onnx" / "model.onnx").is_file()
    assert d["convert_s"] > 0 and d["ort_s"] >= 0 and d["max_abs_error"] < 1e-4 and d["max_rel_error"] < 1e-2
    assert d["dynamic_inputs"]["x.shape[0]"] not in ("", "?")  # a symbolic dim of the ONNX input
    # the guards' numeric boundaries of [4, 16] and fuzz's draws, each once
    assert d["sizes_checked"] >= 4 and "sizes b=4" in d["sizes"] and "sizes b=16" in d["sizes"]
    # ONNX Runtime has no range guards: out-of-range batches run; recorded, not failed. A wrong static size is refused
    assert "b=17 (max 16 + 1)" in d["accepted_out_of_range"] and d["refused"] >= 1
    assert "ONNX Runtime matches eager on the example" in st.message


@needs_onnx
def test_an_unsupported_custom_operator_fails_naming_it(tmp_path):
    res = pytest_export.check(ScaleByRows(), (torch.randn(5, 3),), onnx=True, workdir=tmp_path, session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "failed"
    assert "no ONNX translation for operator `pe_onnx_plant.scale_by_rows.default`" in st.message
    assert "No decompositions registered" in st.message  # the exporter's own diagnostic
    assert st.data["unsupported_op"] == "pe_onnx_plant.scale_by_rows.default"
    assert st.data["signature"] == "unsupported-op" and st.data["convert_s"] > 0


@needs_onnx
def test_an_aten_operator_without_onnx_translation_fails_naming_it(tmp_path):
    res = pytest_export.check(Eigenvalues(), (torch.randn(4, 4),), onnx=True, workdir=tmp_path, session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "failed"
    assert "`aten.linalg_eig.default`" in st.message and st.data["unsupported_op"] == "aten.linalg_eig.default"


@needs_onnx
def test_a_dynamic_axis_exported_static_fails_naming_it(tmp_path, monkeypatch):
    """Planted: torch 2.13 keeps every dynamic axis of an ExportedProgram symbolic in the ONNX inputs (min 1,
    derived dims, AUTO, unused and complex inputs all stayed ``dim_param``), so no real model loses one; the
    converted file is edited to pin ``x``'s batch to the example's 5."""
    import onnx

    real = torch.onnx.export

    def export_pinned(*args, **kwargs):
        out = real(*args, **kwargs)
        path = args[2]
        model = onnx.load(path)
        model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 5
        onnx.save(model, path)
        return out

    monkeypatch.setattr(torch.onnx, "export", export_pinned)
    res = _small(tmp_path)
    st = res.stages["onnx"]
    assert st.status == "failed"
    assert "declared-dynamic axes lost in conversion" in st.message
    assert "x.shape[0] (declared Dim('b', min=4, max=16)" in st.message and "(axis 0)" in st.message
    assert st.data["signature"] == "static-axis"


def _baked(x):
    """A wrong translation: the example's row count (5) baked in, where eager scales by the real one."""
    from onnxscript import opset18 as op

    return op.Mul(x, op.Constant(value_float=5.0))


@needs_onnx
def test_a_translation_wrong_at_a_probed_size_fails_there(tmp_path, monkeypatch):
    table = {torch.ops.pe_onnx_plant.scale_by_rows.default: _baked}
    monkeypatch.setattr(torch.onnx, "export", functools.partial(torch.onnx.export, custom_translation_table=table))
    res = pytest_export.check(ScaleByRows(), (torch.randn(5, 3),), dynamic_shapes={"x": {0: BATCH}}, onnx=True,
                              workdir=tmp_path, session=FAST)
    st = res.stages["onnx"]
    assert res.stages["guards"].status == "passed" and res.stages["fuzz"].status == "passed"
    assert st.status == "failed"  # right on the example (5 rows), wrong at the guards' boundary b=2
    assert "ONNX Runtime disagrees with eager on sizes b=2" in st.message
    assert st.data["signature"] == "mismatch" and st.data["max_abs_error"] > 0.1


@needs_onnx
def test_a_wrong_result_on_the_example_fails(tmp_path, monkeypatch):
    import onnxruntime

    class Off(onnxruntime.InferenceSession):
        def run(self, *a, **k):
            return [out + 1.0 for out in super().run(*a, **k)]

    monkeypatch.setattr(onnxruntime, "InferenceSession", Off)
    res = pytest_export.check(Small(), (torch.randn(5, 8),), onnx=True, workdir=tmp_path, session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "failed" and "ONNX Runtime disagrees with eager on the example inputs" in st.message


def test_without_the_extra_the_stage_is_skipped_with_the_install_line(pytester, monkeypatch):
    # as if the [onnx] extra were not installed; monkeypatch puts the module back for the worker's later tests
    # (tests/conftest.py keeps onnxruntime loaded across in-process runs, so a conftest's change would stay)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    write_cases(pytester, '''
@pytest.mark.exportable(onnx=True)
def test_marked():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
''')
    result, data = run_check(pytester, "--export-skip-stages", "serde,decomp,guards,fuzz,retrace")
    result.assert_outcomes(passed=1)
    st = cases_by_name(data)["test_marked"]["stages"]["onnx"]
    assert st["status"] == "skipped" and INSTALL in st["message"] and "onnxruntime" in st["message"]


PLUGIN_CASES = '''
class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.linear(x).relu()

@pytest.mark.exportable(onnx=True, dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}})
def test_marked():
    return Small(), (torch.randn(5, 8),)

@pytest.mark.exportable
def test_plain():
    return Small(), (torch.randn(5, 8),)
'''


@needs_onnx
@pytest.mark.slow
def test_onnx_through_the_plugin_marker_with_xdist_and_the_option(pytester):
    write_cases(pytester, PLUGIN_CASES)
    result, data = run_check(pytester, "-n", "2", "--export-examples", "2")
    result.assert_outcomes(passed=2)
    cases = cases_by_name(data)
    assert statuses(cases["test_marked"])["onnx"] == "passed"
    assert cases["test_marked"]["stages"]["onnx"]["sizes_checked"] >= 2
    assert "onnx" not in cases["test_plain"]["stages"]
    result, data = run_check(pytester, "--export-onnx", "--export-examples", "2", "-k", "plain", subprocess=True)
    result.assert_outcomes(passed=1)
    assert statuses(cases_by_name(data)["test_plain"])["onnx"] == "passed"


def test_the_deployment_matrix_has_a_row_per_case_that_ships():
    def case(nodeid, **stages):
        return {"nodeid": nodeid, "stages": {k: ({"status": v} if isinstance(v, str) else v) for k, v in stages.items()}}

    cases = [case("corpus/test_onnx.py::test_clean", export="passed", onnx="passed"),
             case("corpus/test_onnx.py::test_eig", export="passed",
                  onnx={"status": "xfailed", "signature": "unsupported-op"}),
             case("corpus/test_deployment.py::test_tiny", export="passed", aoti="passed", onnx="skipped"),
             case("corpus/test_basics.py::test_plain", export="passed")]
    text = deployment_matrix(cases)
    rows = {ln.split("|")[0].strip(): [c.strip() for c in ln.split("|")[1:]] for ln in text.splitlines() if " | " in ln}
    assert "test_basics.py::test_plain" not in rows  # no deployment stage ran
    assert rows["test_onnx.py::test_clean"] == ["passed", "-", "passed", "-"]  # executorch did not run
    assert rows["test_onnx.py::test_eig"] == ["passed", "-", "xfailed (unsupported-op)", "-"]
    assert rows["test_deployment.py::test_tiny"] == ["passed", "passed", "skipped", "-"]
    assert rows["all"] == ["3/0/0/0", "1/0/0/0", "1/0/1/1", "0/0/0/0"]
    assert deployment_matrix(cases[3:]) is None


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x * 2, x + torch.rand_like(x)


@needs_onnx
def test_values_fed_by_random_ops_are_held_to_their_shape_where_they_differ(tmp_path):
    res = pytest_export.check(Noisy(), (torch.randn(5, 3),), onnx=True, workdir=tmp_path, session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "passed", res.failure_text()
    assert "aten.rand_like.default" in st.data["random_ops"] and "compared by structure, shape and dtype" in st.message


class Upcast(torch.nn.Module):  # ONNX Runtime's CPU provider loads it: a Cast from bfloat16, float32 after
    def forward(self, x):
        return x.float() * 2


@needs_onnx
def test_a_bfloat16_input_is_the_harness_limit_an_error_never_a_skip(tmp_path):
    # ONNX Runtime's Python API takes numpy arrays, and numpy has no bfloat16: the harness cannot decide
    res = pytest_export.check(Upcast(), (torch.randn(4, 3, dtype=torch.bfloat16),), onnx=True, workdir=tmp_path,
                              session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "error" and "bfloat16" in st.message, res.failure_text()


class ScalarLoss(torch.nn.Module):  # a 0-d output, as a training step's loss
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x).pow(2).mean()


@needs_onnx
def test_a_0d_output_compares_as_0d(tmp_path):
    # numpy's ascontiguousarray makes a 0-d array 1-d: ONNX Runtime's scalar read as shape [1] against eager's []
    res = pytest_export.check(ScalarLoss(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: BATCH}}, onnx=True,
                              workdir=tmp_path, session=FAST)
    st = res.stages["onnx"]
    assert st.status == "passed", res.failure_text()
    assert st.data["sizes_checked"] >= 2 and st.data["max_abs_error"] < 1e-4


@needs_onnx
def test_an_output_of_another_shape_still_fails(tmp_path, monkeypatch):
    import onnxruntime

    class Reshaped(onnxruntime.InferenceSession):  # the same values, one axis more: shape [1] against eager's []
        def run(self, *a, **k):
            return [out.reshape(1, *out.shape) for out in super().run(*a, **k)]

    monkeypatch.setattr(onnxruntime, "InferenceSession", Reshaped)
    res = pytest_export.check(ScalarLoss(), (torch.randn(5, 8),), onnx=True, workdir=tmp_path, session=CONVERT_ONLY)
    st = res.stages["onnx"]
    assert st.status == "failed" and "ONNX Runtime disagrees with eager on the example inputs" in st.message
