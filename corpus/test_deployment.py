"""Deployment paths: re-export (``retrace``), unflatten with preserved call signatures (``unflatten``), strict and
non-strict tracing, devices (``cuda``, with ``--export-devices``) and AOTInductor (``aoti``).

Every case here runs on CUDA too where a GPU is present (``benchmarks/cuda_check.sh`` runs this file with
``--export-devices cpu,cuda --export-aoti``).
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim


class Block(torch.nn.Module):
    def __init__(self, d: int = 8):
        super().__init__()
        self.linear = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x, scale: float):
        return self.norm(self.linear(x) * scale)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = self.embed(x).relu()
        for block in self.blocks:
            h = h + block(h, 0.5)
        return self.head(h)


def _encoder():
    torch.manual_seed(0)
    return Encoder().eval()


BATCH = Dim("batch", min=2, max=32)


@pytest.mark.exportable(dynamic_shapes={"x": {0: BATCH}}, tags=["deployment", "retrace", "dynamic"])
def test_encoder_re_exports_with_its_dynamic_batch():
    return _encoder(), (torch.randn(4, 4),)


class Concat(torch.nn.Module):
    def forward(self, *args):
        return torch.cat(args, dim=-1)


@pytest.mark.exportable(
    dynamic_shapes={"args": ({0: BATCH}, {0: BATCH})},
    tags=["deployment", "retrace", "varargs"],
    xfail={"retrace": "ep.module() takes (args_0, args_1), not *args: a declaration keyed 'args' no longer fits "
                      "the program's own module"},
)
def test_var_positional_forward_does_not_re_export_with_its_declaration():
    return Concat(), (torch.randn(4, 3), torch.randn(4, 2))


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: BATCH}},
    preserve_module_call_signature=("blocks.0", "blocks.1"),
    tags=["deployment", "unflatten", "dynamic"],
)
def test_preserved_blocks_unflatten_and_swap_for_eager():
    return _encoder(), (torch.randn(4, 4),)


class Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps.add_(1)
        return self.inner(x).sum(-1)


@pytest.mark.exportable(
    preserve_module_call_signature=("inner", "inner.1"),
    tags=["deployment", "unflatten", "state", "train"],
    train=True,  # training mode on purpose: no warning
)
def test_preserved_nested_submodules_with_train_mode_batch_norm():
    torch.manual_seed(0)
    return Counted().train(), (torch.randn(6, 4),)


class Scaled(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


class PassesASize(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scaled = Scaled()

    def forward(self, x):
        return self.scaled(x, x.shape[0])


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: BATCH}},
    preserve_module_call_signature=("scaled",),
    tags=["deployment", "unflatten", "unsupported", "symint"],
    xfail={"export": "a preserved submodule called with a symbolic size (x.shape[0]) cannot keep its call "
                     "signature: 'Only Tensors or scalars are supported as pytree flattened inputs, got: s..'"},
)
def test_preserved_submodule_called_with_a_symbolic_size():
    return PassesASize(), (torch.randn(4, 3),)


@pytest.mark.exportable(preserve_module_call_signature=("scaled",), tags=["deployment", "unflatten", "symint"])
def test_preserved_submodule_called_with_a_static_size():
    return PassesASize(), (torch.randn(4, 3),)


class ScalarFromData(torch.nn.Module):
    """Reads a Python float from tensor data: non-strict traces it, TorchDynamo (strict) refuses."""

    def forward(self, x):
        return x.tolist()[0] * x


@pytest.mark.exportable(tags=["deployment", "modes", "non-strict"])
def test_python_scalar_from_data_non_strict():
    return ScalarFromData(), (torch.randn(3),)


@pytest.mark.exportable(
    strict=True,
    tags=["deployment", "modes", "strict", "unsupported"],
    xfail={"export": "TorchDynamo: 'Tensor.tolist() with non-integer tensor' is unsupported in strict mode"},
)
def test_python_scalar_from_data_strict():
    return ScalarFromData(), (torch.randn(3),)


@pytest.mark.exportable(strict=True, dynamic_shapes={"x": {0: BATCH}}, tags=["deployment", "retrace", "strict"])
def test_encoder_strict_re_exports():
    return _encoder(), (torch.randn(4, 4),)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


@pytest.mark.exportable(aoti=True, dynamic_shapes={"x": {0: Dim("batch", min=4, max=16)}},
                        tags=["deployment", "aoti", "dynamic"])
def test_tiny_model_through_aotinductor():
    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(5, 8),)
