"""``--export-budget SECONDS`` and ``budget=``: the time `guards` and `fuzz` may spend on one case (issue #16)."""

from __future__ import annotations

import pytest

from tests.helpers import cases_by_name, run_check, write_cases

CASES = '''
class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x).relu()

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}}, examples=40)
def test_session_budget():
    return Mlp(), (torch.randn(4, 4),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}}, examples=40, budget=0)
def test_no_limit():
    return Mlp(), (torch.randn(4, 4),)
'''


def test_a_spent_budget_stops_random_examples_but_not_the_boundaries(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-budget", "0.001", "--hypothesis-seed", "0")
    result.assert_outcomes(passed=2)
    cases = cases_by_name(data)
    capped = cases["test_session_budget"]["stages"]["fuzz"]
    # the boundaries (every dim at its min, at its max, at the example's size) always run
    assert capped["examples"] == 3, capped
    assert capped["budget_spent"] is True
    assert capped["message"].startswith("3 of 40 examples (the budget of 0.001 s for probing was spent")
    assert capped["examples_requested"] == 40 and "budget" in capped["fewer_because"]
    # past the budget the boundaries still run, with fake tensors: shapes and guards, no numerics
    assert capped["modes"] == {"fake": 3, "numeric": 0}, capped
    assert cases["test_session_budget"]["stages"]["guards"]["status"] == "passed"  # guards' probes all ran
    # budget=0 on the marker lifts the session's limit
    free = cases["test_no_limit"]["stages"]["fuzz"]
    assert free["examples"] == 40 and "budget_spent" not in free, free
    assert len(free["drawn"]) == 40


def test_the_default_budget_leaves_a_small_case_alone(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--hypothesis-seed", "0")
    result.assert_outcomes(passed=2)
    fuzz = cases_by_name(data)["test_session_budget"]["stages"]["fuzz"]
    assert fuzz["examples"] == 40 and "budget_spent" not in fuzz


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_budget_option_is_validated(pytester, value):
    write_cases(pytester, "def test_x():\n    pass\n")
    result = pytester.runpytest("--export-check", "--export-budget", value)
    result.stderr.fnmatch_lines([f"*--export-budget must be a number of seconds >= 0 (0: no limit), got '{value}'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
