"""Every tensor a model holds and every state it keeps (#58): a matrix of small models, each holding one kind of
tensor (as a parameter or buffer, an input or an output), through every stage. Each cell's verdict is the one raw
torch gives (export, the program against eager, save and load, ``run_decompositions()``): ``passed``, or
``failed`` at the first stage where torch refuses, with torch's message. No cell ends in ``error``.

And probes leave nothing behind: a buffer forward replaces (a table grown on demand), a cache and a counter are
what they were after every probe, by shape or with real tensors, in range or out.
"""

from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import pytest_export

B = Dim("b", min=1, max=8)


class Held(torch.nn.Module):
    """``forward(x) = f(x, held)``: one held tensor of the kind under test."""

    def __init__(self, f, **held):
        super().__init__()
        self.f = f
        for name, t in held.items():
            if isinstance(t, torch.nn.Parameter):
                self.register_parameter(name, t)
            else:
                self.register_buffer(name, t)

    def forward(self, x):
        return self.f(self, x)


def _base() -> torch.Tensor:
    return torch.arange(12, dtype=torch.float32).reshape(4, 3) / 10


def _tied() -> torch.nn.Module:
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))
    return Tied()


def _views() -> torch.nn.Module:
    base = torch.arange(12, dtype=torch.float32)
    m = Held(lambda m, x: x * m.first + x * m.second)
    m.register_buffer("first", base[:3])
    m.register_buffer("second", base[3:6])
    return m


def _non_persistent() -> torch.nn.Module:
    m = Held(lambda m, x: x + m.scale)
    m.register_buffer("scale", torch.full((3,), 0.5), persistent=False)
    return m


def _weight_norm() -> torch.nn.Module:
    return torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 3))


def _channels_last() -> tuple[torch.nn.Module, tuple]:
    conv = torch.nn.Conv2d(3, 4, 3, padding=1).to(memory_format=torch.channels_last)
    return conv, (torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last),)


X = (torch.randn(2, 3),)
SPARSE = torch.eye(3).to_sparse()
CASES = {
    "sparse COO buffer": (Held(lambda m, x: torch.sparse.mm(m.adj, x.t()).t(), adj=SPARSE), X),
    "sparse CSR buffer": (Held(lambda m, x: (m.adj @ x.t()).t(), adj=torch.eye(3).to_sparse_csr()), X),
    "quantized per-tensor buffer": (Held(lambda m, x: x @ m.w.dequantize(),
                                         w=torch.quantize_per_tensor(_base()[:3], 0.1, 0, torch.qint8)), X),
    "quantized per-channel buffer": (Held(lambda m, x: x @ m.w.dequantize(), w=torch.quantize_per_channel(
        _base()[:3], torch.tensor([0.1, 0.2, 0.1]), torch.tensor([0, 0, 0]), 1, torch.qint8)), X),
    "complex buffer, complex output": (Held(lambda m, x: x.to(torch.complex64) * m.w,
                                            w=torch.tensor([1 + 1j, 2, 1j], dtype=torch.complex64)), X),
    "float16 parameter": (Held(lambda m, x: (x.half() * m.w).float(),
                               w=torch.nn.Parameter(torch.ones(3, dtype=torch.float16))), X),
    "bfloat16 parameter, bfloat16 output": (Held(lambda m, x: x.bfloat16() * m.w,
                                                 w=torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))), X),
    "bool buffer": (Held(lambda m, x: x * m.mask, mask=torch.tensor([True, False, True])), X),
    "int64 index buffer": (Held(lambda m, x: x[:, m.idx], idx=torch.tensor([2, 0, 1])), X),
    "uint8 buffer": (Held(lambda m, x: x * m.w.float(), w=torch.tensor([1, 2, 3], dtype=torch.uint8)), X),
    "channels_last weight and input": _channels_last(),
    "views of one storage": (_views(), X),
    "tied weights": (_tied(), X),
    "zero-size buffer": (Held(lambda m, x: x + m.empty.sum(), empty=torch.zeros(0, 3)), X),
    "0-d buffer": (Held(lambda m, x: x * m.scale, scale=torch.tensor(2.0)), X),
    "weight_norm parametrization": (_weight_norm(), X),
    "non-persistent buffer": (_non_persistent(), X),
    "bool input": (Held(lambda m, x: x.float() * 2), (torch.tensor([[True, False, True]] * 2),)),
    "complex input": (Held(lambda m, x: x * 2), (torch.randn(2, 3, dtype=torch.complex64),)),
}
try:  # torch's own wrapper subclass for its tests (a tensor holding two, with __torch_dispatch__)
    from torch.testing._internal.two_tensor import TwoTensor
except ImportError:  # pragma: no cover - another torch
    TwoTensor = None
if TwoTensor is not None:
    CASES["wrapper subclass parameter"] = (Held(lambda m, x: x * m.w, w=torch.nn.Parameter(
        TwoTensor(torch.ones(3), torch.full((3,), 2.0)))), X)
if hasattr(torch, "float8_e4m3fn"):
    CASES["float8 buffer"] = (Held(lambda m, x: x * m.w.float(), w=torch.ones(3).to(torch.float8_e4m3fn)), X)


