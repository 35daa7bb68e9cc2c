"""ExportDB, the example set that ships inside torch (``torch._export.db.examples``), through the harness.

Each example is one case with its own expectations: a SUPPORTED example must pass every stage; a
NOT_SUPPORTED_YET example is expected to fail ``export``. Like torch's own ExportDB test, the examples are
exported strictly (TorchDynamo). Tags: ``exportdb``, the example's own tags (``torch.cond``,
``python.control-flow``, ...) and its support level.
"""

from __future__ import annotations

import pytest
from torch._export.db.case import SupportLevel
from torch._export.db.examples import all_examples

EXAMPLES = all_examples()


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[0] if lines else "no description"


def _param(name: str, case) -> pytest.param:
    level = case.support_level
    keywords = {
        "strict": True,
        "dynamic_shapes": case.dynamic_shapes,
        "tags": ["exportdb", level.name.lower().replace("_", "-"), *sorted(case.tags)],
    }
    if level != SupportLevel.SUPPORTED:
        keywords["xfail"] = {"export": f"ExportDB marks {name!r} {level.name}: {_first_line(case.description)}"}
    return pytest.param(name, marks=pytest.mark.exportable(**keywords), id=name)


@pytest.mark.parametrize("name", [_param(n, c) for n, c in sorted(EXAMPLES.items())])
def test_exportdb(name):
    case = EXAMPLES[name]
    return case.model, tuple(case.example_args), dict(case.example_kwargs or {})

