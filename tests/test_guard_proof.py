"""The promise proved (issue #41): the program's own guards decided over every declared size, and every fix offered
as ready proved the same way. Each reproduction of the issue plants its defect; every fix offered is pasted back
into raw ``torch.export.export`` and its program run at every size the fix keeps.

Cases run through ``pytest_export.check`` (the plugin's runner); the terminal line is checked through pytester.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.declare.options import UsageError  # noqa: F401 - the API's error type, imported as users do


def check(module, args, kwargs=None, **kw):
    kw.setdefault("examples", 8)
    return pytest_export.check(module, args, kwargs, name=f"{type(module).__name__}-{id(module)}", **kw)


def sizes_of(d) -> list[int]:
    """Every size a pasted ``Dim`` (or derived ``Dim``) keeps."""
    root = getattr(d, "root", None)
    if root is not None:
        return [d.fn(k) for k in range(root.min, root.max + 1)]
    return list(range(d.min, d.max + 1))


def pasted(fix: str) -> dict:
    """The fix's Python, run as a user pastes it: its names."""
    ns: dict = {"Dim": Dim}
    exec(fix, ns)  # noqa: S102 - the text the harness printed for a user to paste
    return ns


class Branch37(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 37:
            return x * 2
        return x + 1


def test_a_program_that_refuses_one_size_inside_its_range_fails_by_proof_and_its_fix_holds_everywhere():
    res = check(Branch37(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim.AUTO(min=2, max=64)}})
    guards = res.stages["guards"]
    assert guards.status == "failed", guards.message
    assert ("refused where x.shape[0] == 37: 1 of 63 sizes of x.shape[0]: 37; the guard was added at "
            "tests/test_guard_proof.py:") in guards.message, guards.message
    assert "(proved over every declared size, not sampled)" in guards.message
    assert guards.data["proof"]["refused"][0]["examples"] == [[37]]
    # the narrowing that gives up the fewest sizes keeps the example: [2, 36], not [2, 32]
    fix = guards.data["dynamic_shapes_fix"]
    assert fix == "x_shape_0 = Dim('x_shape_0', min=2, max=36)", fix
    assert "it gives up 28 of its 63 declared sizes" in guards.message, guards.message
    d = pasted(fix)["x_shape_0"]
    ep = torch.export.export(Branch37(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: d}})
    for n in sizes_of(d):
        ep.module()(torch.randn(n, 3))


class Pair(torch.nn.Module):
    def forward(self, x):
        if x.shape[2] * x.shape[3] == 64:
            return x * 2
        return x + 1


def test_a_relation_is_refused_exactly_and_the_fix_is_proved_over_every_size_it_keeps():
    res = check(Pair(), (torch.randn(1, 2, 5, 6),),
                dynamic_shapes={"x": {2: Dim.AUTO(min=4, max=32), 3: Dim.AUTO(min=4, max=32)}})
    guards = res.stages["guards"]
    assert guards.status == "failed"
    assert ("refused where x.shape[2]*x.shape[3] == 64: 3 of 841 sizes of (x.shape[2], x.shape[3]): (4, 16), "
            "(8, 8), (16, 4)") in guards.message, guards.message
    fix = guards.data["dynamic_shapes_fix"]
    assert fix != "h = Dim('h', min=4, max=32)" and "ready to paste (proved:" in guards.message
    names = pasted(fix)
    (name, d), = [(k, v) for k, v in names.items() if k.startswith("x_shape")]
    other = Dim.AUTO(min=4, max=32)
    axis = 2 if name == "x_shape_2" else 3
    spec = {"x": {axis: d, 5 - axis: other}}
    ep = torch.export.export(Pair(), (torch.randn(1, 2, 5, 6),), dynamic_shapes=spec)
    for a, b in itertools.product(sizes_of(d), range(4, 33)):
        shape = [1, 2, a, b] if axis == 2 else [1, 2, b, a]
        ep.module()(torch.randn(shape))


class Product(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] * y.shape[1] > 64:
            return x.sum() + y.sum()
        return x.sum() - y.sum()


