"""Truth at real width by default (issue #50): each dim's edges run with real tensors first, and the budget pays
only for what runs.

Planted here: a model wrong only at batch 1 under a tight budget (``budget=3``; the search for the largest
affordable size had spent the budget on sizes it only asked about, and the edge ``b=1, t=2`` ran by shape only, so
the case passed); the order numerics are paid for in (edges, then each dim's min and max at the example, then the
corners, then the rest); the budget's ledger (``budget_spent`` never above the budget; shape checks it cannot pay
for are told apart); and the edges the budget leaves by shape, said at the case with the ``--export-budget`` that
runs them, which then runs them. The real-width encoder (BERT-base width, a position table of 1,000 rows declared
to 1,024) is ``slow``.
"""

from __future__ import annotations


import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.memory.cost import NUMERIC, Costs, Measure, round_budget
from pytest_export.probes import choose, sizing

from .helpers import cases_by_name, run_check, write_cases

WIDTH, DEPTH = 256, 12
T_MAX = 65536


class WrongAtOne(torch.nn.Module):
    """12 residual blocks over (batch, t, 256) that compute something else at batch 1: export traces the branch for
    a batch that is not 1 (a declared min of 1 is no specialization), so the program differs from eager there, and
    only a run with real tensors at batch 1 sees it (the shapes agree). Deep enough that each size asked about had
    cost the budget a shape check's share: under ``budget=3`` the search spent it all, and the case passed."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.LayerNorm(WIDTH))
            for _ in range(DEPTH))

    def body(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x

    def forward(self, x):
        y = self.body(x)
        if x.shape[0] == 1:
            return y * 2
        return y


SHAPES = {"x": {0: Dim("b", min=1, max=64), 1: Dim("t", min=2, max=T_MAX)}}


def _case(**keywords):
    torch.manual_seed(0)
    return pytest_export.check(WrongAtOne().eval(), (torch.randn(2, 8, WIDTH),), dynamic_shapes=SHAPES, examples=5,
                               name="edges::wrong_at_one", **keywords)


def _modes(res) -> dict[str, str]:
    return {p["probe"]: p["mode"] for p in res.stages["guards"].data["probe_list"]}


@pytest.mark.slow
def test_a_tight_budget_still_runs_the_cheap_edge_with_real_tensors_and_the_case_fails(monkeypatch):
    asked: list[float] = []
    largest = choose.largest_numeric

    def spy(ctx, model, v):  # asking what a size would cost never spends the budget
        costs = ctx.calibration.costs()
        before = costs.used()
        out = largest(ctx, model, v)
        asked.append(costs.used() - before)
        return out

    monkeypatch.setattr(choose, "largest_numeric", spy)
    res = _case(budget=3)
    assert res.outcome == "failed", res.failure_text()
    guards = res.stages["guards"]
    assert guards.status == "failed" and guards.data["signature"] == "wrong-in-range", guards.message
    assert "b=1, t=2" in guards.message
    assert _modes(res)["b=1, t=2"] == NUMERIC
    assert asked and all(spent == 0.0 for spent in asked), asked  # the search asked, and paid nothing
    ranges = res.info["ranges"]
    assert ranges["budget_spent"] <= ranges["budget"] == 3


@pytest.mark.slow
def test_the_clean_twin_passes_under_the_same_budget():
    class Clean(WrongAtOne):
        def forward(self, x):
            return self.body(x)

    torch.manual_seed(0)
    res = pytest_export.check(Clean().eval(), (torch.randn(2, 8, WIDTH),), dynamic_shapes=SHAPES, examples=5,
                              budget=3, name="edges::clean")
    assert res.outcome == "passed", res.failure_text()
    assert res.info["ranges"]["budget_spent"] <= 3


@pytest.mark.slow
def test_numerics_are_paid_for_in_the_order_edges_at_example_corners_rest():
    """Each probe's plan, in the order the budget paid for it: every edge before any probe at the example's sizes,
    those before the corners, the corners before the rest; the cheapest first within a tier."""
    order: list[tuple[dict, float]] = []
    commit = sizing._commit

    def spy(costs, sized, plan, measured):
        if sized.in_range and sized.values:
            order.append((dict(sized.values), plan.seconds))
        return commit(costs, sized, plan, measured)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sizing, "_commit", spy)
        res = _case(budget=3)  # every in-range probe of guards is planned up front, whatever the budget affords
    model_probes = [p for p in res.stages["guards"].data["probe_list"] if p["kind"] == "in-range"]
    assert model_probes[0]["probe"] == "b=1, t=2" and model_probes[1]["probe"] in ("b=64, t=2", f"b=1, t={T_MAX}")
    names = {"b": None, "t": None}
    symbols = list(order[0][0])
    names["b"], names["t"] = symbols
    lo, hi, ex = {"b": 1, "t": 2}, {"b": 64, "t": T_MAX}, {"b": 2, "t": 8}

    def tier(values: dict) -> int:
        at = {n: values[s] for n, s in names.items()}
        if all(at[n] == lo[n] for n in at) or any(at[n] == hi[n] and all(at[m] == lo[m] for m in at if m != n)
                                                   for n in at):
            return 0
        if any(at[n] in (lo[n], hi[n]) and all(at[m] == ex[m] for m in at if m != n) for n in at):
            return 1
        if all(at[n] in (lo[n], hi[n]) for n in at):
            return 2
        return 3

    tiers = [tier(values) for values, _ in order[:9]]
    assert tiers == sorted(tiers), order[:9]
    assert tiers[:3] == [0, 0, 0] and 1 in tiers and 2 in tiers
    edge_costs = [s for (values, s), t in zip(order, tiers) if t == 0]
    assert edge_costs == sorted(edge_costs)  # the cheapest edge first


def test_the_budget_spent_never_passes_the_budget_and_shape_checks_past_it_are_told_apart():
    costs = Costs(max_memory=2**40, budget=1.0)
    costs.example = Measure(flops=1e9, peak=1, total=1, inputs=1, ops=1000)  # a shape check: 0.4 nominal s
    plan = costs.decide(0.7, 0, fake_ok=True, edge=True)
    assert plan.mode == NUMERIC
    costs.charge(plan)
    for _ in range(3):
        costs.charge(costs.decide(0.5, 0, fake_ok=True))  # runs by shape: 0.3 s within the budget, then past it
    assert costs.used() == pytest.approx(1.0)
    assert costs.beyond == pytest.approx(0.9)
    plan_out = costs.to_dict()["plan"]
    assert plan_out["predicted_s"] == pytest.approx(1.9) and plan_out["beyond_budget_s"] == pytest.approx(0.9)
    assert costs.to_dict()["budget_spent"] <= costs.budget


@pytest.mark.parametrize("seconds, rounded", [(0.0, 1.0), (0.2, 1.0), (3.2, 4.0), (12.01, 13.0), (149.0, 160.0),
                                              (1234.0, 1300.0)])
def test_the_budget_advised_is_round_and_at_least_what_the_edges_need(seconds, rounded):
    assert round_budget(seconds) == rounded >= seconds


EDGES_CASE = '''
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)
    def forward(self, x):
        return self.down(torch.relu(self.up(x)))

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=1, max=64), 1: Dim("t", min=2, max=16384)}},
                        examples=3, max_memory="1GB")
def test_mlp():
    torch.manual_seed(0)
    return Mlp().eval(), (torch.randn(2, 8, 256),)
'''


@pytest.mark.slow
def test_edges_the_budget_leaves_by_shape_are_said_at_the_case_with_the_budget_that_runs_them(pytester):
    write_cases(pytester, EDGES_CASE)
    result, data = run_check(pytester, "--export-budget", "0.05", "-W", "always::pytest_export.ExportWarning")
    case = cases_by_name(data)["test_mlp"]
    short = case["ranges"]["edges_short"]
    assert any("b=1, t=16384" in line for line in short["edges"]), short
    needed = short["budget_needed"]
    result.stdout.fnmatch_lines([f"*test_mlp*the budget left * of the declared ranges checked by shape only*"
                                 f"--export-budget {needed:g} runs every edge with real tensors*"])
    # the advice holds once taken: every edge runs numeric, and nothing is said
    result, data = run_check(pytester, "--export-budget", f"{needed:g}", report="again.json")
    case = cases_by_name(data)["test_mlp"]
    assert "edges_short" not in case["ranges"], case["ranges"]
    modes = {p["probe"]: p["mode"] for p in case["stages"]["guards"]["probe_list"]}
    assert modes["b=1, t=2"] == modes["b=64, t=2"] == modes["b=1, t=16384"] == "numeric", modes
    assert case["ranges"]["budget_spent"] <= case["ranges"]["budget"]
    assert "checked by shape only" not in result.stdout.str()


class Layer(torch.nn.Module):
    """One encoder layer at BERT-base width: hidden 768, 12 heads, feed-forward 3,072."""

    def __init__(self, d: int = 768, heads: int = 12, ff: int = 3072):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.GELU(), torch.nn.Linear(ff, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, t, d)))
        return self.ln2(x + self.ff(x))


class Encoder(torch.nn.Module):
    """Learned positions (``rows`` of them) and two layers at BERT-base width."""

    def __init__(self, rows: int):
        super().__init__()
        self.pos = torch.nn.Embedding(rows, 768)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(2))

    def forward(self, x):
        x = x + self.pos(torch.arange(x.shape[1], device=x.device))
        for layer in self.layers:
            x = layer(x)
        return x


ENCODER = {"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=1024)}}


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1000, 1024])
def test_a_real_width_encoder_is_checked_with_real_tensors_to_every_max_under_default_settings(rows):
    """A table of 1,000 positions declared to seq 1,024: eager raises for seq 1,001..1,024, which fake tensors cannot
    see (an index past a table); the default run fails at the top of seq. Its twin of 1,024 rows passes, with
    numerics to every dim's max."""
    torch.manual_seed(0)
    res = pytest_export.check(Encoder(rows).eval(), (torch.randn(2, 16, 768),), dynamic_shapes=ENCODER, examples=10,
                              name=f"edges::encoder_{rows}")
    ranges = res.info["ranges"]
    assert ranges["budget_spent"] <= ranges["budget"]
    assert "edges_short" not in ranges, ranges
    assert {row["dim"]: row["numeric_max"] for row in ranges["dims"]} == {"batch": 64, "seq": 1024}, ranges["dims"]
    if rows == 1024:
        assert res.outcome == "passed", res.failure_text()
        return
    assert res.outcome == "failed"
    guards = res.stages["guards"]
    assert guards.data["signature"] == "eager-raised-in-range", guards.message
    assert "batch=1, seq=1024" in guards.message and "IndexError" in guards.message


