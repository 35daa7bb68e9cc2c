"""Decompositions: run_decompositions() to Core ATen over op families (core_aten=True), the default table
(default_decompositions), a custom table (CustomDecompTable), and ops that stay outside Core ATen.

The op-family cases are what the Core ATen coverage line of the conformance table counts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import CustomDecompTable, default_decompositions


class Unary(torch.nn.Module):
    def forward(self, x):
        p, u = x.abs() + 0.5, x.clamp(-0.9, 0.9)
        outs = [
            x.abs(), u.acos(), (p + 1).acosh(), u.asin(), x.asinh(), x.atan(), u.atanh(), x.ceil(), x.cos(), x.cosh(),
            torch.erf(x), x.exp(), x.expm1(), x.floor(), p.log(), p.log10(), p.log1p(), p.log2(), -x, p.reciprocal(),
            x.round(), p.rsqrt(), x.sigmoid(), x.sign(), x.sin(), x.sinh(), p.sqrt(), u.tan(), x.tanh(), x.trunc(),
            F.relu(x), F.elu(x), F.leaky_relu(x, 0.1), F.hardtanh(x), F.gelu(x),
        ]
        return torch.stack(outs), x.isinf(), x.isnan()


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "elementwise"])
def test_unary_ops():
    return Unary(), (torch.randn(8),)


class Binary(torch.nn.Module):
    def forward(self, x, y, i, j):
        outs = [
            torch.atan2(x, y), torch.fmod(x, y), torch.remainder(x, y), x.abs().pow(y), x.pow(2), torch.pow(2.0, x),
            torch.maximum(x, y), torch.minimum(x, y), torch.div(x, y, rounding_mode="floor"),
            torch.div(x, y, rounding_mode="trunc"), x / y, torch.where(x > y, x, y), x.clamp(min=y), x * 3 - 1,
            x + y, x - y, torch.fmod(x, 2.0), torch.remainder(x, 2.0),
        ]
        cmp = [x == y, x != y, x < y, x <= y, x > y, x >= y, x == 0, x != 0, x < 0, x <= 0, x > 0, x >= 0]
        logic = [cmp[2] & cmp[4], cmp[2] | cmp[4], cmp[2] ^ cmp[4], ~cmp[2]]
        logic += [torch.logical_and(cmp[2], cmp[4]), torch.logical_or(cmp[2], cmp[4]),
                  torch.logical_xor(cmp[2], cmp[4]), torch.logical_not(cmp[2])]
        bits = [i & j, i | j, i ^ j, ~i, i & 3, i | 3, i ^ 3]
        return torch.stack(outs), torch.stack(cmp + logic), torch.stack(bits)


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "elementwise"])
def test_binary_comparison_and_bitwise_ops():
    return Binary(), (torch.randn(6), torch.rand(6) + 0.5, torch.randint(0, 16, (6,)), torch.randint(0, 16, (6,)))


class Reductions(torch.nn.Module):
    def forward(self, x):
        v, idx = x.max(dim=1)
        v2, idx2 = x.min(dim=1)
        s, si = x.sort(dim=1)
        tv, ti = x.topk(2, dim=1)
        return (x.amax(1), x.amin(0), (x > 1).any(), (x > 1).any(1), (x > 1).any((0, 1)), x.argmax(), x.argmin(),
                x.cumsum(1), x.mean(), x.mean(1), x.prod(), x.prod(1), x.sum(1), x.var(1), torch.var(x, 1, correction=0),
                v, idx, v2, idx2, s, si, tv, ti, x.log_softmax(-1), x.softmax(-1))


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "reductions"])
def test_reductions_sorting_and_softmax():
    return Reductions(), (torch.randn(4, 5),)


class Indexing(torch.nn.Module):
    def forward(self, x, idx, mask, src):
        rows = idx.view(-1, 1).expand(-1, 3)
        y = x.clone()
        y[idx] = 0.0
        return (
            x.gather(1, torch.zeros(5, 1, dtype=torch.long)), x.scatter(0, rows, src), x.scatter(1, torch.zeros(5, 1, dtype=torch.long), 1.5),
            x.scatter_add(0, rows, src), x.scatter_reduce(0, rows, src, reduce="amax"), x.index_select(0, idx), x[idx], y,
            x.masked_scatter(mask, src.repeat(3, 1)), torch.select_scatter(x, src[0], 0, 1), torch.slice_scatter(x, src, 0, 0, 2),
            x.flip(0), x.repeat(2, 1), F.pad(x, (1, 1)), x.diagonal(), torch.cat([x, x]), x.split([2, 3]),
            x.t().unsqueeze(0).squeeze(0), x.as_strided((2, 2), (1, 2)),
        )


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "indexing"])
def test_indexing_scatter_gather_and_views():
    torch.manual_seed(0)
    return Indexing(), (torch.randn(5, 3), torch.tensor([0, 2]), torch.rand(5, 3) > 0.5, torch.randn(2, 3))


class Vision(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x, grid):
        y = self.norm(self.conv(x))
        return (
            F.max_pool2d(y, 2), F.avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 3),
            F.interpolate(y, scale_factor=2, mode="bilinear"), F.interpolate(y, scale_factor=2, mode="nearest"),
            F.pad(y, (1, 1, 1, 1), mode="reflect"), F.pad(y, (1, 1, 1, 1), mode="replicate"),
            F.grid_sample(y, grid, align_corners=False),
        )


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "vision"])
def test_pooling_resampling_and_padding():
    torch.manual_seed(0)
    return Vision().eval(), (torch.randn(1, 2, 8, 8), torch.rand(1, 4, 4, 2) * 2 - 1)


class Volumes(torch.nn.Module):
    def forward(self, v, s):
        return (F.avg_pool3d(v, 2), F.max_pool3d(v, 2), F.adaptive_avg_pool3d(v, 2), F.pad(v, (1,) * 6, mode="reflect"),
                F.pad(v, (1,) * 6, mode="replicate"), F.pad(s, (2, 2), mode="reflect"))


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "vision"])
def test_3d_pooling_and_padding():
    return Volumes(), (torch.randn(1, 2, 4, 4, 4), torch.randn(1, 2, 6))


class Distances(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 3)
        self.norm = torch.nn.LayerNorm(3)

    def forward(self, ids, a, b):
        e = self.norm(self.emb(ids))
        return torch.cdist(e, b), F.pdist(a), a @ b.T, torch.bmm(a[None], b.T[None]), torch.addmm(a[:, 0], a, b.T[:, :4])


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "linear-algebra"])
def test_matmul_family_and_distances():
    torch.manual_seed(0)
    return Distances().eval(), (torch.randint(0, 10, (4,)), torch.randn(4, 3), torch.randn(5, 3))


class Spectral(torch.nn.Module):
    def forward(self, x):
        f = torch.fft.rfft(x)
        return torch.fft.irfft(f * 2, n=x.shape[-1]), f.abs()


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "fft", "complex"])
def test_real_fft_round_trip():
    return Spectral(), (torch.randn(4, 8),)


class RandomOps(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand(x.shape), x * torch.randn(x.shape), torch.randperm(6), F.dropout(x, 0.3, training=True)


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "random"])
def test_random_ops_under_a_fixed_seed():
    # every call runs under the same seed, so eager, exported and decomposed programs draw the same numbers
    return RandomOps(), (torch.randn(6),)


class Factories(torch.nn.Module):
    def forward(self, x):
        return (torch.arange(1, x.shape[0] + 1) * x, torch.full_like(x, 2.0), torch.zeros(3) + x.sum(),
                x.new_empty(3).fill_(1.0), torch.scalar_tensor(3.0) * x, x.to(torch.float64), torch.empty_strided((2, 2), (1, 2)).fill_(0))


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "factories"])
def test_factories_and_dtype_conversion():
    return Factories(), (torch.randn(4),)


class EvalBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)
        self.bag = torch.nn.EmbeddingBag(10, 3, mode="max")

    def forward(self, x, ids):
        return self.bn(x), self.bag(ids)


@pytest.mark.exportable(core_aten=True, tags=["decomp", "core-aten", "batchnorm", "embedding-bag"])
def test_eval_batchnorm_and_embedding_bag_stay_core():
    torch.manual_seed(0)
    return EvalBatchNorm().eval(), (torch.randn(2, 3, 4, 4), torch.randint(0, 10, (2, 4)))


class VectorNorm(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.vector_norm(x, dim=-1), F.normalize(x, dim=-1)


@pytest.mark.exportable(
    core_aten=True,
    tags=["decomp", "core-aten", "unsupported"],
    # torch 2.14 added linalg_vector_norm to the default decomposition table
    xfail={"decomp": ("aten.linalg_vector_norm is not Core ATen and the default table does not decompose it "
                      "(https://github.com/pytorch/pytorch/issues/150061)", "torch<2.14")},
)
def test_vector_norm_is_left_outside_core_aten():
    return VectorNorm(), (torch.randn(3, 4),)


class LinearGelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return F.gelu(self.linear(x))


def _tanh_gelu(x, approximate="none"):
    return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


@pytest.mark.api
def test_custom_decomposition_table(export_check):
    """default_decompositions() is a CustomDecompTable: drop an entry to keep the op, add one to rewrite it."""
    torch.manual_seed(0)
    model = LinearGelu().eval()
    x = torch.randn(3, 4)
    result = export_check(model, (x,), tags=["decomp", "custom-table", "api"])
    assert "aten.addmm.default" in result.stages["decomp"].data["ops_after"]  # the default table lowers linear

    table = default_decompositions()
    assert isinstance(table, CustomDecompTable)
    assert torch.ops.aten.linear.default in table and len(table) > 100
    table.pop(torch.ops.aten.linear.default)  # keep linear whole
    table[torch.ops.aten.gelu.default] = _tanh_gelu  # and write gelu our way
    ep = torch.export.export(model, (x,)).run_decompositions(table)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.linear.default" in targets and "aten.tanh.default" in targets and "aten.gelu.default" not in targets
    torch.testing.assert_close(ep.module()(x), F.gelu(model.linear(x), approximate="tanh"))

    # a new CustomDecompTable starts as the default table: ops are kept by deleting their entry
    fresh = CustomDecompTable()
    assert set(fresh.keys()) == set(default_decompositions().keys())
