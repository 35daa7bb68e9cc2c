"""Per-stage expected failures (strict XPASS) and the per-stage JUnit XML properties."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from tests.helpers import cases_by_name, run_check, statuses, write_cases

CASES = '''
@dataclasses.dataclass
class Out:
    a: torch.Tensor

torch.export.register_dataclass(Out)   # no serialized_type_name: save raises

class DataclassOut(torch.nn.Module):
    def forward(self, x):
        return Out(x + 1)

class Plain(torch.nn.Module):
    def forward(self, x):
        return x.relu()

@pytest.mark.exportable(xfail={"serde": "dataclass without serialized_type_name"})
def test_serde_expected():
    return DataclassOut(), (torch.randn(3),)

@pytest.mark.exportable(xfail={"serde": "was broken in an older torch"})
def test_serde_fixed():
    return Plain(), (torch.randn(3),)

@pytest.mark.exportable(xfail={"compare": "expected elsewhere"})
def test_wrong_stage_expected():
    return DataclassOut(), (torch.randn(3),)
'''


def test_stage_xfail_and_strict_xpass(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "-p", "no:xdist", "-rxX")
    result.assert_outcomes(xfailed=1, failed=2)
    by = cases_by_name(data)
    expected = by["test_serde_expected"]
    assert expected["outcome"] == "xfailed" and statuses(expected)["serde"] == "xfailed"
    assert expected["stages"]["serde"]["message"].startswith("expected failure (dataclass without serialized_type_name)")
    assert statuses(expected)["decomp"] == "passed"  # the other stages still ran and passed
    fixed = by["test_serde_fixed"]
    assert fixed["outcome"] == "failed" and statuses(fixed)["serde"] == "xpassed"
    # a compare xfail that passes is XPASS, and the real (unexpected) serde failure still fails
    wrong = statuses(by["test_wrong_stage_expected"])
    assert wrong["compare"] == "xpassed" and wrong["serde"] == "failed"
    result.stdout.fnmatch_lines(["*XPASS(strict): expected to fail (was broken in an older torch) but passed on torch *"])
    result.stdout.fnmatch_lines(["XFAIL test_cases.py::test_serde_expected - serde: expected failure*"])


def test_junit_xml_carries_each_stage_status(pytester):
    write_cases(pytester, CASES)
    result, _ = run_check(pytester, "-p", "no:xdist", "--junitxml", "junit.xml")
    root = ET.parse(pytester.path / "junit.xml").getroot()
    props = {}
    for tc in root.iter("testcase"):
        props[tc.get("name")] = {p.get("name"): p.get("value") for p in tc.iter("property")}
    assert props["test_serde_expected"]["export.serde"] == "xfailed"
    assert props["test_serde_expected"]["export.compare"] == "passed"
    assert props["test_serde_expected"]["export.outcome"] == "xfailed"
    assert props["test_serde_fixed"]["export.serde"] == "xpassed"
    assert props["test_serde_fixed"]["export.outcome"] == "failed"
    assert props["test_wrong_stage_expected"]["export.fuzz"] == "skipped"
