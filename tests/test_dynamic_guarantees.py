"""The `guards` and `fuzz` stages find what one example input cannot: each finding on a planted defect.

Cases run through ``pytest_export.check`` (the same runner as the plugin) for speed; the plugin-level
behaviour (report fields, warnings summary, replay, xdist) is in test_dynamic_plugin.py.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from torch.export import Dim

import pytest_export

EXAMPLES = 12  # keeps the suite fast; Hypothesis still finds and shrinks every planted defect below


def check(module, args, kwargs=None, **kw):
    kw.setdefault("examples", EXAMPLES)
    return pytest_export.check(module, args, kwargs, name=f"{type(module).__name__}-{id(module)}", **kw)


def statuses(res) -> dict[str, str]:
    return {name: s.status for name, s in res.stages.items()}


class BranchOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1


class IntOfSize(torch.nn.Module):
    def forward(self, x):
        return x.reshape(int(x.shape[0]), -1) * 2


class ReshapeByFour(torch.nn.Module):
    """Eager pads an odd batch with its first row, a branch the program (traced at an even example) does not keep:
    reshape's guard then refuses odd sizes that eager takes (issue #24: a size eager raises on is not the
    program's refusal)."""

    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] % 2:
            x = torch.cat([x, x[:1]])
        return x.reshape(-1, 4).sum(1)


class TrainBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(x)


# a custom op whose fake kernel is wrong above 10 rows: the real kernel keeps at most 10
@torch.library.custom_op("pytest_export_tests::clip_rows", mutates_args=())
def clip_rows(x: torch.Tensor) -> torch.Tensor:
    return x[:10].clone()


@clip_rows.register_fake
def _(x):
    return torch.empty_like(x)


class UsesClipRows(torch.nn.Module):
    def forward(self, x):
        y = clip_rows(x)
        return y.sum(0) / y.shape[0]


# ---- the audit: what export kept of each declared axis ------------------------------------------------

def test_silent_auto_specialization_fails_guards_unless_allowed():
    res = check(IntOfSize(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: Dim.AUTO}})
    assert statuses(res)["guards"] == "failed"
    assert "x.shape[0] was declared Dim.AUTO but export specialized it to 8" in res.stages["guards"].message
    assert "allow_static=True" in res.stages["guards"].message
    (row,) = res.info["shapes"]
    assert (row["status"], row["achieved"], row["achieved_range"]) == ("specialized", 8, [8, 8])
    assert "declared vs achieved dynamic shapes" in res.failure_text()

    allowed = check(IntOfSize(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: Dim.AUTO}}, allow_static=True)
    assert allowed.outcome == "passed", allowed.failure_text()
    # the user opted in: the row records it, and no warning says it again (-W error must not fail this case)
    assert allowed.info["shapes"][0]["note"] == "allowed by allow_static=True"
    assert not [w for w in allowed.warnings if "specialized" in w]
    assert allowed.stages["fuzz"].status == "skipped"  # nothing dynamic is left to draw


@pytest.mark.parametrize("hint", [Dim.DYNAMIC, Dim.AUTO(min=2, max=32), Dim.DYNAMIC(max=64)],
                         ids=["DYNAMIC", "AUTO-bounded", "DYNAMIC-max"])
def test_silent_narrowing_of_a_promised_range_fails_guards(hint):
    res = check(BranchOnSize(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: hint}})
    assert statuses(res)["export"] == "passed"  # torch says nothing
    assert statuses(res)["guards"] == "failed"
    assert "but export kept only [5, " in res.stages["guards"].message
    assert res.info["shapes"][0]["status"] == "narrowed"
    assert res.info["shapes"][0]["achieved_range"][0] == 5


def test_bare_auto_narrowed_is_a_warning_and_fuzzing_stays_inside_what_export_kept():
    res = check(BranchOnSize(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: Dim.AUTO}}, max_size=40)
    assert res.outcome == "passed", res.failure_text()
    assert any("export kept only [5, inf]" in w and "fuzzing samples inside" in w for w in res.warnings)
    assert "x.shape[0] in [5, 40]" in res.stages["fuzz"].message  # unbounded max capped by max_size


def test_kept_axes_are_classified_kept_with_their_ranges():
    b = Dim("b", min=2, max=32)
    res = check(torch.nn.Linear(3, 2), (torch.randn(4, 3),), dynamic_shapes={"input": {0: b}})
    assert res.outcome == "passed", res.failure_text()
    (row,) = res.info["shapes"]
    assert row["input"] == "input" and row["axis"] == 0
    assert (row["declared_range"], row["achieved_range"], row["status"]) == ([2, 32], [2, 32], "kept")


