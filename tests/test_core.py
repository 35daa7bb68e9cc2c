"""Plugin core through real pytest runs: the four planted defects each caught at their stage."""

from __future__ import annotations

import json

import pytest

from tests.helpers import cases_by_name, run_check, statuses, write_cases

PLANTED = '''
class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(16, 8)
        self.register_buffer("calls", torch.zeros(()))
    def forward(self, x, *, scale=1.0):
        self.calls.add_(1)
        y = self.l(x).relu()
        return {"y": y * scale, "parts": [y.sum(), (y.mean(), 3)]}

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=2, max=64)}, "scale": None})
def test_clean():
    return MLP().eval(), (torch.randn(4, 16),), {"scale": 2.0}

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

@pytest.mark.exportable
def test_data_dependent():
    return DataDependent(), (torch.randn(3),)

class Shortcut(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 2          # an "export-friendly" shortcut that is not the same computation
        return x + x + 1e-3

@pytest.mark.exportable()
def test_shortcut():
    return Shortcut(), (torch.randn(3),)

@dataclasses.dataclass
class Out:
    a: torch.Tensor
    b: torch.Tensor

torch.export.register_dataclass(Out)   # no serialized_type_name

class DataclassOut(torch.nn.Module):
    def forward(self, x):
        return Out(x + 1, x * 2)

@pytest.mark.exportable()
def test_dataclass_output():
    return DataclassOut(), (torch.randn(3),)

class BN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
    def forward(self, x):
        return self.bn(x)

@pytest.mark.exportable()
def test_train_bn():
    return BN().train(), (torch.randn(8, 4),)

@pytest.mark.exportable(core_aten=True)
def test_train_bn_core():
    return BN().train(), (torch.randn(8, 4),)
'''


@pytest.mark.slow
def test_planted_defects_are_caught_at_their_stage(pytester):
    write_cases(pytester, PLANTED)
    result, data = run_check(pytester)
    result.assert_outcomes(passed=2, failed=4)
    cases = cases_by_name(data)
    assert data["version"] == 1 and data["torch"].startswith("2.")

    clean = statuses(cases["test_clean"])
    assert all(s == "passed" for s in clean.values()), clean
    assert {"export", "compare", "serde", "decomp"} <= set(clean)

    dd = statuses(cases["test_data_dependent"])
    assert dd["export"] == "failed"
    assert dd["compare"] == dd["serde"] == dd["decomp"] == "skipped"
    assert "export failed" in cases["test_data_dependent"]["stages"]["compare"]["message"]
    assert "GuardOnDataDependentSymNode" in cases["test_data_dependent"]["stages"]["export"]["message"]

    sc = cases["test_shortcut"]["stages"]
    assert sc["export"]["status"] == "passed" and sc["compare"]["status"] == "failed"
    assert sc["compare"]["max_abs_error"] == pytest.approx(1e-3, rel=0.2)
    assert sc["compare"]["errors"][0]["path"] == "output"
    # later stages compare with the exported program and do not repeat compare's finding
    assert sc["serde"]["status"] == "passed" and sc["decomp"]["status"] == "passed"

    dc = statuses(cases["test_dataclass_output"])
    assert dc["compare"] == "passed" and dc["serde"] == "failed", dc
    assert "serialized_type_name" in cases["test_dataclass_output"]["stages"]["serde"]["message"]

    bn = cases["test_train_bn"]["stages"]["decomp"]
    assert bn["status"] == "passed"
    assert "aten._native_batch_norm_legit_functional.default" in bn["non_core"]
    bn_core = cases["test_train_bn_core"]["stages"]["decomp"]
    assert bn_core["status"] == "failed" and "Core ATen" in bn_core["message"]

    out = result.stdout.str()
    # the failure text starts with the stage table, then each failure's detail
    assert "stage   | status  | detail" in out or "stage   | status | detail" in out
    assert "--- serde: failed ---" in out and "NotImplementedError" in out
    assert "--- compare: failed ---" in out and "output: max abs error" in out


def test_session_option_core_aten_applies_to_every_case(pytester):
    write_cases(pytester, PLANTED)
    result, data = run_check(pytester, "--export-core-aten", "-k", "train_bn")
    result.assert_outcomes(failed=2)
    assert {statuses(c)["decomp"] for c in data["cases"]} == {"failed"}


