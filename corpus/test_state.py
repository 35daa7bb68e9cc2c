"""State: parameters, buffers (persistent or not), mutated buffers, constants, lifted tensors, input mutation."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4))
        self.bias = torch.nn.Parameter(torch.zeros(4))
        self.frozen = torch.nn.Parameter(torch.ones(4), requires_grad=False)

    def forward(self, x):
        return x @ self.weight.t() + self.bias * self.frozen


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}}, tags=["state", "parameters"])
def test_parameters_trainable_and_frozen():
    torch.manual_seed(0)
    return Affine(), (torch.randn(3, 4),)


class TiedEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.out = torch.nn.Linear(8, 20, bias=False)
        self.out.weight = self.emb.weight  # one parameter, two names

    def forward(self, ids):
        return self.out(self.emb(ids))


@pytest.mark.exportable(tags=["state", "parameters", "tied"])
def test_tied_parameters():
    torch.manual_seed(0)
    return TiedEmbedding(), (torch.randint(0, 20, (2, 5)),)


class Buffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0]))
        self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0]), persistent=False)

    def forward(self, x):
        return x * self.scale * self.mask


@pytest.mark.exportable(tags=["state", "buffers"])
def test_persistent_and_non_persistent_buffers():
    return Buffers(), (torch.randn(2, 3),)


class KVCache(torch.nn.Module):
    """Writes the new key at a position given as a tensor: a buffer mutated in place, the way decoders cache."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(8, 4))

    def forward(self, k, pos):
        self.keys.index_copy_(0, pos, k)
        return self.keys.sum(0)


@pytest.mark.exportable(tags=["state", "buffers", "mutation"])
def test_buffer_mutated_in_place_at_a_tensor_position():
    return KVCache(), (torch.randn(2, 4), torch.tensor([1, 5]))


class KVCacheIndexPut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(8, 4))

    def forward(self, k, pos):
        self.keys[pos] = k  # indexing with a 0-d tensor asks for its value
        return self.keys.sum(0)


@pytest.mark.exportable(
    tags=["state", "buffers", "mutation", "unsupported"],
    # torch 2.14 exports it (through item() and runtime asserts), but run_decompositions() then raises
    # GuardOnDataDependentSymNode
    xfail={"export": ("setitem with a 0-d tensor index needs its value (data-dependent); use index_copy_", "torch<2.14"),
           "decomp": ("run_decompositions() raises GuardOnDataDependentSymNode on the item() the program reads",
                      "torch>=2.14")},
)
def test_buffer_setitem_at_a_scalar_tensor_position_fails():
    return KVCacheIndexPut(), (torch.randn(4), torch.tensor(1))