def test_a_product_bound_gets_one_proved_fix_not_a_staircase():
    spec = {"x": {0: Dim.AUTO(min=1, max=16)}, "y": {1: Dim.AUTO(min=1, max=16)}}
    args = (torch.randn(2, 3), torch.randn(3, 2))
    res = check(Product(), args, dynamic_shapes=spec)
    guards = res.stages["guards"]
    assert guards.status == "failed"
    assert "refused where x.shape[0]*y.shape[1] > 64: 114 of 256 sizes" in guards.message, guards.message
    fix = guards.data["dynamic_shapes_fix"]
    names = pasted(fix)
    (name, d), = [(k, v) for k, v in names.items() if not k.startswith("_") and k != "Dim"]
    assert d.max * 16 <= 64 or name.startswith("y"), fix  # one step to what the guard allows, not max-1
    fixed = {"x": {0: d}, "y": {1: spec["y"][1]}} if name.startswith("x") else {"x": spec["x"], "y": {1: d}}
    ep = torch.export.export(Product(), args, dynamic_shapes=fixed)
    for a, b in itertools.product(sizes_of(d), range(1, 17)):
        x, y = (torch.randn(a, 3), torch.randn(3, b)) if name.startswith("x") else (torch.randn(b, 3), torch.randn(3, a))
        ep.module()(x, y)


class HalfView(torch.nn.Module):
    def forward(self, x):
        return x.view(x.shape[0] // 2, 2, x.shape[1]).sum(1)


@pytest.mark.parametrize("with_plain_dim", [False, True])
def test_torchs_derived_fix_is_not_called_checked_where_export_keeps_less_than_it_declares(with_plain_dim):
    spec = {"x": {0: Dim("b", min=4, max=64)}}
    if with_plain_dim:  # a plain Dim beside the derived one crashed the check (TypeError: Cannot convert symbols)
        spec["x"][1] = Dim("n", min=2, max=8)
    res = check(HalfView(), (torch.randn(8, 3),), dynamic_shapes=spec)
    export = res.stages["export"]
    assert export.status == "failed"
    diag = export.data.get("diagnosis") or {}
    text = export.message
    assert "dynamic_shapes_fix" not in diag, diag
    assert "Cannot convert symbols" not in text, text
    assert "its program refuses sizes inside its own ranges: refused where" in text, text
    assert "export keeps _b in [2, 32] where the fix declares [0, 32]: write Dim('_b', min=2, max=32)" in text, text
    # and what it says is so: with _b from 2, raw torch's program takes every even b the declaration holds
    _b = Dim("_b", min=2, max=32)
    fixed = {"x": {0: 2 * _b, **({1: Dim("n", min=2, max=8)} if with_plain_dim else {})}}
    ep = torch.export.export(HalfView(), (torch.randn(8, 3),), dynamic_shapes=fixed)
    for b in range(4, 65, 2):
        ep.module()(torch.randn(b, 3))


class Sum(torch.nn.Module):
    def forward(self, x):
        return x.sum(0) * 2


def test_a_size_one_example_never_gets_a_constant_offered_as_a_fix():
    res = check(Sum(), (torch.randn(1, 4),), dynamic_shapes={"x": {0: Dim("batch", min=1, max=16),
                                                                   1: Dim("n", min=2, max=8)}})
    export = res.stages["export"]
    assert export.status == "failed"
    diag = export.data.get("diagnosis") or {}
    assert "dynamic_shapes_fix" not in diag, diag
    assert ("turns dynamic_shapes['x'][0], declared Dim('batch', min=1, max=16), into the constant 1"
            in export.message), export.message
    assert "export specializes a size-1 example" in export.message
    assert "paste back:" not in export.message


class Positions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Embedding(900, 4)

    def forward(self, ids):
        return self.pos(torch.arange(ids.shape[1])).unsqueeze(0) + ids.unsqueeze(-1).float()


def test_an_eager_error_at_a_declared_size_of_one_fails_the_promise():
    spec = {"ids": {0: Dim("batch", min=1, max=2), 1: Dim("seq", min=1, max=1024)}}
    res = check(Positions(), (torch.zeros(2, 16, dtype=torch.long),), dynamic_shapes=spec)
    guards = res.stages["guards"]
    assert guards.status == "failed", guards.message
    assert "eager raised on in-range sizes batch=1, seq=1024" in guards.message, guards.message
    assert not guards.data.get("eager_rejects"), guards.data.get("eager_rejects")


class Plain(torch.nn.Module):
    def forward(self, x):
        return x.relu() * 2


def test_a_passing_case_says_its_guards_were_proved_over_every_declared_size():
    res = check(Plain(), (torch.randn(4, 8),), dynamic_shapes={"x": {0: Dim("b", min=1, max=16),
                                                                     1: Dim("n", min=2, max=32)}})
    assert res.outcome == "passed", res.text() if hasattr(res, "text") else res
    proof = res.stages["guards"].data["proof"]
    assert proof["proved"] and proof["sizes"] == 16 * 31, proof
    assert any(line.startswith("guards: proved over all 496 declared sizes") for line in res.coverage_lines())


@pytest.mark.slow
def test_the_terminal_says_the_guards_were_proved(pytester):
    pytester.makepyfile(test_model="""
        import pytest
        import torch
        from torch.export import Dim

        class Plain(torch.nn.Module):
            def forward(self, x):
                return x.relu() * 2

        @pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=1, max=16)}})
        def test_plain():
            return Plain(), (torch.randn(4, 8),)
    """)
    out = pytester.runpytest_subprocess("--export-check", "--export-summary=full", "-p", "no:cacheprovider")
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines(["*guards proved over every declared size: 1 of 1 cases with dynamic shapes*"])


def test_a_static_case_has_no_range_to_prove_and_says_nothing_of_it():
    """No axis declared dynamic: no proof is owed, so no "not proved" line (it would keep every static run from
    its one green line)."""
    from pytest_export.report.summary import needs_attention, proof_lines

    res = check(Plain(), (torch.randn(4, 8),))
    assert res.outcome == "passed" and "proof" not in res.stages["guards"].data
    case = res.to_json()
    assert not proof_lines([case]) and not needs_attention([case])


class ChecksFive(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[0] != 5)
        return x + 1


class ItemBranch(torch.nn.Module):
    def forward(self, x):
        if int(x.sum()) > 0:  # a tensor made a Python number: data-dependent
            return x * 2
        return x


def test_the_export_hints_point_somewhere():
    # a constraint violation without suggested fixes: the hint does not send the user to fixes that are not there
    res = check(ChecksFive(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}})
    export = res.stages["export"]
    assert export.status == "failed" and "Suggested fixes" not in export.message, export.message
    assert "hint: a declared dynamic_shapes promise does not hold" in export.message
    assert "see the suggested fixes" not in export.message
    # where torch suggests some, it says so
    res = check(Sum(), (torch.randn(1, 4),), dynamic_shapes={"x": {0: Dim("batch", min=1, max=16)}})
    assert "does not hold; see the suggested fixes above" in res.stages["export"].message
    # int(...) of a tensor is named as a cause of a data-dependent failure, beside .item()
    res = check(ItemBranch(), (torch.randn(4, 3),))
    export = res.stages["export"]
    assert export.status == "failed", export.message
    assert "`.item()`, `int(t)`, `float(t)`, `bool(t)`, `if t:`" in export.message, export.message


