"""The conformance table: counts by tag and stage from report case dicts, and Core ATen coverage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_export.report.conformance import (
    ALL,
    UNTAGGED,
    conformance_table,
    core_ops_reached,
)
from tests.helpers import run_check, write_cases

STATUSES = ["passed", "failed", "error", "xfailed", "xpassed", "skipped"]
STAGES = ["eager", "export", "compare", "serde", "decomp"]


def _case(nodeid, tags, **stages):
    values = set(stages.values())
    outcome = "failed" if values & {"failed", "error"} else "xfailed" if "xfailed" in values else "passed"
    return {"nodeid": nodeid, "outcome": outcome, "tags": tags,
            "stages": {name: {"status": status} for name, status in stages.items()}}


def _rows(table: str) -> dict[str, list[str]]:
    lines = [ln for ln in table.splitlines() if " | " in ln]
    header = [c.strip() for c in lines[0].split("|")]
    return {cells[0]: dict(zip(header, cells)) for cells in ([c.strip() for c in ln.split("|")] for ln in lines[1:])}


def test_rows_by_tag_and_columns_by_stage():
    cases = [
        _case("a", ["basics"], export="passed", compare="passed"),
        _case("b", ["basics", "dynamic"], export="passed", compare="failed"),
        _case("c", ["dynamic"], export="xfailed", compare="skipped"),
        _case("d", [], export="error"),
    ]
    rows = _rows(conformance_table(cases))
    assert list(rows) == ["basics", "dynamic", UNTAGGED, ALL]
    assert rows["basics"]["cases"] == "2" and rows["basics"]["export"] == "2/0/0/0" and rows["basics"]["compare"] == "1/1/0/0"
    assert rows["dynamic"]["export"] == "1/0/1/0" and rows["dynamic"]["compare"] == "0/1/0/1"
    assert rows[UNTAGGED]["export"] == "0/1/0/0" and rows[UNTAGGED]["compare"] == "-"
    assert rows[ALL]["cases"] == "4" and rows[ALL]["outcome"] == "1/2/1/0"


def test_core_aten_coverage_counts_distinct_core_ops_after_decomposition():
    cases = [
        {"nodeid": "a", "tags": ["x"], "stages": {"decomp": {"status": "passed", "ops_after": ["aten.add.Tensor", "aten.mm.default"], "non_core": []}}},
        {"nodeid": "b", "tags": ["x"], "stages": {"decomp": {"status": "passed", "ops_after": ["aten.add.Tensor", "aten.linear.default"],
                                                             "non_core": ["aten.linear.default"]}}},
        {"nodeid": "c", "tags": ["x"], "stages": {"decomp": {"status": "skipped"}}},
    ]
    assert core_ops_reached(cases) == {"aten.add.Tensor", "aten.mm.default"}
    text = conformance_table(cases, ["aten.add.Tensor", "aten.mm.default", "aten.sub.Tensor", "aten.mul.Tensor"])
    assert text.splitlines()[-1] == "Core ATen coverage: 2 of 4 core ops (50%) reached after run_decompositions()"
    assert "Core ATen coverage: 2 of 10 core ops (20%)" in conformance_table(cases, 10)


@given(st.lists(st.tuples(st.lists(st.sampled_from(["a", "b", "c-d", "e.f"]), max_size=3),
                          st.dictionaries(st.sampled_from(STAGES), st.sampled_from(STATUSES))), max_size=12))
def test_counts_add_up(spec):
    cases = [{"nodeid": str(i), "outcome": "passed", "tags": tags, "stages": {s: {"status": v} for s, v in stages.items()}}
             for i, (tags, stages) in enumerate(spec)]
    if not cases:
        return
    rows = _rows(conformance_table(cases))
    assert rows[ALL]["cases"] == str(len(cases))
    for tag in {t for tags, _ in spec for t in tags}:
        assert rows[tag]["cases"] == str(sum(tag in tags for tags, _ in spec))
    for stage in {s for _, stages in spec for s in stages}:
        counts = [int(n) for n in rows[ALL][stage].split("/")]
        assert sum(counts) == sum(stage in stages for _, stages in spec)
        assert counts[1] == sum(stages.get(stage) in ("failed", "error", "xpassed") for _, stages in spec)


def test_table_is_printed_at_the_end_of_a_run_with_tags(pytester):
    write_cases(pytester, '''
class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2

@pytest.mark.exportable(tags=["basics"])
def test_twice():
    return Twice(), (torch.randn(2),)

@pytest.mark.exportable(tags=["basics", "known"], xfail={"compare": "planted"})
def test_known():
    return Twice(), (torch.randn(2),)
''')
    result, _ = run_check(pytester)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "export conformance (torch 2." in out
    result.stdout.fnmatch_lines([
        "tag *| cases | *outcome | *eager | *export | *compare | *serde | *decomp*",
        "basics *| *2 | *1/1/0/0 | *2/0/0/0 | *2/0/0/0 | *1/1/0/0 |*",
        "known *| *1 | *0/1/0/0 |*",
        "all *| *2 |*",
        "Core ATen coverage: * of * core ops (*%) reached after run_decompositions()",
    ])


def test_no_table_without_tags(pytester):
    write_cases(pytester, '''
@pytest.mark.exportable()
def test_plain():
    return torch.nn.ReLU(), (torch.randn(2),)
''')
    result, _ = run_check(pytester)
    result.assert_outcomes(passed=1)
    assert "export conformance" not in result.stdout.str()


@pytest.mark.slow
def test_core_op_count_does_not_depend_on_what_the_process_ran():
    # torch.ops.aten lists only packets accessed so far; a fresh process must still see every core op
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("from pytest_export.torchside.ops import all_core_ops, countable_core_ops\n"
            "ops = all_core_ops()\n"
            "print(len(ops), len(countable_core_ops()), 'aten.avg_pool1d.default' in ops, 'aten.sym_size.int' in ops)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    fresh_total, fresh_countable, has_pool1d, has_sym = out.stdout.split()
    from pytest_export.torchside.ops import all_core_ops, countable_core_ops

    assert (int(fresh_total), int(fresh_countable)) == (len(all_core_ops()), len(countable_core_ops()))
    assert has_pool1d == "True" and has_sym == "True"
    assert "aten.sym_size.int" not in countable_core_ops()


def test_no_table_in_smoke_mode(pytester):
    # without --export-check only fixture calls are checked: a table of those alone would mislead
    write_cases(pytester, '''
@pytest.mark.exportable(tags=["basics"])
def test_marked():
    return torch.nn.ReLU(), (torch.randn(2),)

def test_fixture(export_check):
    export_check(torch.nn.ReLU(), (torch.randn(2),), tags=["basics"])
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "export conformance" not in result.stdout.str()
