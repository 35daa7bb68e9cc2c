"""compare_trees agrees with torch.testing.assert_close on every pair of leaves, fast path included."""

from __future__ import annotations

import math
from unittest import mock

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pytest_export.torchside import compare
from pytest_export.torchside.compare import Mismatch, compare_trees

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool]


@st.composite
def pairs(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    base = (torch.randn(shape, generator=gen) * 4).to(dtype)
    change = draw(st.sampled_from(["same", "copy", "nudge", "near", "nan", "dtype", "shape", "noncontiguous"]))
    other = base.clone()
    if change == "nudge" and base.numel():
        other = other.clone()
        other.view(-1)[0] = other.view(-1)[0] + (1 if dtype != torch.bool else True)
    elif change == "near" and base.is_floating_point() and base.numel():  # around the tolerance: both sides of it
        other = base.clone()
        other.view(-1)[-1] = other.view(-1)[-1] * (1 + draw(st.sampled_from([1e-7, 1e-6, 1e-5, 1e-3]))) + 1e-6
    elif change == "nan" and base.is_floating_point() and base.numel():
        base = base.clone()
        base.view(-1)[0] = float("nan")
        other = base.clone() if draw(st.booleans()) else other
    elif change == "dtype":
        other = other.to(torch.float16 if dtype != torch.float16 else torch.float32)
    elif change == "shape":
        other = other.reshape(-1) if base.dim() != 1 else other.unsqueeze(0)
    elif change == "noncontiguous" and base.dim() >= 2:
        other = other.transpose(0, 1).contiguous().transpose(0, 1)
    elif change == "same":
        other = base
    return other, base


def at_scale(actual, expected) -> bool:
    """The rule beside assert_close's where no tolerance is given (issue #54): one floating dtype and shape, finite
    on both sides, and the norm of the difference within ``NORM_RTOL`` of the norm of the expected output."""
    if (actual.dtype != expected.dtype or actual.shape != expected.shape or not expected.is_floating_point()
            or not expected.numel()):
        return False
    a, e = actual.double(), expected.double()
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(e).all())):
        return False
    ref = float(torch.linalg.vector_norm(e))
    return ref > 0 and float(torch.linalg.vector_norm(a - e)) / ref <= compare.NORM_RTOL[expected.dtype]


@settings(max_examples=300, deadline=None)
@given(pairs())
def test_compare_trees_fails_exactly_where_assert_close_and_the_scale_rule_both_do(pair):
    actual, expected = pair
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
        want_ok = True
    except AssertionError:
        want_ok = at_scale(actual, expected)
    try:
        errs = compare_trees({"y": actual}, {"y": expected})
        got_ok = True
    except Mismatch:
        got_ok = False
    assert got_ok == want_ok
    if got_ok:
        assert errs["max_abs_error"] >= 0 and errs["max_rel_error"] >= 0


def test_identical_leaves_report_zero_error_and_different_ones_their_error():
    x = torch.linspace(1, 2, 5)
    assert compare_trees((x, x.clone()), (x, x)) == {"max_abs_error": 0.0, "max_rel_error": 0.0}
    y = x.clone()
    y[2] += 1e-6
    errs = compare_trees(y, x)
    assert errs["max_abs_error"] == pytest.approx(1e-6, rel=0.5)
    with pytest.raises(Mismatch, match=r"output: max abs error 0\.5"):
        compare_trees(x + 0.5, x)


@settings(max_examples=300, deadline=None)
@given(pairs(), st.integers(1, 5), st.sampled_from([None, (1e-5, 1e-6), (0.0, 1e-3)]))
def test_slice_by_slice_the_verdict_and_the_errors_are_those_of_the_whole(pair, chunk, tolerances):
    """Values are compared a slice at a time (``compare.CHUNK`` elements) so that comparing a large output holds
    no float64 copies of it: the verdict is still assert_close's on the whole, and the errors are the whole's."""
    actual, expected = pair
    rtol, atol = tolerances or (None, None)

    def run():
        try:
            return compare_trees({"y": actual}, {"y": expected}, rtol=rtol, atol=atol)
        except Mismatch as exc:
            return exc.worst(), str(exc)

    whole = run()
    with mock.patch.object(compare, "CHUNK", chunk):
        sliced = run()
    assert sliced == whole
    keywords = {} if tolerances is None else {"rtol": rtol, "atol": atol}
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, **keywords)
        assert isinstance(sliced, dict)
    except AssertionError:
        assert isinstance(sliced, dict if tolerances is None and at_scale(actual, expected) else tuple)


def test_noise_at_the_outputs_scale_passes_and_a_wrong_kernel_fails_saying_what_it_was_held_to():
    """Logits of a deep model (|400|) off by reduction-order noise (1e-4 here and there, 2.5e-7 of the norm): no
    defect. tanh-approximated GELU for exact GELU (1e-4 of the norm) is one, and its message says the tolerances,
    the scale rule and the keywords that change them."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 1000, generator=gen) * 400
    noisy = logits + torch.randn(4, 1000, generator=gen) * 1e-4
    with pytest.raises(AssertionError):
        torch.testing.assert_close(noisy, logits)  # element by element, torch.testing calls it a mismatch
    errs = compare_trees({"logits": noisy}, {"logits": logits})
    assert errs["max_abs_error"] > 1e-5
    with pytest.raises(Mismatch):  # given tolerances are held element by element
        compare_trees({"logits": noisy}, {"logits": logits}, rtol=1.3e-6, atol=1e-5)
    x = torch.randn(64, 64, generator=gen) * 2
    exact, tanh = torch.nn.functional.gelu(x), torch.nn.functional.gelu(x, approximate="tanh")
    with pytest.raises(Mismatch) as info:
        compare_trees(tanh, exact)
    text = str(info.value)
    assert "held to rtol=1.3e-06, atol=1e-05 (torch.testing's for torch.float32), or at the output's scale to a " \
           "norm-relative error of 1e-05: it is " in text, text
    assert "rtol= and atol= in the exportable marker change the tolerances" in text
    assert info.value.errors[0]["norm_rel_error"] > 1e-5


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_nan_or_infinity_against_a_number_is_an_infinite_error_never_zero(bad):
    # issue #44: a NaN against a number was reported as "max abs error 0, max rel error 0"
    with pytest.raises(Mismatch) as info:
        compare_trees(torch.tensor([1.0, bad, 3.0]), torch.tensor([1.0, 2.0, 3.0]))
    (err,) = info.value.errors
    assert err["max_abs_error"] == math.inf and err["max_rel_error"] == math.inf and err["nonfinite"] == 1, err
    assert "max abs error inf, max rel error inf (1 element NaN or infinite on one side)" in str(info.value)
    # the same NaN or infinity on both sides is no error
    assert compare_trees(torch.tensor([bad, 2.0]), torch.tensor([bad, 2.0])) == {"max_abs_error": 0.0,
                                                                                "max_rel_error": 0.0}
