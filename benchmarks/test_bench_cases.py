"""The 20 benchmark cases as marked tests (run by benchmarks/run.py with --export-check)."""

import pytest

from cases import make_cases

CASES = make_cases()


@pytest.mark.exportable
@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_case(index):
    _, module, args = CASES[index]
    return module, args
