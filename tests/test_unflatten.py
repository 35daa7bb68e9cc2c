"""Stage ``unflatten``: unflatten the program, compare, swap each preserved submodule for its eager original."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import pytest_export
from tests.helpers import cases_by_name, run_check, statuses, write_cases


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, scale: float):
        return self.linear(x) * scale


class Shortcut(torch.nn.Module):
    """An export-only shortcut inside a submodule: the exported block is not the eager one."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, scale: float):
        if torch.compiler.is_exporting():
            return self.linear(x) * scale
        return self.linear(x) * scale + 0.01


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x, scale: float):
        self.calls.add_(1)
        return x * scale + self.calls


class Model(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.block = block
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x, 2.0).relu())


def _check(block, **kw):
    torch.manual_seed(0)
    return pytest_export.check(Model(block), (torch.randn(3, 4),), preserve_module_call_signature=("block",), **kw)


def test_swap_keeps_outputs_on_a_clean_model():
    res = _check(Block(), dynamic_shapes={"x": {0: Dim("batch", min=1, max=16)}})
    st = res.stages["unflatten"]
    assert st.status == "passed", res.failure_text()
    assert st.data["swaps"] == {"block": "same"} and st.data["preserved"] == ["block"]


def test_swap_with_a_mutated_buffer_keeps_outputs():
    res = _check(Counter())
    assert res.stages["unflatten"].status == "passed", res.failure_text()


def test_defect_inside_a_preserved_submodule_is_located():
    res = _check(Shortcut())
    assert res.stages["compare"].status == "failed"
    st = res.stages["unflatten"]
    assert st.status == "failed"
    assert st.data["swaps"] == {"block": "fixes"}
    assert "the defect is inside `block`" in st.message


def test_stage_runs_only_with_preserved_signatures():
    torch.manual_seed(0)
    res = pytest_export.check(Model(Block()), (torch.randn(3, 4),))
    assert "unflatten" not in res.stages


def test_swap_that_changes_outputs_is_a_failure(monkeypatch):
    # plant a broken call boundary: the unflattened module calls the swapped-in submodule with another scale
    real = torch.export.unflatten

    def unflatten(ep, *a, **kw):
        mod = real(ep, *a, **kw)
        inner = mod.forward

        def forward(*args, **kwargs):
            out = inner(*args, **kwargs)
            return out + 1.0 if isinstance(mod.block, Block) else out

        mod.forward = forward
        return mod

    monkeypatch.setattr(torch.export, "unflatten", unflatten)
    res = _check(Block())
    st = res.stages["unflatten"]
    assert st.status == "failed", res.failure_text()
    assert st.data["swaps"] == {"block": "differs"}
    assert "the preserved call boundary is not kept" in st.message


def test_unknown_submodule_name_fails_export_clearly():
    res = pytest_export.check(Model(Block()), (torch.randn(3, 4),), name="test_m",
                              preserve_module_call_signature=("blok",))
    st = res.stages["export"]
    assert st.status == "failed"
    assert "test_m" in st.message and "'blok'" in st.message and "submodules: block, block.linear, head" in st.message


def test_bad_keyword_type_is_a_usage_error(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable(preserve_module_call_signature="block")
def test_str():
    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)
''')
    result, data = run_check(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_str*preserve_module_call_signature*not a bare string*"])
    assert "INTERNALERROR" not in result.stdout.str()


@pytest.mark.slow
def test_unflatten_through_the_plugin(pytester):
    write_cases(pytester, '''
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.linear(x)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Sequential(Block(), Block())
    def forward(self, x):
        return self.enc(x).sum(-1)

@pytest.mark.exportable(preserve_module_call_signature=("enc", "enc.0"))
def test_nested():
    return Model(), (torch.randn(2, 4),)
''')
    result, data = run_check(pytester, "-n", "2")
    result.assert_outcomes(passed=1)
    case = cases_by_name(data)["test_nested"]
    assert statuses(case)["unflatten"] == "passed"
    assert case["stages"]["unflatten"]["swaps"] == {"enc": "same", "enc.0": "same"}
