"""--export-require-numerics and the terminal line of a pass short of its declared max (issue #31).

A case whose declared max cannot run with real tensors (the memory cap) passes with one line on the terminal that
names the dim, how far numerics reached and why; with ``--export-require-numerics`` (or ``require_numerics=True``)
it ends as ``error``.
"""

from __future__ import annotations

import pytest

from tests.helpers import cases_by_name, run_check, write_cases

CASES = '''
class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(16, 16)
    def forward(self, x):
        return self.l(x).relu()

ROWS = {"x": {0: Dim("rows", min=1, max=100000)}}

@pytest.mark.exportable(dynamic_shapes=ROWS, max_memory="256kB", examples=3)
def test_capped():
    torch.manual_seed(0)
    return Wide(), (torch.randn(2, 16),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("rows", min=1, max=64)}}, examples=3)
def test_full():
    torch.manual_seed(0)
    return Wide(), (torch.randn(2, 16),)
'''


@pytest.mark.parametrize("quiet", [False, True])
def test_a_pass_short_of_its_max_says_so_on_the_terminal(pytester, quiet):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, *(["-q"] if quiet else []))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*numerics short of max: test_cases.py::test_capped: rows: numerics to * of 100000 "
                                 "(rows=* needs ~* > max_memory 256 kB)*"])
    assert "test_full" not in "\n".join(ln for ln in result.outlines if "short of max" in ln)
    assert cases_by_name(data)["test_capped"]["outcome"] == "passed"
    if not quiet:  # a pass short of its max needs the user's attention: the default summary shows the tables
        result.stdout.fnmatch_lines(["*= export summary (torch *", "stage *| passed |*"])


def test_require_numerics_turns_a_short_pass_into_an_error(pytester):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-require-numerics")
    assert result.ret == 1
    cases = cases_by_name(data)
    assert cases["test_capped"]["outcome"] == "error"
    assert "fell short of the declared max" in cases["test_capped"]["error"]
    assert cases["test_full"]["outcome"] == "passed"  # every edge ran with real tensors
    result.stdout.fnmatch_lines(["*test_capped*--export-require-numerics*rows: numerics to * of 100000*"])


def test_require_numerics_keyword_and_ini(pytester):
    write_cases(pytester, CASES.replace('max_memory="256kB", examples=3', 'max_memory="256kB", examples=3, '
                                                                         'require_numerics=True'))
    result, data = run_check(pytester)
    assert cases_by_name(data)["test_capped"]["outcome"] == "error"
    write_cases(pytester, CASES)
    pytester.makeini("[pytest]\nexport_require_numerics = true\n")
    result, data = run_check(pytester)
    assert cases_by_name(data)["test_capped"]["outcome"] == "error"
