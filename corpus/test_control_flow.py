"""Control flow: torch.cond, map, while_loop, scan, Python branches on shapes, and data-dependent branches."""

from __future__ import annotations

import pytest
import torch
from functorch.experimental.control_flow import map as control_flow_map
from torch._higher_order_ops import while_loop
from torch._higher_order_ops.scan import scan
from torch.export import Dim


class Gate(torch.nn.Module):
    """Branches on the data: torch.cond keeps both branches in the program."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: self.linear(x).relu(), lambda x: x.cos() - 1, (x,))


def _gate():
    torch.manual_seed(0)
    return Gate().eval()


@pytest.mark.exportable(tags=["control-flow", "cond"])
def test_cond_on_data_true_branch():
    return _gate(), (torch.ones(3, 4),)


@pytest.mark.exportable(tags=["control-flow", "cond"])
def test_cond_on_data_false_branch():
    return _gate(), (-torch.ones(3, 4),)


@pytest.mark.exportable(strict=True, tags=["control-flow", "cond", "strict"])
def test_cond_strict():
    return _gate(), (torch.ones(3, 4),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}}, tags=["control-flow", "cond", "dynamic"])
def test_cond_with_dynamic_batch():
    return _gate(), (torch.randn(5, 4),)


class ShapePredicate(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x.cos(), lambda x: x.sin(), (x,))


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", min=1, max=32)}}, tags=["control-flow", "cond", "dynamic", "shape-branch"],
)
def test_cond_on_a_symbolic_shape():
    return ShapePredicate(), (torch.randn(6, 3),)


class ShapePredicateSlicing(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.shape[0] > 4, lambda x: x[:4].sum(0), lambda x: x.sum(0), (x,))


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", min=1, max=32)}},
    tags=["control-flow", "cond", "dynamic", "unsupported"],
    xfail={"export": "cond traces both branches over the whole range: x[:4] in the true branch needs b >= 4"},
)
def test_cond_branches_are_traced_for_every_size():
    return ShapePredicateSlicing(), (torch.randn(6, 3),)


class NestedCond(torch.nn.Module):
    def forward(self, x, y):
        def outer_true(x, y):
            return torch.cond(y.sum() > 0, lambda x, y: x + y, lambda x, y: x - y, (x, y))

        return torch.cond(x.mean() > 0, outer_true, lambda x, y: x * y, (x, y))


@pytest.mark.exportable(tags=["control-flow", "cond", "nested"])
def test_nested_cond():
    return NestedCond(), (torch.ones(3), torch.ones(3))


class MapRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, xs, y):
        return control_flow_map(lambda x, y: (x * self.w + y).tanh(), xs, y)


@pytest.mark.exportable(
    dynamic_shapes={"xs": {0: Dim("rows", min=1, max=16)}, "y": None}, tags=["control-flow", "map", "dynamic"],
)
def test_map_over_rows():
    torch.manual_seed(0)
    return MapRows(), (torch.randn(5, 4), torch.randn(4))


@pytest.mark.exportable(strict=True, tags=["control-flow", "map", "strict"])
def test_map_strict():
    torch.manual_seed(0)
    return MapRows(), (torch.randn(5, 4), torch.randn(4))


class Doubling(torch.nn.Module):
    def forward(self, x, steps):
        def cond_fn(i, x):
            return i < steps.sum()

        def body_fn(i, x):
            return i + 1, x * 2 + 1

        i, out = while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.long), x))
        return i, out


@pytest.mark.exportable(tags=["control-flow", "while-loop"])
def test_while_loop_with_a_data_dependent_trip_count():
    return Doubling(), (torch.randn(3), torch.tensor([4]))


@pytest.mark.exportable(strict=True, tags=["control-flow", "while-loop", "strict"])
def test_while_loop_strict():
    return Doubling(), (torch.randn(3), torch.tensor([2]))


class RunningSum(torch.nn.Module):
    def forward(self, init, xs):
        def step(carry, x):
            carry = carry + x
            return carry, carry * 2

        return scan(step, init, xs)


@pytest.mark.exportable(tags=["control-flow", "scan"])
def test_scan_carries_state():
    return RunningSum(), (torch.zeros(4), torch.randn(6, 4))


class EvenColumns(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] % 2 == 0:  # decided at export time on static shapes
            return x[:, ::2]
        return x


@pytest.mark.exportable(tags=["control-flow", "shape-branch", "static"])
def test_python_branch_on_a_static_shape():
    return EvenColumns(), (torch.randn(3, 4),)


class Unrolled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x).tanh()
        return x


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}}, tags=["control-flow", "loop"])
def test_python_loop_is_unrolled():
    torch.manual_seed(0)
    return Unrolled().eval(), (torch.randn(2, 4),)


class DataBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


@pytest.mark.exportable(
    strict=True,
    tags=["control-flow", "strict", "unsupported"],
    xfail={"export": "strict export (TorchDynamo) reports data-dependent branching as Unsupported; use torch.cond"},
)
def test_data_dependent_branch_strict_unsupported():
    return DataBranch(), (torch.ones(3),)


@pytest.mark.api
def test_cond_program_keeps_both_branches(export_check):
    """The exported cond is one higher-order op with a subgraph per branch; both run correctly after export."""
    result = export_check(_gate(), (torch.ones(3, 4),), tags=["control-flow", "cond", "api"])
    ops = result.stages["decomp"].data["ops_after"]
    assert "aten.addmm.default" in ops and "aten.cos.default" in ops  # true and false branch alike
    ep = torch.export.export(_gate(), (torch.ones(3, 4),))
    conds = [n for n in ep.graph.nodes if n.op == "call_function" and n.target is torch.ops.higher_order.cond]
    assert len(conds) == 1
    gm = ep.module()
    for x in (torch.ones(3, 4), -torch.ones(3, 4)):
        torch.testing.assert_close(gm(x), _gate()(x))