# ---- guards, both ways -------------------------------------------------------------------------------

def test_reshape_guard_refusing_in_range_sizes_names_the_size_and_the_guard():
    res = check(ReshapeByFour(), (torch.randn(8, 2),), dynamic_shapes={"x": {0: Dim.DYNAMIC(min=4, max=32)}})
    msg = res.stages["guards"].message
    assert statuses(res)["guards"] == "failed"
    assert "the program refused in-range sizes x.shape[0]=5" in msg
    assert "Guard failed: 2 * x.size()[0] % 4 == 0" in msg


def test_size_one_below_the_min_accepted_where_eager_rejects_is_recorded_not_a_warning():
    # torch checks no minimum of 2 or less: what happens below it is recorded, never a warning (#26)
    res = check(TrainBatchNorm(), (torch.randn(4, 4),), dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}}, train=True)
    assert res.outcome == "passed", res.failure_text()
    assert not res.warnings
    guards = res.stages["guards"].data
    assert not guards["findings"]
    (row,) = [r for r in guards["below_min"] if r["probe"].startswith("b=1")]
    assert "below the min" in row["what"] and "which eager rejects" in row["what"]


# a custom op whose real kernel treats one row specially (squeeze(0)); its fake kernel does not
@torch.library.custom_op("pytest_export_tests::squeeze_rows", mutates_args=())
def squeeze_rows(x: torch.Tensor) -> torch.Tensor:
    return x.squeeze(0).clone()


@squeeze_rows.register_fake
def _(x):
    return torch.empty_like(x)


class RowsThroughSqueeze(torch.nn.Module):
    def forward(self, x):
        y = squeeze_rows(x)
        return y.reshape(y.shape[0], -1).sum(-1)


