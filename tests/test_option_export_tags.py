"""Tags: ``--export-tags`` / ini ``export_tags`` select cases; every tag is a marker for ``-m``."""

from __future__ import annotations

import pytest

from pytest_export.declare.tags import marker_name, parse_tags, registered_markers
from tests.helpers import run_check, write_cases

CASES = '''
class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

@pytest.mark.exportable(tags=["alpha"])
def test_alpha():
    return Twice(), (torch.randn(2),)

@pytest.mark.exportable(tags="beta")
def test_beta():
    return Twice(), (torch.randn(2),)

@pytest.mark.exportable(tags=["alpha", "control-flow"])
def test_alpha_flow():
    return Twice(), (torch.randn(2),)

@pytest.mark.exportable(tags=["skip", "a tag:with odd chars"])
def test_reserved_name():
    return Twice(), (torch.randn(2),)

@pytest.mark.exportable()
def test_untagged():
    return Twice(), (torch.randn(2),)

@pytest.mark.beta
def test_fixture_case_with_a_plain_tag_marker(export_check):
    export_check(Twice(), (torch.randn(2),), tags=["beta"])
'''

CONFTEST = '''
def pytest_configure(config):
    config.addinivalue_line("markers", "beta: a plain label marker, shared by the tag of that name")
'''


def _names(result) -> set[str]:
    return {line.split("::")[-1].split(" ")[0] for line in result.outlines if "::test_" in line and "PASSED" in line}


@pytest.mark.parametrize("tag, taken, expected", [
    ("control-flow", {}, "control-flow"),
    ("torch.cond", {}, "torch.cond"),
    ("a tag:with odd chars", {}, "a_tag_with_odd_chars"),
    ("skip", {"skip": "skip(reason=None)"}, "tag_skip"),
    ("exportable", {"exportable": "exportable(dynamic_shapes=None, ...)"}, "tag_exportable"),
    ("slow", {"slow": "slow"}, "slow"),
    ("not", {}, "tag_not"),
    ("_private", {}, "tag_private"),
])
def test_marker_names(tag, taken, expected):
    assert marker_name(tag, taken) == expected


def test_parse_tags_and_registered_markers():
    assert parse_tags(None) == []
    assert parse_tags("a,b  c") == ["a", "b", "c"]
    assert parse_tags(["a,b", "b", "d"]) == ["a", "b", "d"]
    assert registered_markers(["skip(reason=None): skip it", "slow: slow ones", "odd"]) == {
        "skip": "skip(reason=None)", "slow": "slow", "odd": "odd"}


def test_export_tags_selects_and_reports_deselected(pytester):
    write_cases(pytester, CASES)
    pytester.makeconftest(CONFTEST)
    result, data = run_check(pytester, "--export-tags", "alpha", "-v", "--strict-markers")
    result.assert_outcomes(passed=2, deselected=4)
    assert _names(result) == {"test_alpha", "test_alpha_flow"}
    assert sorted(c["nodeid"].split("::")[-1] for c in data["cases"]) == ["test_alpha", "test_alpha_flow"]


def test_several_tags_and_the_ini_twin(pytester):
    write_cases(pytester, CASES)
    pytester.makeconftest(CONFTEST)
    result, _ = run_check(pytester, "--export-tags", "control-flow,skip", "-v")
    result.assert_outcomes(passed=2, deselected=4)
    assert _names(result) == {"test_alpha_flow", "test_reserved_name"}

    pytester.makeini("[pytest]\nexport_tags = beta\n")
    result, data = run_check(pytester, "-v")
    result.assert_outcomes(passed=2, deselected=4)
    # a test that calls the fixture is selected by a plain marker named like the tag
    assert _names(result) == {"test_beta", "test_fixture_case_with_a_plain_tag_marker"}


def test_tags_are_markers_for_m_under_strict_markers(pytester):
    write_cases(pytester, CASES)
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-v", "-m", "control-flow or tag_skip")
    result.assert_outcomes(passed=2, deselected=4)
    assert _names(result) == {"test_alpha_flow", "test_reserved_name"}
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-v", "-m", "alpha and not control-flow")
    result.assert_outcomes(passed=1, deselected=5)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", "-m", "a_tag_with_odd_chars")
    result.assert_outcomes(passed=1, deselected=5)


def test_a_tag_named_like_a_behaviour_marker_changes_nothing(pytester):
    write_cases(pytester, CASES)
    pytester.makeconftest(CONFTEST)
    result, data = run_check(pytester, "-k", "reserved_name")
    # tagged "skip", yet it runs: the tag became marker tag_skip, not pytest's skip
    result.assert_outcomes(passed=1, deselected=5)
    assert data["cases"][0]["tags"] == ["skip", "a tag:with odd chars"]


def test_unknown_tag_warns_with_the_known_tags(pytester):
    write_cases(pytester, CASES)
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--export-tags", "alhpa")
    result.assert_outcomes(deselected=6)
    result.stdout.fnmatch_lines(["*--export-tags: no collected test carries the tag(s) 'alhpa'; tags here: *alpha*"])


def test_a_case_that_raises_while_built_keeps_its_tags(pytester):
    # its report entry carries the marker's tags, so the conformance table counts it under them, not (untagged)
    write_cases(pytester, '''
@pytest.mark.exportable(tags=["mine"])
def test_raises():
    raise RuntimeError("a flaky download")
''')
    result, data = run_check(pytester)
    assert result.ret == 1
    (case,) = data["cases"]
    assert case["outcome"] == "error" and case["tags"] == ["mine"], case
