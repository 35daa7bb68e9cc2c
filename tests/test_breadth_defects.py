"""Harness defects the breadth slice turned up (issue #55), each planted: every one had ended a case `error`."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import pytest_export


class Inner(torch.nn.Module):
    def forward(self, x, w):
        return x * w


class ParameterView(torch.nn.Module):
    """A view of a parameter handed to a submodule, as transformers' ``causal_conv1d`` passes
    ``conv1d.weight.view(...)``."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x, self.w.view(4))


def test_a_parameter_view_passed_to_a_submodule_is_counted_and_every_stage_decides():
    from torch.utils.flop_counter import FlopCounterMode

    with pytest.raises(AssertionError, match="Expected gradient function to be set"):  # raw torch: its tracker
        with torch.no_grad(), FlopCounterMode(display=False):
            ParameterView()(torch.randn(2, 4))
    res = pytest_export.check(ParameterView(), (torch.randn(2, 4),), dynamic_shapes={"x": {0: Dim("b", min=1, max=8)}})
    assert {s.status for s in res.stages.values()} == {"passed"}, res.failure_text()
