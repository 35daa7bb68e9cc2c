"""Proved means the whole promise (#53): a range without a max is decided over all of it, a one-symbol guard over a
huge range exactly, and a relation export adds between bare ``Dim.DYNAMIC`` axes is a finding (between bare
``Dim.AUTO`` axes: recorded and shown). Each reproduction plants its defect and checks it with raw torch."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.export import Dim

import pytest_export


def check(module, args, **kw):
    kw.setdefault("examples", 5)
    return pytest_export.check(module, args, name=f"{type(module).__name__}-{id(module)}", **kw)


def refuses(ep, *sizes_of_inputs) -> bool:
    try:
        ep.module()(*sizes_of_inputs)
    except Exception:  # noqa: BLE001 - raw torch's guard failure
        return True
    return False


class Not100(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 100:
            return x[:1] * 0
        return x * 2


@pytest.mark.parametrize("hint", [Dim.DYNAMIC(min=2), Dim.AUTO(min=2)])
def test_a_refusal_past_the_fuzz_cap_of_a_range_without_a_max_fails_by_proof(hint):
    dynamic_shapes = {"x": {0: hint}}
    ep = torch.export.export(Not100(), (torch.randn(8, 3),), dynamic_shapes=dynamic_shapes)
    assert refuses(ep, torch.randn(100, 3)) and not refuses(ep, torch.randn(101, 3))  # raw torch
    res = check(Not100(), (torch.randn(8, 3),), dynamic_shapes=dynamic_shapes)
    guards = res.stages["guards"]
    assert guards.status == "failed", guards.message
    assert "refused where x.shape[0] == 100: 1 size of an unbounded range of x.shape[0]: 100" in guards.message
    assert "(proved over every declared size, not sampled)" in guards.message
    # the fix counts the declared range, not the fuzz cap (64), and holds when pasted back
    assert "it gives up every size above 99 of its declared range, which has no max, though the program refuses " \
           "1 size of it" in guards.message, guards.message
    assert guards.data["dynamic_shapes_fix"] == "x_shape_0 = Dim('x_shape_0', min=2, max=99)"
    line = res.info["ranges"]["guards"]["line"]
    assert line.startswith("guards over the declared sizes (an unbounded range): 1 of 1 guard refuse"), line
    assert not res.info["ranges"]["guards"]["proved"]


class Fine(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 3).sum(0) * x.shape[0]


def test_a_range_without_a_max_is_proved_over_all_of_it_only_when_it_is():
    res = check(Fine(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: Dim.DYNAMIC(min=2)}})
    assert res.outcome == "passed", res.failure_text()
    line = res.info["ranges"]["guards"]["line"]
    assert line.startswith("guards: proved over every one of the declared sizes (an unbounded range)"), line


class TwoSizes(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1000 or x.shape[0] == 333:
            return x[:1] * 0
        return x * 2


@pytest.mark.slow
def test_a_one_symbol_guard_over_a_huge_range_is_decided_exactly():
    dynamic_shapes = {"x": {0: Dim.DYNAMIC(min=2, max=2 ** 23)}}
    ep = torch.export.export(TwoSizes(), (torch.randn(8, 3),), dynamic_shapes=dynamic_shapes)
    assert refuses(ep, torch.randn(333, 3)) and refuses(ep, torch.randn(1000, 3))
    res = check(TwoSizes(), (torch.randn(8, 3),), dynamic_shapes=dynamic_shapes, examples=3)
    guards = res.stages["guards"]
    assert guards.status == "failed", guards.message
    for size in (333, 1000):
        assert f"refused where x.shape[0] == {size}: 1 of 8388607 sizes of x.shape[0]: {size}" in guards.message
    assert "sampled" not in res.info["ranges"]["guards"]["line"]


class Related(torch.nn.Module):
    def forward(self, a, b):
        if a.shape[0] > b.shape[0]:
            return a[:b.shape[0]] + b
        return a + b[:a.shape[0]]


def _raw_refusals(dynamic_shapes) -> int:
    ep = torch.export.export(Related(), (torch.randn(5), torch.randn(3)), dynamic_shapes=dynamic_shapes)
    return sum(refuses(ep, torch.randn(i), torch.randn(j)) for i, j in itertools.product(range(2, 12), repeat=2))


def test_a_relation_between_bare_dynamic_axes_fails_guards_with_the_relation_named():
    dynamic_shapes = {"a": {0: Dim.DYNAMIC}, "b": {0: Dim.DYNAMIC}}
    assert _raw_refusals(dynamic_shapes) == 55  # raw torch: 55 of the 100 pairs in 2..11 x 2..11
    res = check(Related(), (torch.randn(5), torch.randn(3)), dynamic_shapes=dynamic_shapes)
    guards = res.stages["guards"]
    assert guards.status == "failed", guards.message
    assert "refused where a.shape[0] <= b.shape[0]" in guards.message, guards.message
    assert "a relation between a.shape[0] and b.shape[0], no size of one alone" in guards.message
    assert "test_whole_promise.py" in guards.message and "if a.shape[0] > b.shape[0]:" in guards.message
    assert "tie them in the declaration (one shared Dim, or a derived Dim" in guards.message
    line = res.info["ranges"]["guards"]["line"]
    assert "no guards recorded" not in line and "(of an unbounded range), not proved" in line, line


def test_a_relation_between_bare_auto_axes_is_export_s_choice_shown_and_warned():
    res = check(Related(), (torch.randn(5), torch.randn(3)), dynamic_shapes={"a": {0: Dim.AUTO}, "b": {0: Dim.AUTO}})
    assert res.stages["guards"].status == "passed", res.failure_text()
    line = res.info["ranges"]["guards"]["line"]
    assert "no guards recorded" not in line, line
    assert "the program accepts only where `a.shape[0] > b.shape[0]`" in line, line
    assert any("export kept only [3, inf]" in w for w in res.warnings), res.warnings
    # the guard it quotes is in the declaration's names, not torch's symbols (#54)
    assert any("the guards that narrowed it: `a.shape[0] > b.shape[0]` from" in w for w in res.warnings), res.warnings
