"""Every form `dynamic_shapes` takes reaches export intact: unbounded Dims, ShapesCollection, AdditionalInputs."""

from __future__ import annotations

import torch
from torch.export import AdditionalInputs, Dim, ShapesCollection

import pytest_export


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


def test_unbounded_dim_records_an_open_range():
    # sympy's int_oo raises AttributeError (not OverflowError) from int(); the export stage must not crash on it
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)),
                              dynamic_shapes={"x": {0: Dim("b")}, "y": {0: Dim("b")}})
    assert res.outcome == "passed", res.failure_text()
    assert list(res.stages["export"].data["range_constraints"].values()) == [[0, None]]


def test_shapes_collection_is_resolved_on_the_case_inputs():
    # a ShapesCollection is keyed by tensor identity; the harness exports clones of the inputs
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    sc = ShapesCollection()
    b = Dim("b", min=2, max=16)
    sc[x] = {0: b}
    sc[y] = {0: b}
    res = pytest_export.check(Add(), (x, y), dynamic_shapes=sc)
    assert res.outcome == "passed", res.failure_text()
    assert list(res.stages["export"].data["range_constraints"].values()) == [[2, 16]]


def test_shapes_collection_for_other_tensors_fails_export_clearly():
    sc = ShapesCollection()
    stray = torch.randn(4, 3)  # kept alive: the collection holds ids, which a freed tensor's successor may reuse
    sc[stray] = {0: Dim("b", max=16)}
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=sc)
    assert res.stages["export"].status == "failed"
    assert "not found in args" in res.stages["export"].message


def test_additional_inputs_make_the_varying_axis_dynamic():
    ai = AdditionalInputs()
    ai.add((torch.randn(6, 3), torch.randn(6, 3)))
    res = pytest_export.check(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=ai)
    assert res.outcome == "passed", res.failure_text()
    (bounds,) = res.stages["export"].data["range_constraints"].values()
    assert bounds[1] is None
