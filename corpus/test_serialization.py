"""Serialization: torch.export.save / load (the `serde` stage of every case), extra files, symbolic shapes that
survive the round trip, custom ops, low-precision dtypes, and what a saved program keeps.
"""

from __future__ import annotations

import copy
import io
import json

import pytest
import torch
from torch.export import Dim


@torch.library.custom_op("pytest_export_corpus::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x):
        return scaled_tanh(x, 2.0) + 1


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}}, tags=["serde", "custom-op", "dynamic"],
)
def test_custom_op_with_fake_kernel():
    # the custom op is kept whole by run_decompositions() (recorded as non-core); it must be registered
    # before torch.export.load in the process that loads the program
    return UsesCustomOp(), (torch.randn(5),)


class Half(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8).to(dtype)

    def forward(self, x):
        return torch.nn.functional.silu(self.linear(x))


@pytest.mark.exportable(tags=["serde", "dtypes", "bf16"])
def test_bfloat16_model():
    torch.manual_seed(0)
    return Half(torch.bfloat16).eval(), (torch.randn(2, 8, dtype=torch.bfloat16),)


@pytest.mark.exportable(tags=["serde", "dtypes", "fp16"])
def test_float16_model():
    torch.manual_seed(0)
    return Half(torch.float16).eval(), (torch.randn(2, 8, dtype=torch.float16),)


class Quantish(torch.nn.Module):
    """Integer and low-bit tensors as buffers and inputs: the serializer stores every dtype."""

    def __init__(self):
        super().__init__()
        self.register_buffer("lut", torch.arange(-128, 128, dtype=torch.int8))
        self.register_buffer("flags", torch.tensor([True, False, True]))
        self.register_buffer("scale", torch.tensor(0.05, dtype=torch.float64))

    def forward(self, codes, mask):
        values = self.lut[codes.long()].to(torch.float64) * self.scale
        return values, (mask & self.flags).any(), codes.to(torch.int16) * 2


@pytest.mark.exportable(tags=["serde", "dtypes", "integers"])
def test_integer_bool_and_double_buffers():
    return Quantish(), (torch.randint(0, 256, (3,), dtype=torch.uint8), torch.tensor([True, True, False]))


class SymbolicOutputs(torch.nn.Module):
    def forward(self, x):
        return x.sum(1), x.shape[0], x.shape[0] * 2 + 1


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}}, tags=["serde", "dynamic", "symint"],
)
def test_symbolic_int_outputs():
    return SymbolicOutputs(), (torch.randn(4, 3),)


@pytest.mark.exportable(strict=True, dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}}, tags=["serde", "strict", "dynamic"])
def test_strict_program_round_trip():
    torch.manual_seed(0)
    return Half(torch.float32).eval(), (torch.randn(3, 8),)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x).relu()


@pytest.mark.api
def test_save_and_load_with_extra_files(export_check, tmp_path):
    """extra_files travel with the program; ranges survive; deepcopy works where pickling does not."""
    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(3, 4)
    ds = {"x": {0: Dim("batch", min=1, max=32)}}
    result = export_check(model, (x,), dynamic_shapes=ds, tags=["serde", "extra-files", "api"])
    assert result.stages["serde"].data["bytes"] > 0

    ep = torch.export.export(model, (x,), dynamic_shapes=ds)
    meta = json.dumps({"model": "encoder", "version": 3})
    path = tmp_path / "encoder.pt2"
    torch.export.save(ep, path, extra_files={"meta.json": meta, "README": "an encoder"})
    extra = {"meta.json": "", "README": ""}
    loaded = torch.export.load(path, extra_files=extra)
    assert json.loads(extra["meta.json"]) == {"model": "encoder", "version": 3} and extra["README"] == "an encoder"

    buf = io.BytesIO()
    torch.export.save(ep, buf, extra_files={"meta.json": meta})
    buf.seek(0)
    from_memory_extra = {"meta.json": ""}
    from_memory = torch.export.load(buf, extra_files=from_memory_extra)
    assert from_memory_extra["meta.json"] == meta

    for program in (loaded, from_memory, copy.deepcopy(ep)):
        ((lo, hi),) = [(int(r.lower), int(r.upper)) for r in program.range_constraints.values()]
        assert (lo, hi) == (1, 32)
        big = torch.randn(17, 4)
        torch.testing.assert_close(program.module()(big), model(big))
        assert set(program.state_dict) == {"proj.weight", "proj.bias"}
