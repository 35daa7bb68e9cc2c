"""Right at real depth (#54): a decoder of 24 layers at 512 wide (rotary positions to 2,048, grouped-query attention,
SwiGLU, RMSNorm; random weights) passes every stage with default settings, its logits compared at their scale
(reduction-order noise at depth is no defect), while the same model whose program computes tanh-approximated GELU
where eager computes the exact one still fails. End-to-end at real size: ``slow``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import pytest_export

pytestmark = pytest.mark.slow


class Layer(torch.nn.Module):
    """One pre-norm block: grouped-query attention with rotary positions, then a SwiGLU feed-forward."""

    def __init__(self, width: int = 512, heads: int = 8, kv_heads: int = 4, ffn: int = 1536):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.attn_norm, self.ffn_norm = torch.nn.RMSNorm(width), torch.nn.RMSNorm(width)
        self.q = torch.nn.Linear(width, width, bias=False)
        self.k = torch.nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.v = torch.nn.Linear(width, kv_heads * self.head_dim, bias=False)
        self.o = torch.nn.Linear(width, width, bias=False)
        self.gate = torch.nn.Linear(width, ffn, bias=False)
        self.up = torch.nn.Linear(width, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, width, bias=False)

    def forward(self, x, cos, sin):
        b, t, width = x.shape
        y = self.attn_norm(x)
        q = self.q(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)

        def rotate(z):
            z1, z2 = z.chunk(2, -1)
            return z * cos + torch.cat([-z2, z1], -1) * sin

        q, k = rotate(q), rotate(k)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, width)
        x = x + self.o(attended)
        y = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Decoder(torch.nn.Module):
    """24 layers at 512 wide, a rotary table of 2,048 positions, 8,192 tokens. ``wrong``: the program computes
    tanh-approximated GELU on the final hidden states where eager computes the exact one (a wrong kernel)."""

    def __init__(self, layers: int = 24, width: int = 512, vocab: int = 8192, table: int = 2048, wrong: bool = False):
        super().__init__()
        self.wrong = wrong
        self.embed = torch.nn.Embedding(vocab, width)
        self.layers = torch.nn.ModuleList(Layer(width) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        head_dim = width // 8
        inverse = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.arange(table).float()[:, None] * inverse[None]
        angles = torch.cat([angles, angles], -1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, self.cos[:t], self.sin[:t])
        x = self.norm(x)
        if self.wrong:
            x = F.gelu(x, approximate="tanh") if torch.compiler.is_exporting() else F.gelu(x)
        return self.head(x)


DECLARED = {"ids": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=2048)}}


def _check(wrong: bool):
    torch.manual_seed(0)
    return pytest_export.check(Decoder(wrong=wrong).eval(), (torch.randint(0, 8192, (2, 16)),),
                               dynamic_shapes=DECLARED, name=f"decoder-24x512-{wrong}")


def test_a_correct_24_layer_decoder_passes_every_stage_with_default_settings():
    res = _check(wrong=False)
    assert res.outcome == "passed", res.failure_text()
    assert {n: s.status for n, s in res.stages.items()} == {
        "eager": "passed", "export": "passed", "compare": "passed", "serde": "passed", "decomp": "passed",
        "guards": "passed", "fuzz": "passed", "retrace": "passed"}


def test_a_wrong_kernel_in_the_same_decoder_still_fails_and_says_what_it_was_held_to():
    res = _check(wrong=True)
    compare = res.stages["compare"]
    assert compare.status == "failed", res.failure_text()
    assert "or at the output's scale to a norm-relative error of 1e-05: it is" in compare.message
    assert "rtol= and atol= in the exportable marker change the tolerances" in compare.message
    assert "eager's own noise (float32 eager against float64 eager) is" in compare.message