class Normalizer(torch.nn.Module):
    """Running statistics: several buffers mutated per call, one of them an integer counter."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps += 1
        self.mean.lerp_(x.mean(0), 1.0 / self.steps.to(x.dtype))
        return x - self.mean


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("batch", min=1, max=64)}}, tags=["state", "buffers", "mutation", "dynamic"],
)
def test_running_statistics_buffers():
    return Normalizer(), (torch.randn(5, 4),)


class ReturnsBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x):
        return self.table, x + self.table


@pytest.mark.exportable(tags=["state", "buffers", "aliasing"])
def test_buffer_returned_as_an_output():
    return ReturnsBuffer(), (torch.randn(4),)


class LiftedConstant(torch.nn.Module):
    """A tensor attribute that is neither parameter nor buffer is lifted as a constant of the program."""

    def __init__(self):
        super().__init__()
        self.table = torch.linspace(0, 1, 6)
        self.gain = 2.5  # a Python float attribute is baked into the graph

    def forward(self, x):
        return x * self.table * self.gain


@pytest.mark.exportable(tags=["state", "constants", "lifted-tensor"])
def test_lifted_tensor_attribute():
    return LiftedConstant(), (torch.randn(6),)


@pytest.mark.exportable(strict=True, tags=["state", "constants", "lifted-tensor", "strict"])
def test_lifted_tensor_attribute_strict():
    return LiftedConstant(), (torch.randn(6),)


class ConstantInForward(torch.nn.Module):
    def forward(self, x):
        offsets = torch.tensor([1.0, -1.0, 0.5])
        return x + offsets, torch.arange(x.shape[0]) * 2


@pytest.mark.exportable(tags=["state", "constants"])
def test_tensor_created_in_forward():
    return ConstantInForward(), (torch.randn(3),)


class InputMutation(torch.nn.Module):
    def forward(self, x, acc):
        acc.add_(x)  # the caller's tensor changes; the program must do the same
        return acc * 2


@pytest.mark.exportable(tags=["state", "mutation", "input-mutation"])
def test_user_input_mutation():
    return InputMutation(), (torch.randn(3), torch.zeros(3))


class ViewMutation(torch.nn.Module):
    def forward(self, x):
        x[0].mul_(2)
        return x.sum(0)


@pytest.mark.exportable(tags=["state", "mutation", "input-mutation"])
def test_mutation_through_a_view_of_an_input():
    return ViewMutation(), (torch.randn(3, 2),)


class Submodules(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(8, 2), "b": torch.nn.Linear(8, 3)})
        self.register_buffer("temperature", torch.tensor(0.7))

    def forward(self, x):
        h = self.encoder(x)
        return {name: (head(h) / self.temperature).softmax(-1) for name, head in self.heads.items()}


@pytest.mark.api
def test_program_state_accessors(export_check):
    """Parameters, buffers and constants of the program, by name and kind."""
    torch.manual_seed(0)
    model = Submodules().eval()
    result = export_check(model, (torch.randn(2, 4),), tags=["state", "api"])
    assert result.outcome == "passed"
    ep = torch.export.export(model, (torch.randn(2, 4),))
    sig = ep.graph_signature
    assert isinstance(sig, torch.export.ExportGraphSignature)
    assert list(sig.parameters) == [n for n, _ in model.named_parameters()]
    assert list(sig.buffers) == ["temperature"] and list(sig.user_inputs) == ["x"]
    assert [n for n, _ in ep.named_parameters()] == list(sig.parameters)
    assert [n for n, _ in ep.named_buffers()] == ["temperature"]
    assert len(list(ep.parameters())) == len(sig.parameters) and len(list(ep.buffers())) == 1
    assert set(ep.state_dict) == set(model.state_dict())
    torch.testing.assert_close(ep.state_dict["heads.a.weight"], model.heads.a.weight)
    kinds = {spec.kind.name for spec in sig.input_specs}
    assert kinds == {"PARAMETER", "BUFFER", "USER_INPUT"}

    lifted = torch.export.export(LiftedConstant(), (torch.randn(6),))
    assert list(lifted.constants) == ["table"] and list(lifted.graph_signature.lifted_tensor_constants) == ["table"]
    assert list(lifted.tensor_constants) == ["table"]
    nonp = torch.export.export(Buffers(), (torch.randn(2, 3),))
    assert list(nonp.graph_signature.non_persistent_buffers) == ["mask"]
    assert "mask" not in nonp.state_dict and "mask" in nonp.constants

    # the exported (training) IR keeps in-place ops in the graph; the functional program after
    # run_decompositions() names the mutations in its signature instead
    mutated = torch.export.export(Normalizer(), (torch.randn(5, 4),))
    assert mutated.graph_signature.buffers_to_mutate == {}
    functional = mutated.run_decompositions()
    assert set(functional.graph_signature.buffers_to_mutate.values()) == {"mean", "steps"}
    inp = torch.export.export(InputMutation(), (torch.randn(3), torch.zeros(3))).run_decompositions()
    assert list(inp.graph_signature.user_inputs_to_mutate.values()) == ["acc"]
