"""Harness defects the breadth slice turned up (issue #55), each planted: every one had ended a case `error`."""

from __future__ import annotations

import functools

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


# --- a vmap level left on by a program that raised inside it -------------------------------------------------------


def test_a_call_that_raises_inside_vmap_leaves_no_vmap_level_behind():
    from torch._C._functorch import _vmap_increment_nesting, get_dynamic_layer_stack_depth

    from pytest_export.torchside.observe import observe

    def raises_inside_vmap(x):  # what an exported program with vmap traced into it does at a size that fails
        _vmap_increment_nesting(x.shape[0], "error")
        raise RuntimeError("an op inside the vmapped region failed")

    base = get_dynamic_layer_stack_depth()
    with pytest.raises(RuntimeError, match="inside the vmapped region"):
        observe(raises_inside_vmap, torch.nn.Module(), (torch.randn(3, 2),), {})
    assert get_dynamic_layer_stack_depth() == base
    torch.randn(2)  # raw torch with the level left on: "vmap: called random operation while in randomness error mode"


def test_a_stage_that_raises_inside_vmap_leaves_no_vmap_level_behind():
    from torch._C._functorch import _vmap_increment_nesting, get_dynamic_layer_stack_depth

    from pytest_export.torchside.leftovers import closing_transforms

    def stage():
        _vmap_increment_nesting(2, "error")
        _vmap_increment_nesting(2, "error")
        raise ValueError("the stage crashed")

    base = get_dynamic_layer_stack_depth()
    with pytest.raises(ValueError):
        closing_transforms(stage)
    assert get_dynamic_layer_stack_depth() == base


# --- fake tensors a fake run left in the model's own cache -----------------------------------------------------------


@functools.lru_cache(maxsize=8)
def patch_coordinates(h: int, w: int) -> torch.Tensor:
    """Per-size coordinates cached as transformers' DINOv3 caches them (``get_patches_center_coordinates``)."""
    return torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij"), -1).flatten(0, 1).float()


class CachedCoordinates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(2, 4)

    def forward(self, x):  # x: (batch, channels, h, w)
        coords = patch_coordinates(int(x.shape[2]), int(x.shape[3])) if not torch.compiler.is_compiling() else (
            torch.stack(torch.meshgrid(torch.arange(x.shape[2]), torch.arange(x.shape[3]), indexing="ij"), -1)
            .flatten(0, 1).float())
        return x.flatten(2).mean(1)[..., None] * self.proj(coords)


def test_a_models_size_cache_filled_by_a_fake_run_does_not_reach_the_numeric_runs():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    model = CachedCoordinates().eval()
    with FakeTensorMode():  # raw torch: a fake run fills the model's cache with a fake tensor ...
        patch_coordinates(5, 6)
    assert isinstance(patch_coordinates(5, 6), FakeTensor)  # ... which the next real call at that size gets back
    patch_coordinates.cache_clear()
    h, w = Dim("h", min=2, max=12), Dim("w", min=2, max=12)
    res = pytest_export.check(model, (torch.randn(2, 3, 6, 7),), dynamic_shapes={"x": {0: Dim("b", min=1, max=4),
                                                                                     2: h, 3: w}})
    assert {s.status for s in res.stages.values()} == {"passed"}, res.failure_text()