def _planned_from_a_bound(known: list[tuple[dict, float]], values: dict) -> float | None:
    """The seconds ``sizing._bounded`` plans a probe at ``values`` for, given probes counted before (values,
    seconds), over inputs (b, t, 256) and (b, 16): None where no counted probe bounds it."""
    import sympy
    import types

    from pytest_export.audit import FuzzModel, Var

    b, t = sympy.Symbol("b", integer=True, positive=True), sympy.Symbol("t", integer=True, positive=True)
    model = FuzzModel(vars=[Var("b", 1, 64, 2, ["b"]), Var("t", 2, 4096, 8, ["t"])],
                      shapes={0: {0: b, 1: t, 2: 256}, 1: {0: b, 1: 16}}, symbols={"b": b, "t": t})
    costs = Costs(max_memory=2**40, budget=None)
    costs.example = Measure(flops=1.0, peak=1, total=1, inputs=1, ops=10)
    costs.known = [(dict(v), s, 1) for v, s in known]
    probe = types.SimpleNamespace(override=None, given=None, values=values, model=model, budgeted=True, edge=False)
    plan = sizing._bounded(probe, costs)
    return None if plan is None else plan.seconds


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(top=st.tuples(st.integers(1, 64), st.integers(2, 4096)), low=st.tuples(st.integers(1, 64), st.integers(2, 4096)),
       at=st.tuples(st.integers(1, 64), st.integers(2, 4096)), seconds=st.floats(0.001, 100.0),
       share=st.floats(0.0, 1.0))
