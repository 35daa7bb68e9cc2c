"""Property tests of the declaration model and the size strategies (Hypothesis draws the declarations)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.export import Dim

from pytest_export import UsageError
from pytest_export.audit import audit
from pytest_export.declare.shapes import parse
from pytest_export.probes.strategies import assignments, boundaries, boundary_assignments, build_inputs


class TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x.sum() + y.sum()


@st.composite
def declarations(draw):
    """A root Dim with a range, an affine form a*s+b for x, and y on the root itself; an example inside."""
    lo = draw(st.integers(2, 20))
    hi = draw(st.integers(lo + 1, lo + 40))
    a = draw(st.integers(1, 3))
    b = draw(st.integers(0, 3))
    root_example = draw(st.integers(lo, hi))
    return lo, hi, a, b, root_example


def _case(lo, hi, a, b, root_example):
    s = Dim("s", min=lo, max=hi)
    x_dim = s if (a, b) == (1, 0) else a * s + b
    args = (torch.randn(a * root_example + b, 2), torch.randn(root_example))
    return {"x": {0: x_dim}, "y": {0: s}}, args


@settings(deadline=None)
@given(declarations())
def test_every_form_a_s_plus_b_is_read_as_its_root_and_affine_coefficients(decl):
    lo, hi, a, b, ex = decl
    ds, args = _case(*decl)
    d = parse("case.py::test_x", ds, TwoInputs(), args, {})
    assert {(r.name, r.min, r.max) for r in d.roots.values()} == {("s", lo, hi)}
    by_label = {ax.label: ax for ax in d.axes}
    assert (by_label["x.shape[0]"].a, by_label["x.shape[0]"].b) == (a, b)
    assert (by_label["y.shape[0]"].a, by_label["y.shape[0]"].b) == (1, 0)
    assert by_label["x.shape[0]"].size(ex) == args[0].shape[0]


@settings(deadline=None)
@given(declarations(), st.sampled_from(["below", "above"]))
def test_an_example_outside_its_declared_range_names_the_key(decl, where):
    lo, hi, a, b, _ = decl
    outside = lo - 1 if where == "below" else hi + 1
    ds, args = _case(lo, hi, a, b, outside)
    with pytest.raises(UsageError) as info:
        parse("case.py::test_x", ds, TwoInputs(), args, {})
    msg = str(info.value)
    assert msg.startswith("case.py::test_x: dynamic_shapes")
    assert "'x'" in msg or "'y'" in msg


@settings(deadline=None, max_examples=8, suppress_health_check=[HealthCheck.too_slow])
@given(declarations(), st.data())
def test_every_drawn_assignment_satisfies_the_declaration(decl, data):
    lo, hi, a, b, ex = decl
    ds, args = _case(*decl)
    d = parse("case.py::test_x", ds, TwoInputs(), args, {})
    ep = torch.export.export(TwoInputs(), args, dynamic_shapes=ds)
    au = audit(d, ep)
    assert not au.failures, au.failures
    (var,) = au.model.vars
    assert (var.lo, var.hi) == (lo, hi)
    assert set(boundaries(var)) >= {lo, hi} and all(lo <= v <= hi for v in boundaries(var))
    drawn = [data.draw(assignments(au.model)) for _ in range(5)] + boundary_assignments(au.model)
    for values in drawn:
        (s,) = values.values()
        assert lo <= s <= hi
        new_args, _ = build_inputs(au.model, values, args, {}, seed=0)
        assert new_args[0].shape == (a * s + b, 2) and new_args[1].shape == (s,)
        assert new_args[0].dtype == args[0].dtype
        ep.module()(*new_args)  # and the program accepts it


@given(st.integers(2, 10), st.integers(0, 3))
def test_an_axis_past_the_rank_is_rejected_with_its_index(rank_extra, _):
    x = torch.randn(4, 3)
    axis = x.dim() + rank_extra - 2
    with pytest.raises(UsageError, match=rf"dynamic_shapes\['x'\]\[{axis}\]"):
        parse("case.py::test_x", {"x": {axis: Dim("b", max=8)}, "y": None}, TwoInputs(), (x, torch.randn(3)), {})
