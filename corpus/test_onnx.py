"""ONNX: the case's one exported program through ``torch.onnx.export`` and ONNX Runtime (stage ``onnx``).

Every case here carries ``onnx=True``; where the ``[onnx]`` extra (onnx, onnxscript, onnxruntime) is not
installed, its ``onnx`` stage is skipped with the install line and the rest of the case runs as usual.

No case loses a dynamic axis in conversion: with torch 2.13 every axis the program keeps dynamic stays a symbolic
dim (``dim_param``) of the ONNX model's inputs (tried: min 1, derived dims, ``Dim.AUTO``, an input used only for its
size, complex inputs); ``tests/test_onnx.py`` plants one to check the stage's verdict.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

BATCH = Dim("batch", min=1, max=32)
SEQ = Dim("seq", min=2, max=128)


class Attention(torch.nn.Module):
    """One pre-norm self-attention block with a padding mask, as a text encoder's layer."""

    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        keep = mask[:, None, None, :].bool()
        h = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return x + self.out(h.transpose(1, 2).reshape(b, s, d))


def _padded(batch: int, seq: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states and a right-padded mask, as a tokenizer's batch: every row keeps at least one position (a row
    of padding only is no input: eager's SDPA and ONNX Runtime give it different garbage)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, seq + 1, (batch,), generator=g)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    return torch.randn(batch, seq, 16, generator=g), mask


@pytest.mark.exportable(onnx=True, dynamic_shapes={"x": {0: BATCH, 1: SEQ}, "mask": {0: BATCH, 1: SEQ}},
                        input_builder=lambda sizes, args, kwargs: _padded(sizes["batch"], sizes["seq"], 1),
                        tags=["deployment", "onnx", "dynamic"])
def test_attention_block_through_onnx_runtime():
    torch.manual_seed(0)
    return Attention().eval(), _padded(3, 10)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, images):
        features = self.features(images).flatten(1)
        return {"logits": self.head(features), "features": features}


SIDE = Dim("side", min=4, max=64)


@pytest.mark.exportable(onnx=True, dynamic_shapes={"images": {0: BATCH, 2: 2 * SIDE, 3: 2 * SIDE}},
                        tags=["deployment", "onnx", "dynamic", "vision"])
def test_cnn_with_dict_output_through_onnx_runtime():
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(2, 3, 16, 16),)


class Eigenvalues(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.eigvals(x).abs().sort(dim=-1).values


@pytest.mark.exportable(
    onnx=True, tags=["deployment", "onnx", "unsupported"],
    xfail={"onnx": "torch.onnx has no translation for aten.linalg_eig (no ONNX function, no decomposition): "
                   "'No ONNX function found for aten.linalg_eig'"},
)
def test_eigenvalues_have_no_onnx_translation():
    torch.manual_seed(0)
    return Eigenvalues(), (torch.randn(2, 4, 4),)