def test_a_guard_over_several_dims_that_refuses_by_one_alone_is_said_for_that_dim():
    """``Mod(h*w, b*h*w) == 0`` (a view that re-derives the batch) refuses batch 1 at every image size: the line
    names the dim and its size, not a three-dim relation on every row (issue #54); a true relation stays one."""
    import sympy
    from torch.utils._sympy.functions import PythonMod

    from pytest_export.proof.prove import Proof
    from pytest_export.proof.solver import Guard, solve

    b, h, w = sympy.symbols("s0 s1 s2", integer=True, positive=True)
    names = {"s0": "batch", "s1": "h16", "s2": "w16"}
    batch_one = Guard(sympy.Ne(PythonMod(h * w, b * h * w), 0), "Mod(h16*w16, batch*h16*w16) == 0",
                      ok="Mod(h16*w16, batch*h16*w16) != 0")
    relation = Guard(sympy.Ne(h * w, 64), "h16*w16 == 64", ok="h16*w16 != 64")
    sol = solve([batch_one, relation], {"s0": (1, 8), "s1": (4, 16), "s2": (4, 16)})
    proof = Proof(sol, names)
    first, second = (proof.refused_text(d) for d in sol.refusing)
    assert first.startswith("refused where batch == 1, at every size of h16, w16 (the guard "
                            "`Mod(h16*w16, batch*h16*w16) != 0`): 169 of 1352 sizes of (batch, h16, w16)"), first
    assert "a relation between" not in first
    assert second.startswith("refused where h16*w16 == 64: 3 of 169 sizes of (h16, w16)"), second
    assert "a relation between h16 and w16, no size of one alone" in second