def test_size_one_accepted_with_a_wrong_output_is_recorded_not_a_warning():
    res = check(RowsThroughSqueeze(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
    assert res.outcome == "passed", res.failure_text()
    assert not res.warnings  # sizes torch does not check (<= 2): the report says what happened (#26)
    guards = res.stages["guards"].data
    below = {r["probe"].split(" ")[0]: r["what"] for r in guards["below_min"]}
    assert below["b=1"].startswith("accepted but wrong at out-of-range sizes b=1 (below the min; torch lets 0 and 1 "
                                   "through by design): output")
    probes = {r["probe"].split(" ")[0]: r for r in guards["probe_list"]}
    assert probes["b=1"]["kind"] == "small" and probes["b=1"]["program"] == "accepted"
    # size 0 crashes inside a kernel: no guard refused it, not a clean refusal (issue #18); recorded
    assert probes["b=0"]["program"] == "raised"
    assert "raised inside the program, not refused by a guard" in below["b=0"]
    assert guards["raised"] == 1 and not guards["findings"]


def _unchecked(self, ep):
    """A program that lost its input checks (guards and the input-constraint pre-hook)."""
    mod = ep.module(check_guards=False)
    mod._forward_pre_hooks.clear()
    return mod


def test_an_unchecked_derived_relation_accepted_with_a_wrong_output_is_a_failure(monkeypatch):
    class Parity(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] % 2 == 0:  # export knows 2*n is even: no branch left in the program
                return x * 2
            return x * 3

    from pytest_export.context import Context

    n = Dim("n", min=2, max=16)
    clean = check(Parity(), (torch.randn(8),), dynamic_shapes={"x": {0: 2 * n}})
    assert clean.outcome == "passed", clean.failure_text()  # torch 2.13 guards the evenness itself

    monkeypatch.setattr(Context, "module_of", _unchecked)
    res = check(Parity(), (torch.randn(8),), dynamic_shapes={"x": {0: 2 * n}})
    guards = res.stages["guards"]
    assert guards.status == "failed"
    assert "accepted but wrong at out-of-range sizes x.shape[0]=9, breaking its relation 2*n with n=4" in guards.message
    assert [f["kind"] for f in guards.data["findings"]] == ["relation"]


def test_out_of_range_sizes_are_probed_and_refused():
    n = Dim("n", min=2, max=16)

    class Halves(torch.nn.Module):
        def forward(self, x, y):
            return x[: y.shape[0]] + y

    res = check(Halves(), (torch.randn(8, 3), torch.randn(4, 3)), dynamic_shapes={"x": {0: 2 * n}, "y": {0: n}})
    assert res.outcome == "passed", res.failure_text()
    data = res.stages["guards"].data
    assert data["refused"] >= 3 and not data["findings"]
    probes = res.stages["guards"].data["probes"]
    assert probes == data["accepted"] + data["refused"]


def test_accepted_but_wrong_out_of_range_is_a_failure(monkeypatch):
    # plant a program that lost its input checks: a wrong size on a static axis is then accepted, and the
    # program, specialised to that size, computes something else than eager
    class ZerosLikeRow(torch.nn.Module):
        def forward(self, x):
            return x * 2, x.new_zeros(x.shape[1])

    from pytest_export.context import Context

    monkeypatch.setattr(Context, "module_of", _unchecked)
    res = check(ZerosLikeRow(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
    guards = res.stages["guards"]
    assert guards.status == "failed"
    assert "accepted but wrong at out-of-range sizes x.shape[1]=4 (static axis of size 3)" in guards.message
    assert any(f["kind"] == "static" for f in guards.data["findings"])


def test_the_same_program_with_its_checks_refuses_those_sizes():
    class ZerosLikeRow(torch.nn.Module):
        def forward(self, x):
            return x * 2, x.new_zeros(x.shape[1])

    res = check(ZerosLikeRow(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
    assert res.outcome == "passed", res.failure_text()
    assert not res.stages["guards"].data.get("findings")


# ---- fuzz ---------------------------------------------------------------------------------------------

def test_wrong_fake_kernel_is_found_by_fuzzing_and_shrunk_to_its_threshold():
    res = check(UsesClipRows(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("rows", min=2, max=64)}},
                examples=30, seed=1)
    fuzz = res.stages["fuzz"]
    assert fuzz.status == "failed"
    found = fuzz.data["counterexample"]
    assert found["sizes"] == {"rows": 11}  # shrunk: the smallest size above the fake kernel's threshold
    assert found["shapes"] == {"x": [11, 3]}
    assert "disagrees with eager" in found["error"]
    assert "smallest failing sizes: rows=11" in fuzz.message
    assert found["reproduce"]
    assert f'reproduce="{found["reproduce"]}"' in fuzz.message

    replay = check(UsesClipRows(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("rows", min=2, max=64)}},
                   reproduce=found["reproduce"])
    assert replay.stages["fuzz"].data["counterexample"]["sizes"] == {"rows": 11}


def test_fuzz_runs_the_requested_number_of_examples_on_a_clean_case():
    b = Dim("b", min=2, max=32)
    res = check(torch.nn.Linear(3, 2), (torch.randn(4, 3),), dynamic_shapes={"input": {0: b}}, examples=9)
    assert res.outcome == "passed", res.failure_text()
    assert res.stages["fuzz"].data["examples"] == 9
    assert res.stages["fuzz"].message == "9 examples, sizes b in [2, 32]"


def test_input_builder_receives_the_drawn_sizes_and_builds_meaningful_inputs():
    seen = []

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)

        def forward(self, ids, mask):
            return (self.emb(ids) * mask.unsqueeze(-1)).sum(1)

    def builder(sizes, args, kwargs):
        seen.append(dict(sizes))
        ids = torch.randint(0, 10, (2, sizes["t"]))
        return (ids, torch.ones(2, sizes["t"])), {}

    t = Dim("t", min=2, max=16)
    res = check(Lookup(), (torch.randint(0, 10, (2, 5)), torch.ones(2, 5)),
                dynamic_shapes={"ids": {1: t}, "mask": {1: t}}, input_builder=builder)
    assert res.outcome == "passed", res.failure_text()
    assert seen and all(set(s) == {"t"} and 2 <= s["t"] <= 16 for s in seen)
    assert {2, 16} <= {s["t"] for s in seen}  # boundaries first


def test_an_input_builder_that_returns_garbage_is_named():
    res = check(torch.nn.Linear(3, 2), (torch.randn(4, 3),), dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}},
                input_builder=lambda sizes, args, kwargs: "nope")
    assert res.stages["fuzz"].status == "failed"
    assert "input_builder" in res.stages["fuzz"].message


class Rows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("how", ["from_numpy", "tensor.numpy"])
def test_an_input_builder_using_numpy_runs_like_any_other(how):
    """A builder that goes through numpy cannot run under fake tensors (``.numpy()`` of a fake tensor raises):
    its inputs are built for real and converted to fake (issue #32: guards and retrace ended as `error` with an
    infinite cost ratio, fuzz failed blaming the builder)."""
    np = pytest.importorskip("numpy")

    def builder(sizes, args, kwargs):
        if how == "from_numpy":
            return (torch.from_numpy(np.random.rand(sizes["b"], 4).astype("float32")),)
        return (torch.from_numpy(torch.randn(sizes["b"], 4).numpy() * 2),)

    res = check(Rows(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("b", min=1, max=64)}},
                input_builder=builder, examples=5)
    assert res.outcome == "passed", res.failure_text()
    assert res.stages["guards"].data["unchecked"] == 0 and res.stages["fuzz"].data["unchecked"] == 0
    assert {row["dim"]: row["numeric_max"] for row in res.info["ranges"]["dims"]} == {"b": 64}