def test_without_export_check_no_export_happens(pytester):
    write_cases(pytester, PLANTED)
    pytester.makeconftest('''
import pytest, torch.export

@pytest.fixture(autouse=True)
def _forbid_export(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("export called without --export-check")
    monkeypatch.setattr(torch.export, "export", boom)
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    # smoke mode: every case is built, validated and run eagerly once; nothing is exported
    result.assert_outcomes(passed=6)


def test_smoke_mode_reports_eager_failures_and_bad_cases(pytester):
    write_cases(pytester, '''
class Boom(torch.nn.Module):
    def forward(self, x):
        raise ValueError("broken model")

@pytest.mark.exportable
def test_eager_raises():
    return Boom(), (torch.randn(2),)

@pytest.mark.exportable
def test_no_return():
    torch.nn.Linear(2, 2)
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*test_eager_raises: eager forward raised on the example inputs: ValueError: broken model*",
        "*test_no_return: an exportable test must return (module, args) or (module, args, kwargs)*got None*",
    ])


def test_smoke_mode_checks_the_declaration_without_exporting(pytester):
    write_cases(pytester, '''
class Two(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(0) + y.sum(0)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", max=8)}, "z": None})
def test_unknown_key():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes={"x": {2: Dim("b", max=8)}})
def test_axis_past_rank():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", max=8)}, "y": {0: Dim("b", max=16)}})
def test_dim_defined_twice():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=8, max=16)}})
def test_example_outside_its_range():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", max=8)}})
def test_fine():
    return Two(), (torch.randn(4, 3), torch.randn(4, 3))
''')
    result = pytester.runpytest("-p", "no:cacheprovider")  # no --export-check: nothing is exported
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines_random([
        "*test_unknown_key: dynamic_shapes key 'z' is not an input of this case (inputs given: x, y)*",
        "*test_axis_past_rank: dynamic_shapes*: axis 2 is past the rank of x, which has shape (4, 3)*",
        "*test_dim_defined_twice: dynamic_shapes*: Dim 'b' is defined twice with different ranges*",
        "*test_example_outside_its_range: dynamic_shapes*: the example's x.shape*0* is 4, outside its own declared *",
    ])


@pytest.mark.parametrize("mark, returns, expected", [
    ("dynamic_shape={}", "M(), (torch.randn(2),)", "unknown exportable keyword 'dynamic_shape'. Did you mean 'dynamic_shapes'?"),
    ("strict='yes'", "M(), (torch.randn(2),)", "exportable keyword 'strict' must be True or False"),
    ("rtol=-1", "M(), (torch.randn(2),)", "exportable keyword 'rtol' must be a non-negative number"),
    ("xfail={'serdes': 'x'}", "M(), (torch.randn(2),)", "has unknown stage 'serdes'; valid stages: export"),
    ("dynamic_shapes=3", "M(), (torch.randn(2),)", "exportable keyword 'dynamic_shapes' must be a dict"),
    ("", "M(), torch.randn(2)", "case item 'args' must be a tuple of inputs, got Tensor (for one input write `(x,)`)"),
    ("", "M()", "must return (module, args) or (module, args, kwargs)"),
    ("", "lambda x: x, (torch.randn(2),)", "case item 'module' must be a torch.nn.Module, got function"),
    ("", "M(), (torch.randn(2),), [1]", "case item 'kwargs' must be a dict of keyword inputs by name, got list"),
])
def test_marker_misuse_fails_the_item_with_a_clear_message(pytester, mark, returns, expected):
    write_cases(pytester, f'''
class M(torch.nn.Module):
    def forward(self, x):
        return x + 1

@pytest.mark.exportable({mark})
def test_misused():
    return {returns}

@pytest.mark.exportable
def test_fine():
    return M(), (torch.randn(2),)
''')
    result, data = run_check(pytester)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "test_cases.py::test_misused" in out and expected in out, out
    assert "INTERNALERROR" not in out and "Traceback" not in out
    misused = cases_by_name(data)["test_misused"]
    assert misused["outcome"] == "error" and expected in misused["error"]


def test_marker_is_registered_without_export_check(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable
def test_x():
    return torch.nn.Identity(), (torch.randn(2),)
''')
    pytester.runpytest("--strict-markers", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.exportable(*"])


def test_mutated_inputs_and_buffers_are_compared(pytester):
    write_cases(pytester, '''
class Mutates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(3))
    def forward(self, x, acc):
        acc.add_(x)                   # mutates an input
        self.running.mul_(0.5).add_(x)  # mutates a buffer
        return x * 2