def argname(module) -> str:
    return "x" if "x" in module.forward.__code__.co_varnames else "input"


def raw_torch(module, args, dynamic: bool = True) -> tuple[str | None, str]:
    """The first stage at which raw torch refuses, and its message (None: nothing refuses)."""
    dynamic = {argname(module): {0: B}} if dynamic else None
    try:
        ep = torch.export.export(module, args, dynamic_shapes=dynamic)
    except Exception as exc:  # noqa: BLE001 - raw torch's refusal is the expected verdict
        return "export", f"{type(exc).__name__}: {exc}"
    ep.module()(*args)
    try:
        buf = io.BytesIO()
        torch.export.save(ep, buf)
        buf.seek(0)
        torch.export.load(buf)
    except Exception as exc:  # noqa: BLE001
        return "serde", f"{type(exc).__name__}: {exc}"
    try:
        ep.run_decompositions().module()(*args)
    except Exception as exc:  # noqa: BLE001
        return "decomp", f"{type(exc).__name__}: {exc}"
    return None, ""


# sparse tensors export only at static sizes (a dynamic batch meets sparse kernels fake tensors lack): those run
# both ways, so that save, load and decomposition meet them too
STATIC = ["sparse COO buffer", "sparse CSR buffer"]


@pytest.mark.parametrize("kind, dynamic", [(k, True) for k in CASES] + [(k, False) for k in STATIC])
def test_every_tensor_kind_gets_raw_torchs_verdict_never_an_error(kind, dynamic):
    module, args = CASES[kind]
    stage, message = raw_torch(module, args, dynamic)
    res = pytest_export.check(module, args, dynamic_shapes={argname(module): {0: B}} if dynamic else None,
                              examples=3, name=f"kind-{kind.replace(' ', '-')}-{dynamic}")
    errors = {n: s.message for n, s in res.stages.items() if s.status == "error"}
    assert not errors and not res.error, (errors, res.error)
    if stage is None:
        assert res.outcome == "passed", res.failure_text()
        return
    failed = [n for n, s in res.stages.items() if s.status == "failed"]
    assert failed and failed[0] == stage, (stage, message, res.failure_text())
    first = message.split(":")[0]
    assert first in res.stages[stage].message, (message, res.stages[stage].message)


def test_a_sparse_buffer_that_torch_cannot_save_is_said_in_the_users_terms():
    module, args = CASES["sparse COO buffer"]
    res = pytest_export.check(module, args, examples=3, name="sparse-hint")
    serde = res.stages["serde"]
    assert serde.status == "failed"
    assert "hint: torch.export.save cannot write sparse tensors (adj): keep them dense" in serde.message, serde.message


# ---- probes leave nothing behind ------------------------------------------------------------------------------

class GrownTable(torch.nn.Module):
    """A position table grown on demand, as several encoder-decoder and speech models build theirs."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", self._make(64))
        self.calls = 0
        self.cache: dict[int, torch.Tensor] = {}

    @staticmethod
    def _make(t):
        return torch.arange(t, dtype=torch.float32)[:, None].expand(t, 4).clone()

    def forward(self, x):
        t = x.shape[1]
        if t > self.table.shape[0]:
            self.table = self._make(t)
        return x + self.table[:t]


def test_a_table_grown_on_demand_passes_and_every_probe_leaves_the_module_as_it_was():
    model = GrownTable()
    table = model.table
    dynamic_shapes = {"x": {0: Dim("b", min=1, max=4), 1: Dim("t", min=2, max=64)}}
    ep = torch.export.export(GrownTable(), (torch.randn(2, 8, 4),), dynamic_shapes=dynamic_shapes)
    for b, t in ((1, 2), (4, 64), (3, 17)):  # raw torch: the program matches eager in range
        x = torch.randn(b, t, 4)
        torch.testing.assert_close(ep.module()(x), GrownTable()(x))
    res = pytest_export.check(model, (torch.randn(2, 8, 4),), dynamic_shapes=dynamic_shapes, examples=10,
                              name="grown-table")
    assert res.outcome == "passed", res.failure_text()
    # probes above the table's length (out of range, by shape) grew it: put back, never a fake tensor left behind
    assert model.table is table and not isinstance(model.table, torch._subclasses.FakeTensor)
    assert model.table.shape == (64, 4)


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))
        self.register_buffer("last", torch.zeros(1, 3))

    def forward(self, x):
        self.seen += 1  # in place
        self.last = x[:1].detach().clone()  # a new object
        return x * 2


def test_a_counter_and_a_replaced_buffer_are_put_back_after_every_probe():
    model = Counter()
    seen, last = model.seen, model.last
    res = pytest_export.check(model, (torch.randn(2, 3),), dynamic_shapes={"x": {0: Dim("b", min=1, max=8)}},
                              examples=5, name="counter")
    assert not any(s.status == "error" for s in res.stages.values()), res.failure_text()
    assert model.seen is seen and float(model.seen) == 0.0
    assert model.last is last and torch.equal(model.last, torch.zeros(1, 3))
