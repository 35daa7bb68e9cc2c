"""Stage ``aoti``: AOTInductor compile into the run's temp dir, load, compare, refuse out-of-range sizes.

A compile costs seconds to tens of seconds (it runs the system C++ compiler). One small case runs in CI
(``slow``); the rest run where ``PYTEST_EXPORT_AOTI=1`` is set (locally, or by ``benchmarks/cuda_check.sh``).
"""

from __future__ import annotations

import os

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.util import environment
from tests.helpers import cases_by_name, run_check, statuses, write_cases

local = pytest.mark.skipif(not os.environ.get("PYTEST_EXPORT_AOTI"),
                           reason="AOTInductor compiles are slow: set PYTEST_EXPORT_AOTI=1 to run this one")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x).relu()


def _check(tmp_path, **kw):
    torch.manual_seed(0)
    return pytest_export.check(Small(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}},
                               aoti=True, workdir=tmp_path, **kw)


def test_environment_is_restored(monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere")
    monkeypatch.delenv("AOTI_RUNTIME_CHECK_INPUTS", raising=False)
    with environment(TORCHINDUCTOR_CACHE_DIR="/run/cache", AOTI_RUNTIME_CHECK_INPUTS="1"):
        assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/run/cache" and os.environ["AOTI_RUNTIME_CHECK_INPUTS"] == "1"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere" and "AOTI_RUNTIME_CHECK_INPUTS" not in os.environ


def test_off_by_default():
    res = pytest_export.check(Small(), (torch.randn(5, 8),))
    assert "aoti" not in res.stages


def test_bad_keyword_type_is_a_usage_error():
    with pytest.raises(pytest_export.UsageError, match="'aoti' must be True, False or None"):
        pytest_export.check(Small(), (torch.randn(5, 8),), aoti="yes")


def _fake_aoti(monkeypatch, loaded):
    """Stand-ins for compile and load (no C++ compile): the stage's own logic on a model of our choosing."""
    def compile_and_package(ep, package_path=None, **kw):
        open(package_path, "wb").write(b"package")
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", compile_and_package)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda path, *a, **k: loaded)


def test_a_model_that_accepts_out_of_range_sizes_fails(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = Small()
    _fake_aoti(monkeypatch, model)  # eager itself: runs on any batch size
    res = pytest_export.check(model, (torch.randn(5, 8),), dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}},
                              aoti=True, workdir=tmp_path)
    st = res.stages["aoti"]
    assert st.status == "failed"
    assert "accepted out-of-range sizes b=17 (max 16 + 1)" in st.message


def test_compile_and_load_failures_are_reported(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("C++ compile error: planted")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", boom)
    res = pytest_export.check(Small(), (torch.randn(5, 8),), aoti=True, workdir=tmp_path)
    assert res.stages["aoti"].status == "failed"
    assert "aoti_compile_and_package raised: RuntimeError: C++ compile error: planted" in res.stages["aoti"].message
    _fake_aoti(monkeypatch, None)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", boom)
    res = pytest_export.check(Small(), (torch.randn(5, 8),), aoti=True, workdir=tmp_path)
    assert "aoti_load_package raised" in res.stages["aoti"].message


@pytest.mark.slow
def test_small_case_compiles_loads_matches_and_refuses_out_of_range(tmp_path, monkeypatch):
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    res = _check(tmp_path)
    st = res.stages["aoti"]
    assert st.status == "passed", res.failure_text()
    assert st.data["compile_s"] > 0 and st.data["package_bytes"] > 0
    assert st.data["sizes_checked"] >= 2  # boundary sizes of [4, 16], not only the example
    assert st.data["refused"] >= 2  # b=17 (max + 1), b=3 (min - 1), a wrong static size
    assert st.data["cache_dir"] == str(tmp_path / "inductor-cache") and any((tmp_path / "inductor-cache").iterdir())
    assert (tmp_path / "aoti" / "model.pt2").is_file()
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before and "AOTI_RUNTIME_CHECK_INPUTS" not in os.environ

    # planted: a compiled model that computes something else (same cache dir: the compile is a cache hit)
    real = torch._inductor.aoti_load_package

    def load(path, *a, **k):
        model = real(path, *a, **k)
        return lambda *args, **kwargs: model(*args, **kwargs) + 1.0

    monkeypatch.setattr(torch._inductor, "aoti_load_package", load)
    res = _check(tmp_path)
    assert res.stages["aoti"].status == "failed"
    assert "the AOTInductor model disagrees with eager on the example inputs" in res.stages["aoti"].message


@local
def test_a_package_without_its_lower_bound_check_accepts_out_of_range_sizes(tmp_path):
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"aot_inductor.check_lowerbound": False}):
        res = _check(tmp_path)
    st = res.stages["aoti"]
    assert st.status == "failed"
    assert "accepted out-of-range sizes b=3 (min 4 - 1)" in st.message


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


@local
def test_a_broken_relation_is_stopped_inside_the_model_not_at_its_input_checks(tmp_path):
    b = Dim("b", min=2, max=16)
    res = pytest_export.check(Add(), (torch.randn(4, 2), torch.randn(4, 2)), aoti=True, workdir=tmp_path,
                              dynamic_shapes={"x": {0: b}, "y": {0: b}})
    st = res.stages["aoti"]
    assert st.status == "passed", res.failure_text()
    assert st.data["raised_inside"] and "breaking its relation" in st.data["raised_inside"][0]
    assert any("not at its input checks" in w for w in res.warnings)


@local
def test_aoti_through_the_plugin_with_xdist(pytester):
    write_cases(pytester, '''
class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.linear(x).relu()

@pytest.mark.exportable(aoti=True, dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}})
def test_marked():
    return Small(), (torch.randn(5, 8),)

@pytest.mark.exportable
def test_plain():
    return Small(), (torch.randn(5, 8),)
''')
    result, data = run_check(pytester, "-n", "2", "--export-examples", "2")
    result.assert_outcomes(passed=2)
    cases = cases_by_name(data)
    assert statuses(cases["test_marked"])["aoti"] == "passed"
    assert "aoti" not in cases["test_plain"]["stages"]
    result, data = run_check(pytester, "--export-aoti", "--export-examples", "2", "-k", "plain")
    assert statuses(cases_by_name(data)["test_plain"])["aoti"] == "passed"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (torch.cuda.is_available() is False)")
def test_aoti_on_cuda(tmp_path):
    torch.manual_seed(0)
    res = pytest_export.check(Small(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: Dim("b", min=4, max=16)}},
                              aoti=True, workdir=tmp_path, device="cuda")
    assert res.stages["aoti"].status == "passed", res.failure_text()
    assert res.stages["cuda"].status == "passed", res.failure_text()
