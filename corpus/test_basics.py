"""Basics: plain modules, parameters and buffers, pytree inputs and outputs, kwargs, scalars."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.export import Dim


class MLP(torch.nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.GELU(), torch.nn.Linear(d_hidden, d_out))

    def forward(self, x):
        return self.net(x)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}}, tags=["basics", "mlp"])
def test_mlp_dynamic_batch():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(4, 16),)


@pytest.mark.exportable(strict=True, tags=["basics", "strict"])
def test_mlp_strict():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(4, 16),)


class DictInOut(torch.nn.Module):
    def forward(self, inputs: dict, *, scale: float = 1.0):
        return {"sum": inputs["a"] + inputs["b"], "scaled": [inputs["a"] * scale, (inputs["b"].mean(),)]}


@pytest.mark.exportable(tags=["basics", "pytree", "kwargs"])
def test_dict_input_list_output_kwargs():
    return DictInOut(), ({"a": torch.randn(3, 4), "b": torch.randn(3, 4)},), {"scale": 0.5}


@dataclasses.dataclass
class Prediction:
    logits: torch.Tensor
    probs: torch.Tensor


torch.export.register_dataclass(Prediction, serialized_type_name="corpus.test_basics.Prediction")


class DataclassOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x):
        logits = self.proj(x)
        return Prediction(logits, logits.softmax(-1))


@pytest.mark.exportable(tags=["basics", "pytree", "dataclass"])
def test_registered_dataclass_output():
    torch.manual_seed(0)
    return DataclassOut().eval(), (torch.randn(2, 8),)


class RunningMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.count.add_(1)
        self.mean.mul_(0.9).add_(0.1 * x.mean(0))
        return x - self.mean


@pytest.mark.exportable(tags=["state", "buffers"])
def test_mutated_buffers():
    return RunningMean(), (torch.randn(5, 4),)


class BatchNormTrain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(x)


@pytest.mark.exportable(tags=["decomp", "batchnorm"], train=True)  # training mode on purpose: no warning
def test_train_batchnorm_records_non_core_op():
    # train-mode batch norm leaves a non-core op after run_decompositions(); recorded, not failed
    return BatchNormTrain().train(), (torch.randn(8, 4),)


@pytest.mark.exportable(
    core_aten=True,
    train=True,  # training mode on purpose: no warning
    tags=["decomp", "batchnorm", "core-aten"],
    xfail={"decomp": "train-mode batch norm leaves aten._native_batch_norm_legit_functional (not Core ATen)"},
)
def test_train_batchnorm_core_aten_required():
    return BatchNormTrain().train(), (torch.randn(8, 4),)


class DataDependentBranch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1


@pytest.mark.exportable(
    tags=["unsupported", "control-flow"],
    xfail={"export": "data-dependent Python control flow cannot be exported; use torch.cond"},
)
def test_data_dependent_branch_unsupported():
    return DataDependentBranch(), (torch.ones(3),)


class HookedLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.linear.register_forward_hook(lambda module, inputs, output: output.clamp(min=0))
        self.linear.register_forward_pre_hook(lambda module, inputs: (inputs[0] * 2,))

    def forward(self, x):
        return self.linear(x)


@pytest.mark.exportable(tags=["basics", "hooks"])
def test_forward_hooks_are_traced():
    torch.manual_seed(0)
    return HookedLinear(), (torch.randn(2, 4),)


@pytest.mark.exportable(strict=True, tags=["basics", "hooks", "strict"])
def test_forward_hooks_are_traced_strict():
    torch.manual_seed(0)
    return HookedLinear(), (torch.randn(2, 4),)


class GradInForward(torch.nn.Module):
    """Computes an input gradient inside forward (e.g. a physics-informed loss term)."""

    def forward(self, x):
        x = x.detach().requires_grad_(True)
        with torch.enable_grad():
            energy = (x**3).sum()
            (force,) = torch.autograd.grad(energy, x)
        return force


@pytest.mark.exportable(tags=["basics", "autograd"])
def test_autograd_grad_inside_forward():
    return GradInForward(), (torch.randn(5),)


class Regions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.no_grad():
            stats = x.mean(0, keepdim=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.linear(x - stats)
        print("traced once")  # a Python side effect runs at export time, not in the program
        return y.float()


@pytest.mark.exportable(tags=["basics", "autocast", "grad-mode"])
def test_no_grad_and_autocast_regions():
    torch.manual_seed(0)
    return Regions(), (torch.randn(4, 8),)
