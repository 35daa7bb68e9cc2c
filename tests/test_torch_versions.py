"""The torch its users have (issue #25): expectations that depend on torch's version say so, and an unexpected
pass does not stop the case. No test here matches a version string: conditions are built around the installed
torch, whichever it is.
"""

from __future__ import annotations

import pytest
import torch
from packaging.version import Version

from pytest_export.declare.options import UsageError, condition_holds, validate_keywords, xfail_for
from tests.helpers import run_check, write_cases

INSTALLED = Version(str(torch.__version__).split("+")[0])
BELOW = f"torch<{INSTALLED.major}.{INSTALLED.minor}"  # never holds here
FROM = f"torch>={INSTALLED.major}.{INSTALLED.minor}"  # always holds here


def test_a_condition_holds_on_the_versions_it_names():
    assert condition_holds("torch<2.14", "2.13.0+cpu") and not condition_holds("torch<2.14", "2.14.1+cu130")
    assert condition_holds("torch>=2.14,<3", "2.14.1") and condition_holds("torch<2.14", "2.14.0a0") is False
    assert condition_holds(FROM, str(torch.__version__)) and not condition_holds(BELOW, str(torch.__version__))


def test_xfail_for_keeps_an_entry_only_where_its_condition_holds_and_names_it():
    xfail = {"decomp": ("the default table keeps it", "torch<2.14"), "export": "plain reason"}
    on_213 = xfail_for(xfail, False, "cpu", "2.13.0+cpu")
    assert on_213 == {"decomp": "the default table keeps it [torch<2.14: torch 2.13.0+cpu]", "export": "plain reason"}
    assert xfail_for(xfail, False, "cpu", "2.14.1") == {"export": "plain reason"}


@pytest.mark.parametrize("bad", [("reason",), ("reason", "2.14"), ("reason", "torch<<2"), ("", "torch<2.14")])
def test_a_bad_condition_names_the_stage_and_the_form(bad):
    with pytest.raises(UsageError) as exc:
        validate_keywords("case.py::test_x", (), {"xfail": {"decomp": bad}})
    assert "case.py::test_x" in str(exc.value) and "'decomp'" in str(exc.value)
    assert "torch<2.14" in str(exc.value)


CASES = f'''
class Clean(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1

class Shortcut(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            return x * 3
        return x * 2

@pytest.mark.exportable(xfail={{"compare": ("wrong before this torch", "{BELOW}")}})
def test_condition_not_met():
    return Clean(), (torch.randn(3),)

@pytest.mark.exportable(xfail={{"compare": ("wrong on this torch", "{FROM}")}})
def test_condition_met():
    return Shortcut(), (torch.randn(3),)

@pytest.mark.exportable(xfail={{"export": "expected to fail, but this torch exports it"}})
def test_unexpected_pass_still_runs_later_stages():
    return Shortcut(), (torch.randn(3),)
'''


def test_version_conditions_apply_and_an_xpass_does_not_stop_the_case(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-p", "no:xdist")
    cases = {c["nodeid"].split("::")[-1]: c for c in data["cases"]}
    # the condition does not hold: no expectation, the clean model passes
    assert cases["test_condition_not_met"]["outcome"] == "passed"
    # it holds: the failure is expected, and the report says which condition applied
    met = cases["test_condition_met"]["stages"]["compare"]
    assert met["status"] == "xfailed" and f"[{FROM}: torch {torch.__version__}]" in met["message"], met
    # an unexpected pass is reported, and every later stage still runs (here compare finds the real defect)
    xp = cases["test_unexpected_pass_still_runs_later_stages"]["stages"]
    assert xp["export"]["status"] == "xpassed" and "torch<X.Y" in xp["export"]["message"]
    assert xp["compare"]["status"] == "failed" and xp["serde"]["status"] != "skipped", xp
    result.assert_outcomes(passed=1, xfailed=1, failed=1)
