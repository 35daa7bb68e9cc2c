"""The report is the same with and without xdist."""

from __future__ import annotations

import pytest

from tests.helpers import run_check, write_cases

CASES = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x)

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(3, 4),)

@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable(xfail={"compare": "known shortcut"})
def test_shortcut_xfail():
    return Shortcut(), (torch.ones(3),)
'''


def _normalized(data):
    out = []
    for case in data["cases"]:
        stages = {n: {k: v for k, v in s.items() if k not in ("duration", "traceback")} for n, s in case["stages"].items()}
        out.append({**case, "stages": stages})
    return out


@pytest.mark.slow
def test_report_identical_with_and_without_xdist(pytester):
    write_cases(pytester, CASES)
    r0, d0 = run_check(pytester, "-p", "no:xdist", report="r0.json", subprocess=True)
    r2, d2 = run_check(pytester, "-n", "2", report="r2.json", subprocess=True)
    r0.assert_outcomes(passed=1, failed=1, xfailed=1)
    r2.assert_outcomes(passed=1, failed=1, xfailed=1)
    assert _normalized(d0) == _normalized(d2)
    assert len(d2["cases"]) == 3
