"""Realistic blocks: MLP, CNN with BatchNorm, residual block, attention, transformer block, LSTM, GRU,
embedding bag, a tiny decoder-only language model. Small sizes: the corpus checks export, not capacity.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Dropout(0.1),
            torch.nn.Linear(32, 32), torch.nn.SiLU(), torch.nn.Linear(32, 4),
        )

    def forward(self, x):
        return self.net(x)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=256)}}, tags=["blocks", "mlp"])
def test_mlp_eval():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(8, 16),)


@pytest.mark.exportable(tags=["blocks", "mlp", "train"], train=True)  # training mode on purpose: no warning
def test_mlp_train_mode_dropout():
    # dropout draws random numbers: the harness seeds every call the same, eager and exported alike
    torch.manual_seed(0)
    return MLP().train(), (torch.randn(8, 16),)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        )
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x))


def _cnn(train: bool = False):
    torch.manual_seed(0)
    m = SmallCNN()
    with torch.no_grad():  # non-trivial running statistics, so eval-mode BatchNorm is not the identity
        for bn in (m.features[1], m.features[5]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return m.train(train)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=32), 2: Dim("h", min=4, max=128), 3: Dim("w", min=4, max=128)}},
    tags=["blocks", "cnn", "batchnorm"],
)
def test_cnn_batchnorm_eval_dynamic_image_size():
    return _cnn(), (torch.randn(2, 3, 16, 16),)


@pytest.mark.exportable(tags=["blocks", "cnn", "batchnorm", "train", "mutation"], train=True)  # on purpose
def test_cnn_batchnorm_train_updates_running_stats():
    return _cnn(train=True), (torch.randn(4, 3, 16, 16),)


class BasicBlock(torch.nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


@pytest.mark.exportable(strict=True, tags=["blocks", "cnn", "resnet", "strict"])
def test_residual_block_strict():
    torch.manual_seed(0)
    return BasicBlock().eval(), (torch.randn(2, 8, 8, 8),)


class SelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x, key_padding_mask):
        return self.mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]


_b, _t = Dim("batch", min=1, max=8), Dim("seq", min=2, max=64)


def _padded(sizes, args, kwargs):
    """Right-padded masks that keep at least one real token per row, as a tokenizer's batch does: a row with every
    key padded is NaN in eager's inference fast path (under no_grad) and 0 in the exported program."""
    b, t = sizes["batch"], sizes["seq"]
    lengths = torch.randint(1, t + 1, (b,))
    return (torch.randn(b, t, 16), torch.arange(t)[None, :] >= lengths[:, None]), {}


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: _b, 1: _t}, "key_padding_mask": {0: _b, 1: _t}}, tags=["blocks", "attention", "mha"],
    input_builder=_padded,
)
def test_multihead_attention_with_padding_mask():
    torch.manual_seed(0)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[1, 4:] = True
    return SelfAttention().eval(), (torch.randn(2, 6, 16), mask)


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, d: int = 16, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=1, max=64)}},
    tags=["blocks", "attention", "sdpa"],
)
def test_causal_sdpa_attention():
    torch.manual_seed(0)
    return CausalSelfAttention().eval(), (torch.randn(2, 6, 16),)


@pytest.mark.exportable(
    dynamic_shapes={"src": {0: Dim("batch", min=1, max=8), 1: Dim("seq", min=2, max=64)}},
    tags=["blocks", "transformer", "attention"],
)
def test_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=True)
    return layer.eval(), (torch.randn(2, 6, 16),)


class TinyDecoder(torch.nn.Module):
    """Token and position embeddings, causal pre-norm blocks, tied output head."""

    def __init__(self, vocab: int = 64, d: int = 16, layers: int = 2, max_len: int = 64):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(max_len, d)
        self.blocks = torch.nn.ModuleList([
            torch.nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(layers)
        ])
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t)
        for block in self.blocks:
            x = block(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def _token_ids(sizes, args, kwargs):
    return (torch.randint(0, 64, (sizes["batch"], sizes["seq"])),), {}


@pytest.mark.exportable(
    dynamic_shapes={"ids": {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=2, max=64)}},
    input_builder=_token_ids,
    tags=["blocks", "transformer", "language-model"],
)
def test_tiny_decoder_language_model():
    torch.manual_seed(0)
    return TinyDecoder().eval(), (torch.randint(0, 64, (2, 8)),)


class SequenceClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.head(out[:, -1]), h, c


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=16)}}, tags=["blocks", "rnn", "lstm"])
def test_lstm_dynamic_batch():
    torch.manual_seed(0)
    return SequenceClassifier().eval(), (torch.randn(2, 5, 8),)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=16), 1: Dim("seq", min=2, max=64)}},
    tags=["blocks", "rnn", "lstm", "unsupported"],
    xfail={"export": "the LSTM decomposition unrolls over time and specializes the sequence length "
                     "(https://github.com/pytorch/pytorch/issues/115092)"},
)
def test_lstm_dynamic_sequence_length():
    torch.manual_seed(0)
    return SequenceClassifier().eval(), (torch.randn(2, 5, 8),)


class BiGRU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = torch.nn.GRU(8, 8, batch_first=True, bidirectional=True)

    def forward(self, x, h0):
        return self.gru(x, h0)


@pytest.mark.exportable(tags=["blocks", "rnn", "gru"])
def test_bidirectional_gru_with_initial_state():
    torch.manual_seed(0)
    return BiGRU().eval(), (torch.randn(2, 4, 8), torch.zeros(2, 2, 8))


class BagOfWords(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(100, 8, mode="mean")
        self.head = torch.nn.Linear(8, 2)

    def forward(self, ids, offsets):
        return self.head(self.bag(ids, offsets))


@pytest.mark.exportable(tags=["blocks", "embedding-bag"])
def test_embedding_bag_with_offsets():
    torch.manual_seed(0)
    return BagOfWords().eval(), (torch.randint(0, 100, (12,)), torch.tensor([0, 3, 7]))


class FixedBags(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(100, 8, mode="sum")

    def forward(self, ids, weights):
        return self.bag(ids, per_sample_weights=weights)


@pytest.mark.exportable(
    dynamic_shapes={"ids": {0: Dim("batch", min=1, max=32)}, "weights": {0: Dim("batch", min=1, max=32)}},
    input_builder=lambda sizes, args, kwargs: ((torch.randint(0, 100, (sizes["batch"], 6)), torch.rand(sizes["batch"], 6)), {}),
    tags=["blocks", "embedding-bag", "dynamic"],
)
def test_embedding_bag_2d_per_sample_weights():
    torch.manual_seed(0)
    return FixedBags().eval(), (torch.randint(0, 100, (4, 6)), torch.rand(4, 6))


class UpsampleDecoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.norm = torch.nn.GroupNorm(2, 4)
        self.up = torch.nn.ConvTranspose2d(4, 2, 2, stride=2)

    def forward(self, x):
        y = F.interpolate(F.silu(self.norm(self.conv(x))), scale_factor=2, mode="nearest")
        return self.up(y)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=8)}}, tags=["blocks", "cnn", "upsample", "groupnorm"],
)
def test_groupnorm_upsample_transposed_conv():
    torch.manual_seed(0)
    return UpsampleDecoder().eval(), (torch.randn(2, 4, 8, 8),)


class Conv1dAudio(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 5, stride=2, padding=2)
        self.depthwise = torch.nn.Conv1d(4, 4, 3, padding=1, groups=4)

    def forward(self, wave):
        return F.avg_pool1d(F.relu(self.depthwise(F.relu(self.conv(wave)))), 2)


@pytest.mark.exportable(tags=["blocks", "cnn", "conv1d"])
def test_conv1d_depthwise():
    torch.manual_seed(0)
    return Conv1dAudio().eval(), (torch.randn(2, 1, 64),)
