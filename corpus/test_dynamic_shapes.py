"""Dynamic shapes: Dim with bounds, derived dims, dims(), Dim.AUTO / DYNAMIC / STATIC, ShapesCollection,
AdditionalInputs, data-dependent sizes, and the suggested fixes export offers when a promise does not hold.

Every declared range is one the model supports in eager; the ones it does not are expected failures.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import AdditionalInputs, Dim, ShapesCollection, dims
from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))

    def forward(self, x):
        return self.body(x).log_softmax(-1)


def _classifier():
    torch.manual_seed(0)
    return Classifier().eval()


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=128)}}, tags=["dynamic", "dim"])
def test_dim_with_bounds():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch")}}, tags=["dynamic", "dim", "unbounded"])
def test_dim_unbounded():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes=({0: Dim("batch", min=1, max=64)},), tags=["dynamic", "dim", "positional"])
def test_dynamic_shapes_by_position():
    return _classifier(), (torch.randn(3, 8),)


class PairSum(torch.nn.Module):
    def forward(self, x, y):
        return x.reshape(-1, 2).sum(1) + y


_n = Dim("n", min=1, max=32)


# n=1 is inside the declared range (min=1), but torch 2.13 guards the root of a derived dim away from 1
# ("Guard failed: x.size()[0] // 2 != 1"): the program refuses it although eager works
_N_IS_ONE = "torch 2.13 refuses the derived dim's root at 1 (a `!= 1` guard) although min=1 declares it"


@pytest.mark.exportable(dynamic_shapes={"x": {0: 2 * _n}, "y": {0: _n}}, tags=["dynamic", "derived-dim"],
                        xfail={"guards": _N_IS_ONE})
def test_derived_dim_twice():
    return PairSum(), (torch.randn(8), torch.randn(4))


class Shift(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] * y


_m = Dim("m", min=1, max=32)


# the same at m=1: "Guard failed: -1 + x.size()[0] >= 2"
@pytest.mark.exportable(dynamic_shapes={"x": {0: _m + 1}, "y": {0: _m}}, tags=["dynamic", "derived-dim"],
                        xfail={"guards": _N_IS_ONE})
def test_derived_dim_plus_one():
    return Shift(), (torch.randn(5), torch.randn(4))


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


_i, _j, _k = dims("i", "j", "k", min=1, max=64)


@pytest.mark.exportable(dynamic_shapes={"a": {0: _i, 1: _j}, "b": {0: _j, 1: _k}}, tags=["dynamic", "dims"])
def test_dims_share_the_inner_dimension():
    return MatMul(), (torch.randn(3, 4), torch.randn(4, 5))


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.STATIC}}, tags=["dynamic", "auto", "static"])
def test_dim_auto_and_static():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}}, allow_static=True, tags=["dynamic", "auto"])
def test_dim_auto_lets_export_specialize_the_feature_axis():
    # the Linear pins axis 1 to 8: AUTO accepts that silently (allow_static says it is intended),
    # a named Dim or DYNAMIC would raise
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.DYNAMIC}}, tags=["dynamic", "dynamic-hint"])
def test_dim_dynamic():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.DYNAMIC(min=2, max=32)}}, tags=["dynamic", "dynamic-hint"])
def test_dim_dynamic_with_bounds():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO(min=2, max=32)}}, tags=["dynamic", "auto"])
def test_dim_auto_with_bounds():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim.DYNAMIC, 1: Dim.DYNAMIC}},
    tags=["dynamic", "dynamic-hint", "unsupported"],
    xfail={"export": "Dim.DYNAMIC promises a dynamic axis; the Linear specializes the feature axis to 8"},
)
def test_dim_dynamic_on_a_specialized_axis_fails():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim.DYNAMIC}},
    tags=["dynamic", "dynamic-hint", "size-one", "unsupported"],
    xfail={"export": "an example size of 1 specializes the axis (0/1 specialization); Dim.DYNAMIC rejects that"},
)
def test_dim_dynamic_with_example_size_one_fails():
    return _classifier(), (torch.randn(1, 8),)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim.AUTO}}, allow_static=True, tags=["dynamic", "auto", "size-one"],
)
def test_dim_auto_with_example_size_one_becomes_static():
    # accepted, but the program is only valid for batch 1 (allow_static states that this is intended)
    return _classifier(), (torch.randn(1, 8),)


class SizeBranch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", min=5, max=64)}}, tags=["dynamic", "shape-branch", "control-flow"],
)
def test_shape_dependent_branch_within_its_range():
    return SizeBranch(), (torch.randn(6),)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", max=64)}},
    tags=["dynamic", "shape-branch", "control-flow", "unsupported"],
    xfail={"export": "the branch on x.shape[0] > 4 holds only for b >= 5; export suggests Dim('b', min=5, max=64)"},
)
def test_shape_dependent_branch_across_the_range_fails():
    return SizeBranch(), (torch.randn(6),)


@pytest.mark.filterwarnings("ignore::pytest_export.ExportWarning")  # plants the narrowed-AUTO warning
@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO}}, tags=["dynamic", "shape-branch", "auto"])
def test_shape_dependent_branch_with_auto_narrows_the_range():
    # AUTO narrows the range to [5, inf) without an error: the program rejects smaller inputs
    return SizeBranch(), (torch.randn(6),)


class FixedLength(torch.nn.Module):
    def forward(self, x):
        assert x.shape[0] == 8, "this model only takes 8 frames"
        return x.cumsum(0)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("frames", min=2, max=64)}},
    tags=["dynamic", "specialization", "unsupported"],
    xfail={"export": "the assert specializes frames to 8; a named Dim refuses the specialization"},
)
def test_specialization_of_a_named_dim_fails():
    return FixedLength(), (torch.randn(8),)


class Tokens(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, ids, mask):
        h = self.proj(self.emb(ids))
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp(min=1.0)


def _token_inputs(sizes, args, kwargs):
    """Token ids in the vocabulary and a 0/1 mask, for any drawn (batch, seq)."""
    b, t = sizes["batch"], sizes["seq"]
    return (torch.randint(0, 50, (b, t)), torch.randint(0, 2, (b, t)).bool()), {}


_batch, _seq = Dim("batch", min=1, max=16), Dim("seq", min=1, max=128)


@pytest.mark.exportable(
    dynamic_shapes={"ids": {0: _batch, 1: _seq}, "mask": {0: _batch, 1: _seq}},
    input_builder=_token_inputs,
    tags=["dynamic", "dim", "input-builder"],
)
def test_token_ids_and_mask_with_an_input_builder():
    torch.manual_seed(0)
    return Tokens().eval(), (torch.randint(0, 50, (2, 7)), torch.ones(2, 7, dtype=torch.bool))


class Flatten(torch.nn.Module):
    def forward(self, x):
        b, t, d = x.shape
        return x.reshape(b * t, d).mean(0), x.view(b, -1).sum(-1)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("b", min=1, max=16), 1: Dim("t", min=1, max=32)}}, tags=["dynamic", "reshape"],
)
def test_reshape_with_two_dynamic_axes():
    return Flatten(), (torch.randn(3, 5, 4),)


class NonZero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x > 0), x[x > 0].sum()


@pytest.mark.exportable(tags=["dynamic", "data-dependent", "unbacked"])
def test_data_dependent_output_size():
    return NonZero(), (torch.randn(10),)


class ItemSize(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k <= 16)
        return torch.zeros(k) + x.sum()


@pytest.mark.exportable(tags=["dynamic", "data-dependent", "unbacked", "torch-check"])
def test_item_as_a_size_with_torch_check():
    return ItemSize(), (torch.randn(3), torch.tensor(5))


_x_sc = torch.randn(4, 8)
_shapes = ShapesCollection()
_shapes[_x_sc] = {0: Dim("batch", min=1, max=64)}


@pytest.mark.exportable(dynamic_shapes=_shapes, tags=["dynamic", "shapes-collection"])
def test_shapes_collection_keyed_by_tensor():
    # a ShapesCollection maps the example tensors themselves, so the case must return those very tensors
    return _classifier(), (_x_sc,)


_additional = AdditionalInputs()
_additional.add((torch.randn(7, 8),))
_additional.add((torch.randn(2, 8),))


@pytest.mark.exportable(dynamic_shapes=_additional, tags=["dynamic", "additional-inputs"])
def test_additional_inputs_infer_the_dynamic_axis():
    return _classifier(), (torch.randn(4, 8),)


@pytest.mark.api
def test_shapes_collection_through_the_fixture(export_check):
    x = torch.randn(4, 8)
    sc = ShapesCollection()
    sc[x] = {0: Dim("rows", min=1, max=32)}
    resolved = sc.dynamic_shapes(_classifier(), (x,))  # by argument name, as export receives it
    assert list(resolved) == ["x"] and resolved["x"][0].__name__ == "rows"
    result = export_check(_classifier(), (x,), dynamic_shapes=sc, tags=["dynamic", "shapes-collection", "api"])
    assert list(result.stages["export"].data["range_constraints"].values()) == [[1, 32]]


@pytest.mark.api
def test_refined_suggested_fixes_make_the_export_pass(export_check):
    """A named Dim across a branch fails with suggested fixes; refining the spec with them exports."""
    declared = {"x": {0: Dim("b", max=64)}}
    try:
        torch.export.export(SizeBranch(), (torch.randn(6),), dynamic_shapes=declared)
    except torch._dynamo.exc.UserError as exc:
        refined = refine_dynamic_shapes_from_suggested_fixes(exc.msg, declared)
    else:
        pytest.fail("the branch on x.shape[0] should make the declared range fail")
    assert refined["x"][0].min == 5 and refined["x"][0].max == 64
    result = export_check(SizeBranch(), (torch.randn(6),), dynamic_shapes=refined,
                          tags=["dynamic", "suggested-fixes", "api"])
    assert list(result.stages["export"].data["range_constraints"].values()) == [[5, 64]]


# ---- what one example cannot show: the guards and fuzz stages' findings ----------------------------------

class PairsOfFour(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 4).sum(1)


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim.DYNAMIC(min=4, max=32)}},
    tags=["dynamic", "guards", "silent", "reshape"],
    xfail={"guards": "reshape(-1, 4) of an (n, 2) input adds the guard 2*n % 4 == 0 without an error: the program "
                     "refuses odd sizes inside the declared range, and eager raises there too (eager-raised-in-range: "
                     "the declaration promises more than the model supports); fuzz leaves those sizes to guards"},
)
def test_reshape_guard_refuses_sizes_inside_the_declared_range():
    return PairsOfFour(), (torch.randn(8, 2),)


@torch.library.custom_op("pytest_export_corpus::keep_ten_rows", mutates_args=())
def keep_ten_rows(x: torch.Tensor) -> torch.Tensor:
    return x[:10].clone()


@keep_ten_rows.register_fake
def _(x):
    return torch.empty_like(x)  # wrong above 10 rows: the real kernel keeps at most 10


class MeanOfKeptRows(torch.nn.Module):
    def forward(self, x):
        y = keep_ten_rows(x)
        return y.sum(0) / y.shape[0]


@pytest.mark.exportable(
    dynamic_shapes={"x": {0: Dim("rows", min=2, max=64)}},
    tags=["dynamic", "fuzz", "silent", "custom-op"],
    xfail={"guards": "a fake kernel that is wrong above 10 rows exports and compares fine at the example size; "
                     "the program divides by the fake row count at the max",
           "fuzz": "the same wrong fake kernel; fuzzing shrinks the failure to rows=11"},
)
def test_custom_op_with_a_fake_kernel_wrong_above_a_threshold():
    torch.manual_seed(0)
    return MeanOfKeptRows(), (torch.randn(4, 3),)


class TrainModeNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(x)


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}}, tags=["dynamic", "guards", "size-one"],
                        train=True)  # train-mode batch norm on purpose: eager rejects size 1
def test_size_one_below_the_min_is_let_through_where_eager_rejects_it():
    # passes: b=1 is accepted by the program, which eager's train-mode BatchNorm refuses; torch checks no min of
    # 2 or less, so the report records it (guards' below_min), no ExportWarning (#26)
    return TrainModeNorm(), (torch.randn(4, 4),)
