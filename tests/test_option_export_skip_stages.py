"""`--export-skip-stages`: stages a run does not need are reported as skipped, with the reason."""

from __future__ import annotations

from tests.helpers import cases_by_name, run_check, statuses, write_cases

CASE = '''
@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=16)}})
def test_linear():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
'''


def test_skipped_stages_are_reported_as_skipped_and_the_rest_runs(pytester):
    write_cases(pytester, CASE)
    result, data = run_check(pytester, "--export-skip-stages", "fuzz,guards", "--export-skip-stages", "retrace")
    result.assert_outcomes(passed=1)
    case = cases_by_name(data)["test_linear"]
    st = statuses(case)
    assert st["fuzz"] == st["guards"] == st["retrace"] == "skipped"
    assert case["stages"]["fuzz"]["message"] == "skipped: not requested (--export-skip-stages)"
    assert st["export"] == st["compare"] == st["serde"] == st["decomp"] == "passed"


def test_an_unknown_or_required_stage_is_a_usage_error(pytester):
    write_cases(pytester, CASE)
    for bad in ("fuzzz", "export"):
        result, _ = run_check(pytester, "--export-skip-stages", bad)
        assert result.ret == 4
        result.stderr.fnmatch_lines([f"*--export-skip-stages: unknown or required stage '{bad}'; valid: compare, *"])