def test_a_numpy_builder_past_the_memory_cap_is_unchecked_with_its_reason():
    """Where the builder's real inputs would not fit the memory cap, its sizes are `unchecked`, saying why."""
    pytest.importorskip("numpy")
    res = check(Rows(), (torch.randn(3, 4),), dynamic_shapes={"x": {0: Dim("b", min=1, max=1 << 30)}},
                input_builder=lambda sizes, a, k: (torch.from_numpy(torch.randn(sizes["b"], 4).numpy()),),
                examples=3, max_memory="1MB")
    assert res.outcome == "passed", res.failure_text()
    guards = res.stages["guards"].data
    unchecked = [p for p in guards["probe_list"] if p["program"] == "unchecked"]
    assert unchecked and all("input_builder cannot run under fake tensors" in p["why"] for p in unchecked), unchecked
    assert all("max_memory 1 MB" in p["why"] for p in unchecked)
    assert {p["mode"] for p in guards["probe_list"] if p["probe"] == "b=1"} == {"numeric"}


def test_eager_failing_inside_the_declared_range_is_blamed_on_the_declaration(monkeypatch):
    # the model only supports even sizes, which the example has; the declaration promises every size
    class EvenOnly(torch.nn.Module):
        def forward(self, x):
            if not torch.compiler.is_exporting() and x.shape[0] % 2:
                raise ValueError("odd batch")
            return x * 2

    res = check(EvenOnly(), (torch.randn(8),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}}, seed=0)
    fuzz = res.stages["fuzz"]
    assert fuzz.status == "failed"
    assert "eager raised on in-range sizes (the declared range is wider than the model supports" in fuzz.message
    assert fuzz.data["counterexample"]["sizes"] == {"b": 3}


# ---- clean cases: no false alarm ----------------------------------------------------------------------

@dataclasses.dataclass
class Pair:
    a: torch.Tensor
    b: torch.Tensor


torch.export.register_dataclass(Pair, serialized_type_name="tests.test_dynamic_guarantees.Pair")


class AddPair(torch.nn.Module):
    def forward(self, p):
        return p.a + p.b


class AddScaled(torch.nn.Module):
    def forward(self, x, y, *, scale):
        return x * scale + y


class Cat(torch.nn.Module):
    def forward(self, x, y):
        return torch.cat([x, y]) * 2


class Repeat(torch.nn.Module):
    def forward(self, x, n: int):
        return x.repeat(n, 1)


def _clean_cases():
    b = Dim("b", min=2, max=32)
    s = Dim("s", min=2, max=16)
    d1, d2 = torch.export.dims("d1", "d2", min=2, max=16)
    yield "named", torch.nn.Linear(3, 2), (torch.randn(4, 3),), None, {"input": {0: b}}
    yield "positional", AddScaled(), (torch.randn(4, 3), torch.randn(4, 3)), {"scale": torch.tensor(2.0)}, \
        ((b, None), (b, None), None)
    yield "derived", Cat(), (torch.randn(5, 3), torch.randn(6, 3)), None, {"x": {0: s}, "y": {0: s + 1}}
    yield "dims", Cat(), (torch.randn(4, 3), torch.randn(5, 3)), None, {"x": {0: d1}, "y": {0: d2}}
    yield "dataclass", AddPair(), (Pair(torch.randn(4, 2), torch.randn(4, 2)),), None, {"p": [{0: b}, {0: b}]}
    yield "auto-bounded", torch.nn.Linear(3, 2), (torch.randn(4, 3),), None, {"input": {0: Dim.AUTO(min=2, max=16)}}
    yield "static", torch.nn.Linear(3, 2), (torch.randn(4, 3),), None, {"input": {0: Dim.STATIC}}
    yield "int-input", Repeat(), (torch.randn(2, 3), 3), None, {"x": None, "n": Dim.DYNAMIC(min=1, max=6)}


@pytest.mark.parametrize("name, module, args, kwargs, ds", list(_clean_cases()), ids=[c[0] for c in _clean_cases()])
def test_clean_cases_raise_no_false_alarm(name, module, args, kwargs, ds):
    torch.manual_seed(0)
    res = check(module, args, kwargs, dynamic_shapes=ds)
    assert res.outcome == "passed", res.failure_text()
    findings = [w for w in res.warnings if not w.startswith("torch logged")]  # torch's own serde log lines
    assert not findings, findings
    assert res.stages["guards"].status == "passed"
    assert res.stages["fuzz"].status in ("passed", "skipped")
    assert all(row["status"] == "kept" for row in res.info.get("shapes", []) if row["declared"] != "Dim.STATIC")


