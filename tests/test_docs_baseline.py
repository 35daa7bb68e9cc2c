"""docs/ci.md's baseline example is what ``--export-baseline-update`` writes for the models it names (the keys,
the shape, the signatures, the non-core ops), and its way to remove a stale entry (a renamed test: the update on
a full run) removes it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "ci.md"

MODELS = '''
import dataclasses
import torch

@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    hidden: torch.Tensor

torch.export.register_dataclass(Out)  # no serialized_type_name: torch.export.save cannot name it

class Decoder(torch.nn.Module):
    def forward(self, x):
        return Out(x + 1, x * 2)

class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
    def forward(self, x):
        return self.bn(self.conv(x))
'''

TESTS = '''
import pytest, torch
from models import CNN, Decoder

@pytest.mark.exportable
def test_decoder():
    return Decoder(), (torch.randn(3),)

@pytest.mark.exportable(train=True)
def test_cnn_train():
    torch.manual_seed(0)
    return CNN().train(), (torch.randn(2, 3, 8, 8),)
'''


def doc_example() -> dict[str, Any]:
    """The fenced JSON block of docs/ci.md that shows a baseline."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    shown = [json.loads(b) for b in blocks if '"failures"' in b]
    assert len(shown) == 1, "docs/ci.md shows one baseline"
    return shown[0]


def update(pytester, *args: str) -> dict[str, Any]:
    result = pytester.runpytest("--export-check", "--export-baseline", "export-baseline.json",
                                "--export-baseline-update", "-p", "no:cacheprovider", "-p", "no:xdist", *args)
    assert result.ret == 0, result.stdout.str()
    return json.loads((pytester.path / "export-baseline.json").read_text())


@pytest.fixture
def repo(pytester):
    pytester.makepyfile(models=MODELS)
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_models.py").write_text(TESTS)
    pytester.syspathinsert()
    return pytester


@pytest.mark.slow
def test_the_documented_baseline_is_what_an_update_writes_and_a_full_update_prunes_a_renamed_test(repo):
    written = update(repo)
    shown = doc_example()
    assert sorted(shown) == sorted(written) and shown["version"] == written["version"]
    assert shown["non_core_ops"] == written["non_core_ops"]
    assert {n: sorted(stages) for n, stages in shown["failures"].items()} == \
        {n: sorted(stages) for n, stages in written["failures"].items()}
    for nodeid, stages in shown["failures"].items():
        for stage, entry in stages.items():
            real = written["failures"][nodeid][stage]
            assert sorted(entry) == sorted(real) and entry["signature"] == real["signature"], (entry, real)
            assert real["reason"].startswith(entry["reason"].removesuffix(" ...")), (entry, real)
    assert (repo.path / "export-baseline.json").read_text() == \
        json.dumps(written, indent=2, sort_keys=True) + "\n"  # sorted JSON, as the page says

    # a renamed test: its old entry is stale, and the update of a full run (as the page says) removes it
    tests = repo.path / "tests" / "test_models.py"
    tests.write_text(tests.read_text().replace("def test_decoder(", "def test_decoder_renamed("))
    renamed = update(repo)
    assert sorted(renamed["failures"]) == ["tests/test_models.py::test_decoder_renamed"]
