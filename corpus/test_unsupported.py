"""Known-unsupported patterns, each with the stage where it fails on this torch, and the supported form next
to it where there is one. An expected failure that starts passing is a strict XPASS: the table is kept honest.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim


@torch.library.custom_op("pytest_export_corpus::no_fake_kernel", mutates_args=())
def no_fake_kernel(x: torch.Tensor) -> torch.Tensor:
    return x * 3


class UsesOpWithoutFake(torch.nn.Module):
    def forward(self, x):
        return no_fake_kernel(x) + 1


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "custom-op"],
    xfail={"export": "a custom op needs a fake (meta) kernel for export: register one with @op.register_fake"},
)
def test_custom_op_without_fake_kernel():
    return UsesOpWithoutFake(), (torch.randn(3),)


class GraphBreak(torch.nn.Module):
    def forward(self, x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2


@pytest.mark.exportable(
    strict=True,
    tags=["patterns", "unsupported", "strict", "graph-break"],
    xfail={"export": "strict export cannot contain a graph break"},
)
def test_graph_break_strict():
    return GraphBreak(), (torch.ones(3),)


@pytest.mark.exportable(tags=["patterns", "graph-break", "non-strict"])
def test_graph_break_non_strict():
    # non-strict export traces Python as it runs: the graph-break marker is a no-op
    return GraphBreak(), (torch.ones(3),)


class FloatOfTensor(torch.nn.Module):
    def forward(self, x):
        return x * float(x.sum())


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "data-dependent", "non-strict"],
    xfail={"export": "non-strict export cannot guard on the value of float(tensor); strict export can"},
)
def test_float_of_a_tensor_non_strict():
    return FloatOfTensor(), (torch.randn(3),)


@pytest.mark.exportable(strict=True, tags=["patterns", "data-dependent", "strict"])
def test_float_of_a_tensor_strict():
    return FloatOfTensor(), (torch.randn(3),)


class IntOfItem(torch.nn.Module):
    def forward(self, x):
        return int(x.item())


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "data-dependent", "non-strict"],
    xfail={"export": "int(x.item()) needs a specialized integer in non-strict export "
                     "(https://github.com/pytorch/pytorch/issues/137062)"},
)
def test_int_of_item_non_strict():
    return IntOfItem(), (torch.tensor(2),)


@pytest.mark.exportable(strict=True, tags=["patterns", "data-dependent", "strict"])
def test_int_of_item_strict():
    return IntOfItem(), (torch.tensor(2),)


class Shortcut(torch.nn.Module):
    """Behaves differently under export: the exported program is not the eager model."""

    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 2
        return x * 2 + 1e-3


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "is-exporting"],
    xfail={"compare": "forward takes a different path under torch.compiler.is_exporting(); compare catches it"},
)
def test_export_only_code_path_is_caught_by_compare():
    return Shortcut(), (torch.randn(4),)


class Pooled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        return F.adaptive_avg_pool2d(F.max_pool2d(self.conv(x), 2), 1)


@pytest.mark.exportable(
    dynamic_shapes={"x": {2: Dim("h", min=2, max=64)}},
    tags=["patterns", "unsupported", "dynamic", "size-one"],
    xfail={"export": "h // 2 == 1 for h in {2, 3} would be a size-1 axis, which export specializes; "
                     "declare min=4 (eager handles h=2)"},
)
def test_declared_range_reaching_a_size_one_intermediate():
    torch.manual_seed(0)
    return Pooled(), (torch.randn(1, 1, 8, 8),)


# A dynamic_shapes key that is no argument of forward is the test's own mistake: a usage error of the case, never a
# baselinable or xfail-able export failure (#32), so it has no case here (tests/test_dynamic_shapes_forms.py).


class SizeAsTensor(torch.nn.Module):
    def forward(self, x):
        return x.new_tensor(x.shape[0]) * x


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}},
    tags=["patterns", "unsupported", "dynamic", "specialization"],
    xfail={"export": "new_tensor(x.shape[0]) reads the size as a Python int, so the Dim is specialized to 3"},
)
def test_symbolic_size_put_into_a_tensor():
    return SizeAsTensor(), (torch.randn(3),)


class ParameterUpdateInForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))

    def forward(self, x):
        with torch.no_grad():
            self.weight.mul_(0.5)
        return x * self.weight


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "mutation", "parameters"],
    grad=True,  # with autograd on, as training code runs it (under no_grad the decomposed program works)
    xfail={"decomp": "an in-place update of a parameter under no_grad exports, but the decomposed program run with "
                     "autograd on raises 'a leaf Variable that requires grad is being used in an in-place operation' "
                     "(related: https://github.com/pytorch/pytorch/issues/159623)"},
)
def test_parameter_updated_in_forward():
    return ParameterUpdateInForward(), (torch.randn(3),)


class ExplicitGenerator(torch.nn.Module):
    def forward(self, x):
        g = torch.Generator().manual_seed(1)
        return x + torch.rand(x.shape, generator=g)


@pytest.mark.exportable(
    tags=["patterns", "unsupported", "random", "silent"],
    xfail={
        "serde": "a torch.Generator made in forward is lost by save/load: the reloaded program draws other numbers",
        "decomp": "a torch.Generator made in forward is lost by run_decompositions(): other numbers are drawn",
        "guards": "the exported program keeps one torch.Generator across calls: from its second call on it "
                  "draws other numbers than eager, which seeds a fresh one per call",
        "retrace": "a torch.Generator made in forward is lost by re-exporting ep.module(): other numbers are drawn",
    },
)
def test_explicit_generator_in_forward():
    # export and compare pass: the defect is silent on the first call of the exported program
    return ExplicitGenerator(), (torch.randn(3),)


class AutocastThenFloat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.linear(x)
        return y.float()


_AUTOCAST_STRICT = ("strict export records the cast after an autocast region with the wrong input dtype: "
                    "the program fails its own check 'Tensor dtype mismatch! Expected: Float, Got: BFloat16'")


@pytest.mark.exportable(
    strict=True,
    tags=["patterns", "unsupported", "autocast", "strict"],
    xfail={"compare": _AUTOCAST_STRICT, "serde": _AUTOCAST_STRICT, "decomp": _AUTOCAST_STRICT,
           "retrace": "the same wrong dtype stops re-exporting ep.module() (strict): 'Tensor dtype mismatch! "
                      "Expected: torch.float32, Got: torch.bfloat16' in _assert_tensor_metadata"},
)
def test_cast_after_autocast_region_strict():
    torch.manual_seed(0)
    return AutocastThenFloat(), (torch.randn(4, 8),)


@pytest.mark.exportable(tags=["patterns", "autocast", "non-strict"])
def test_cast_after_autocast_region_non_strict():
    torch.manual_seed(0)
    return AutocastThenFloat(), (torch.randn(4, 8),)