# ---- the declaration is checked before export ---------------------------------------------------------

@pytest.mark.parametrize("ds, expected", [
    ({"x": {2: Dim("b", max=8)}}, "dynamic_shapes['x'][2]"),
    ({"x": {0: Dim("b", min=2, max=8)}, "y": {0: Dim("b", min=2, max=16)}}, "'b'"),
    ({"x": {0: Dim("b", min=5, max=8)}}, "example"),
    ({"z": {0: Dim("b", max=8)}}, "'z'"),
], ids=["axis-past-rank", "name-defined-twice", "example-outside", "unknown-key"])
def test_a_declaration_that_does_not_fit_is_a_usage_error_pointing_at_the_key(ds, expected):
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    res = check(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=ds)
    # the test's mistake (#32): the case's error, as a marker typo is; no stage runs, none is failed
    assert res.outcome == "error" and res.stages == {}, res.failure_text()
    assert f"{res.nodeid}: dynamic_shapes" in res.error, res.error
    assert expected in res.error, res.error


# ---- a guards failure offers the declaration the program really accepts ----------------------------------

class RowOneAlways(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] >= 2:  # statically true while tracing: the program always reads row 1
            return x[1] + x.sum(0)
        return x[0] + x.sum(0)


class NeedsThree(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] >= 3:  # a branch on the size: export keeps only sizes >= 3
            return x * 2
        return x


def _paste(fix: str):
    """The fix as a user pastes it: run the source, take the last Dim it defines."""
    scope = {"Dim": Dim}
    exec(fix, scope)
    return scope[fix.splitlines()[-1].split(" = ")[0]]


@pytest.mark.parametrize("module, example, declared, expected", [
    (RowOneAlways(), (4, 3), Dim("b", min=1, max=32), "b = Dim('b', min=2, max=32)"),
    (ReshapeByFour(), (8, 2), Dim.DYNAMIC(min=4, max=32), "_x_shape_0 = Dim('_x_shape_0', min=2, max=16)\n"
                                                           "x_shape_0 = 2 * _x_shape_0"),
    (NeedsThree(), (4, 3), Dim.DYNAMIC(min=1, max=32), "x_shape_0 = Dim('x_shape_0', min=3, max=32)"),
], ids=["narrower-range", "derived-multiple", "narrowed-by-a-branch"])
def test_a_guards_failure_offers_a_fix_that_passes_when_pasted_back(module, example, declared, expected):
    res = check(module, (torch.randn(*example),), dynamic_shapes={"x": {0: declared}})
    guards = res.stages["guards"]
    assert guards.status == "failed"
    assert guards.data["dynamic_shapes_fix"] == expected
    assert "fix: what the program really accepts, ready to paste" in guards.message
    fixed = check(module, (torch.randn(*example),), dynamic_shapes={"x": {0: _paste(expected)}})
    assert fixed.outcome == "passed", fixed.failure_text()


def test_a_guards_failure_names_where_the_guard_came_from():
    # a branch on the size in the model: its own line
    res = check(NeedsThree(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim.DYNAMIC(min=1, max=32)}})
    message = res.stages["guards"].message
    line = inspect.getsourcelines(NeedsThree.forward)[1] + 1
    assert "but export kept only [3, 32] (a branch or check on the size narrowed it); the guard that narrowed it: `" \
        in message, message
    assert f"test_dynamic_guarantees.py:{line} in forward: `if x.shape[0] >= 3:" in message, message
    # an operator's guard (reshape needs whole groups of 4): the model's line that called the operator, in strict
    # and non-strict export alike (non-strict recorded torch's own frame before issue #33)
    line = inspect.getsourcelines(ReshapeByFour.forward)[1] + 3
    where = f"test_dynamic_guarantees.py:{line} in forward: `return x.reshape(-1, 4).sum(1)`"
    for strict in (False, True):
        res = check(ReshapeByFour(), (torch.randn(8, 2),), dynamic_shapes={"x": {0: Dim.DYNAMIC(min=4, max=32)}},
                    strict=strict)
        guards = res.stages["guards"]
        assert guards.status == "failed"
        assert "- refused where Mod(2*x.shape[0], 4) != 0" in guards.message, guards.message
        assert "the guard was added at " in guards.message and where in guards.message, guards.message
        assert list(guards.data["guard_sources"].values())[0].endswith(where)
        assert "inside torch" not in guards.message and "strict=True to see" not in guards.message