class ForgetsBuffer(Mutates):
    def forward(self, x, acc):
        acc.add_(x)
        if not torch.compiler.is_exporting():
            self.running.add_(x)      # the exported program never updates the buffer
        return x * 2

@pytest.mark.exportable
def test_mutation_ok():
    return Mutates(), (torch.randn(3), torch.zeros(3))

@pytest.mark.exportable
def test_buffer_mismatch():
    return ForgetsBuffer(), (torch.randn(3), torch.zeros(3))
''')
    result, data = run_check(pytester)
    result.assert_outcomes(passed=1, failed=1)
    bad = cases_by_name(data)["test_buffer_mismatch"]["stages"]["compare"]
    assert bad["status"] == "failed"
    assert bad["errors"][0]["path"].startswith("buffer (after forward)['running']"), bad["errors"]


def test_export_must_not_change_module_state_and_module_is_left_as_handed_over(pytester):
    # torch restores module state after tracing itself; plant an export that does not, to prove the check
    pytester.makeconftest("""
import pytest, torch.export

@pytest.fixture(autouse=True)
def _leaky_export(request, monkeypatch):
    if "leaky" not in request.node.name:
        return
    real = torch.export.export
    def leaky(mod, *a, **k):
        ep = real(mod, *a, **k)
        with torch.no_grad():
            mod.seen.fill_(42.0)
        return ep
    monkeypatch.setattr(torch.export, "export", leaky)
""")
    write_cases(pytester, '''
class Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(()))
    def forward(self, x):
        return x + self.seen

class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(()))
    def forward(self, x):
        self.steps.add_(1)
        return self.l(x) * self.steps

MOD = Stateful().train()
BEFORE = {k: v.clone() for k, v in MOD.state_dict().items()}

@pytest.mark.exportable
def test_leaky_export():
    return Counts(), (torch.randn(3),)

@pytest.mark.exportable
def test_stateful():
    return MOD, (torch.randn(2, 3),)

def test_zz_module_untouched():
    assert MOD.training
    for k, v in MOD.state_dict().items():
        assert torch.equal(v, BEFORE[k]), k
''')
    result, data = run_check(pytester)
    result.assert_outcomes(passed=2, failed=1)
    side = cases_by_name(data)["test_leaky_export"]["stages"]["export"]
    assert side["status"] == "failed" and "buffer seen" in side["message"], side


def test_nondeterministic_eager_is_not_blamed_on_export(pytester):
    write_cases(pytester, '''
import random
class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + random.random()

@pytest.mark.exportable
def test_noisy():
    return Noisy(), (torch.randn(3),)
''')
    result, data = run_check(pytester)
    result.assert_outcomes(failed=1)
    st = cases_by_name(data)["test_noisy"]["stages"]
    assert st["eager"]["status"] == "failed" and "nondeterministic" in st["eager"]["message"]
    assert st["compare"]["status"] == "skipped"


def test_cases_take_fixtures_and_pytree_outputs(pytester):
    write_cases(pytester, '''
@dataclasses.dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor

torch.export.register_dataclass(Pair, serialized_type_name="tests.Pair")

@pytest.fixture
def width():
    return 5

class Tree(torch.nn.Module):
    def forward(self, p, scale: float, n: int):
        x, y = p["x"], p["pair"][0]
        return {"sum": x + y, "list": [x * scale, (y, n)], "num": n * 2, "pair": Pair(x, y)}

@pytest.mark.exportable(rtol=1e-5, atol=1e-6)
def test_tree(width):
    return Tree(), ({"x": torch.randn(width), "pair": [torch.randn(width)]}, 0.5, 3)
''')
    result, data = run_check(pytester)
    result.assert_outcomes(passed=1)


def test_report_is_written_atomically_and_is_valid_json(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable
def test_id():
    return torch.nn.ReLU(), (torch.randn(3),)
''')
    (pytester.path / "report.json").write_text('{"old": true}')
    result, data = run_check(pytester)
    assert data["cases"][0]["stages"]["export"]["duration"] > 0
    assert not [p for p in pytester.path.iterdir() if p.name.startswith(".report.json.")]
    assert set(data["cases"][0]) >= {"nodeid", "outcome", "stages"}
    json.dumps(data, allow_nan=False)
