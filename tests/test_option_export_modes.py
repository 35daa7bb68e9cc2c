"""``--export-modes non-strict,strict``: each tracing mode is its own item, ``test_x[non-strict]`` / ``test_x[strict]``."""

from __future__ import annotations

import pytest

from pytest_export.declare.variants import Variant, parse_modes, variants
from tests.helpers import cases_by_name, run_check, statuses, write_cases

CASES = '''
class Flow(torch.nn.Module):
    def forward(self, x):
        return x.tolist()[0] * x   # a Python scalar from tensor data: non-strict traces it, TorchDynamo does not

class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

@pytest.mark.exportable
def test_tolist():
    return Flow(), (torch.randn(3),)

@pytest.mark.exportable(strict=True)
def test_twice():
    return Twice(), (torch.randn(3),)

@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.exportable
def test_param(n):
    return Twice(), (torch.randn(n),)
'''


@pytest.mark.slow
def test_each_mode_is_an_item_and_a_case_can_pass_one_and_fail_the_other(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-modes", "non-strict,strict", "--export-examples", "2")
    cases = cases_by_name(data)
    assert sorted(cases) == ["test_param[2-non-strict]", "test_param[2-strict]", "test_param[3-non-strict]",
                             "test_param[3-strict]", "test_tolist[non-strict]", "test_tolist[strict]",
                             "test_twice[non-strict]", "test_twice[strict]"]
    assert cases["test_tolist[non-strict]"]["outcome"] == "passed"
    assert statuses(cases["test_tolist[strict]"])["export"] == "failed"
    assert "Unsupported" in cases["test_tolist[strict]"]["stages"]["export"]["message"]
    assert cases["test_tolist[strict]"]["mode"] == "strict" and cases["test_tolist[strict]"]["device"] == "cpu"
    # the mode overrides the marker's strict=True
    assert cases["test_twice[non-strict]"]["mode"] == "non-strict"
    result.assert_outcomes(passed=7, failed=1)
    result.stdout.fnmatch_lines(["*_ test_tolist[[]strict[]] _*"])


def test_without_the_option_node_ids_are_unchanged(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-examples", "2", "-k", "twice or param")
    assert sorted(cases_by_name(data)) == ["test_param[2]", "test_param[3]", "test_twice"]
    assert "mode" not in cases_by_name(data)["test_twice"]


def test_one_mode_from_ini(pytester):
    write_cases(pytester, CASES)
    pytester.makeini("[pytest]\nexport_modes = strict\n")
    result, data = run_check(pytester, "-k", "twice")
    assert sorted(cases_by_name(data)) == ["test_twice[strict]"]


@pytest.mark.slow
def test_modes_under_xdist(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-modes", "non-strict,strict", "-n", "2", "-k", "tolist")
    result.assert_outcomes(passed=1, failed=1)
    assert sorted(cases_by_name(data)) == ["test_tolist[non-strict]", "test_tolist[strict]"]


def test_unknown_mode_is_a_usage_error(pytester):
    write_cases(pytester, CASES)
    result, _ = run_check(pytester, "--export-modes", "lax")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--export-modes: unknown value 'lax'; valid: non-strict, strict*"])


def test_variant_ids():
    assert parse_modes("strict, non-strict,strict") == ("strict", "non-strict")
    assert parse_modes(None) is None
    assert variants(None, None, lambda: False) == []
    assert [v.id for v in variants(("non-strict", "strict"), None, lambda: False)] == ["non-strict", "strict"]
    assert [v.id for v in variants(None, None, lambda: True)] == ["cpu", "cuda"]
    assert [v.id for v in variants(("strict",), ("cpu", "cuda"), lambda: False)] == ["strict-cpu", "strict-cuda"]
    assert Variant("strict", "cuda:1").on_cuda


def test_xfail_can_hold_for_one_mode_only(pytester):
    write_cases(pytester, '''
class Flow(torch.nn.Module):
    def forward(self, x):
        return x.tolist()[0] * x

@pytest.mark.exportable(xfail={"strict": {"export": "TorchDynamo does not trace tolist()"}})
def test_tolist():
    return Flow(), (torch.randn(3),)

@pytest.mark.exportable(xfail={"non-strict": {"export": "claimed, but it exports"}})
def test_wrong_claim():
    return Flow(), (torch.randn(3),)

@pytest.mark.exportable(xfail={"strict": {"exprot": "typo"}})
def test_typo():
    return Flow(), (torch.randn(3),)
''')
    result, data = run_check(pytester, "--export-modes", "non-strict,strict", "--export-examples", "2")
    cases = cases_by_name(data)
    assert cases["test_tolist[non-strict]"]["outcome"] == "passed"
    assert cases["test_tolist[strict]"]["outcome"] == "xfailed"
    assert "TorchDynamo does not trace tolist()" in cases["test_tolist[strict]"]["stages"]["export"]["message"]
    # the entry holds for its mode only: there a pass is a strict XPASS; the other mode fails as it is
    assert statuses(cases["test_wrong_claim[non-strict]"])["export"] == "xpassed"
    assert statuses(cases["test_wrong_claim[strict]"])["export"] == "failed"
    result.stdout.fnmatch_lines(["*test_typo*exportable keyword 'xfail' [[]'strict'[]] has unknown stage 'exprot'*"])
    outcomes = {k: v["outcome"] for k, v in cases.items()}
    assert outcomes["test_wrong_claim[non-strict]"] == "failed", outcomes
