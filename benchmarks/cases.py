"""A fixed set of 20 small, realistic export cases shared by the benchmarks."""

from __future__ import annotations

import torch


class MLP(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))

    def forward(self, x):
        return self.net(x)


class CNN(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.BatchNorm2d(channels), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(channels, 10),
        )

    def forward(self, x):
        return self.body(x)


class Attention(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(dim, 4, batch_first=True)

    def forward(self, x):
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


class Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(dim, 4, dim * 2, batch_first=True, dropout=0.0)

    def forward(self, x):
        return self.layer(x)


class LSTMHead(torch.nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, 2)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def make_cases() -> list[tuple[str, torch.nn.Module, tuple]]:
    torch.manual_seed(0)
    cases = []
    for w in (16, 32, 64, 128):
        cases.append((f"mlp{w}", MLP(w).eval(), (torch.randn(4, 32),)))
    for c in (4, 8, 16, 32):
        cases.append((f"cnn{c}", CNN(c).eval(), (torch.randn(2, 3, 16, 16),)))
    for d in (16, 32, 64, 128):
        cases.append((f"attn{d}", Attention(d).eval(), (torch.randn(2, 6, d),)))
    for d in (16, 32, 64, 128):
        cases.append((f"block{d}", Block(d).eval(), (torch.randn(2, 6, d),)))
    for h in (8, 16, 32, 64):
        cases.append((f"lstm{h}", LSTMHead(h).eval(), (torch.randn(2, 5, 8),)))
    assert len(cases) == 20
    return cases