def test_a_probe_planned_from_a_bound_costs_between_what_was_counted_below_and_above_it(top, low, at, seconds, share):
    """Cost grows with size: a probe's planned time never passes the cheapest counted probe at least as large, and
    never falls under the dearest counted probe no larger; between them it scales with the inputs' elements."""
    upper, lower = dict(zip("bt", top)), dict(zip("bt", low))
    mine = dict(zip("bt", at))
    known = [(upper, seconds)]
    below_me = all(lower[k] <= mine[k] for k in "bt") and all(lower[k] <= upper[k] for k in "bt") and lower != upper
    if below_me:
        known.append((lower, seconds * share))
    got = _planned_from_a_bound(known, mine)
    if not all(mine[k] <= upper[k] for k in "bt"):
        assert got is None  # nothing counted bounds it: it is counted itself
        return
    assert got is not None and got <= seconds + 1e-12
    if below_me:
        assert got >= seconds * share - 1e-12
    if mine == upper:
        assert got == pytest.approx(seconds)


def test_a_probe_far_below_its_bound_is_planned_near_its_own_size():
    """fuzz's small draws under a large counted probe: linear in the inputs' elements along the dynamic axes."""
    got = _planned_from_a_bound([({"b": 64, "t": 4096}, 10.0)], {"b": 2, "t": 64})
    assert got is not None and got < 0.01 * 10.0
