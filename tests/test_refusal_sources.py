"""Failures a user can act on (issue #33): every refusal and constraint violation traced to the line that added its
guard, in strict and non-strict export; only the guards that refuse are named; a guard on two dims together is
blamed on both, never on one alone; the fix offered says what it gives up; a branch on a size gets the model-side
fix. Each defect is planted in a model file of its own, called through another module as a library would be."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import cases_by_name

# A library module whose shortcut for one size (as transformers' ViT takes for 224x224) leaves the guard
# (H//16)*(W//16) != 196: only the pair 224x224 is refused, 224 for either side alone is accepted.
SHORTCUT_LIB = '''
import torch


class Patches(torch.nn.Module):
    def forward(self, x):
        h, w = x.shape[-2] // 16, x.shape[-1] // 16
        if h * w == 196 and x.shape[-2] == x.shape[-1]:
            return x * 2
        return x + 1
'''

# A model module: a size-dependent branch, and a reshape that needs an even height (a constraint violation).
CNN = '''
import torch


class Pool(torch.nn.Module):
    def forward(self, x):
        b, c, h, w = x.shape
        return x.reshape(b, c, h // 2, 2, w).amax(3)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = Pool()

    def forward(self, images):
        y = self.conv(images)
        if y.shape[2] > 32:
            y = y * 2
        return self.pool(y)
'''

# A branch on a tensor's values: a data-dependent error, in strict and non-strict export.
GATE = '''
import torch


class Gate(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x
'''

CASES = '''
import pytest, torch
from torch.export import Dim
from shortcut_lib import Patches
from cnn_models.cnn import CNN
from cnn_models.gate import Gate


class ViTLike(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.patches = Patches()

    def forward(self, x):
        return self.patches(x).sum(-1)


h16 = Dim("h16", min=14, max=64)
w16 = Dim("w16", min=14, max=64)


@pytest.mark.exportable(dynamic_shapes={"x": {2: 16 * h16, 3: 16 * w16}})
def test_shortcut():
    return ViTLike(), (torch.randn(1, 3, 224, 320),)


@pytest.mark.exportable(strict=True, dynamic_shapes={"x": {2: 16 * h16, 3: 16 * w16}})
def test_shortcut_strict():
    return ViTLike(), (torch.randn(1, 3, 224, 320),)


@pytest.mark.exportable(dynamic_shapes={"images": {2: Dim("h", min=4, max=64)}})
def test_cnn():
    return CNN(), (torch.randn(1, 3, 16, 16),)


@pytest.mark.exportable(strict=True, dynamic_shapes={"images": {2: Dim("h", min=4, max=64)}})
def test_cnn_strict():
    return CNN(), (torch.randn(1, 3, 16, 16),)


@pytest.mark.exportable
def test_gate():
    return Gate(), (torch.randn(8),)


@pytest.mark.exportable(strict=True)
def test_gate_strict():
    return Gate(), (torch.randn(8),)
'''


class Run:
    def __init__(self, stdout: str, cases: dict):
        self.stdout, self.cases = stdout, cases


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """One real pytest run over the six cases, in a fresh process (the model files are modules of its own)."""
    root = tmp_path_factory.mktemp("refusals")
    (root / "shortcut_lib.py").write_text(SHORTCUT_LIB)
    (root / "cnn_models").mkdir()
    (root / "cnn_models" / "__init__.py").write_text("")
    (root / "cnn_models" / "cnn.py").write_text(CNN)
    (root / "cnn_models" / "gate.py").write_text(GATE)
    (root / "test_refusals.py").write_text(CASES)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--export-check", "--export-report", "report.json",
                           "-p", "no:cacheprovider", "--export-skip-stages", "fuzz,retrace", "--rootdir", str(root)],
                          cwd=root, capture_output=True, text=True, timeout=600)
    data = json.loads((root / "report.json").read_text())
    return Run(proc.stdout + proc.stderr, cases_by_name(data))


def _guards_text(case):
    return case["stages"]["guards"]["message"]


@pytest.mark.slow
def test_refusals_and_violations_name_the_models_line(outcome):
    cases = outcome.cases
    for name in ("test_shortcut", "test_shortcut_strict"):
        text = _guards_text(cases[name])
        # the library's line, not torch's frames (non-strict recorded torch/nn/modules/module.py before)
        assert "was added at shortcut_lib.py:8 in forward: `if h * w == 196 and x.shape[-2] == x.shape[-1]:`" in text, text
        assert "inside torch" not in text and "module.py" not in text, text
        # export's own substitution for the derived dims (W = 16*w16) holds at every size: never named
        assert "16*s" not in text and "non_strict_utils" not in text, text
    for name in ("test_cnn", "test_cnn_strict"):
        text = cases[name]["stages"]["export"]["message"]
        assert "the guards torch could not prove over the declared range were added at:" in text, text
        assert "cnn.py:19 in forward: `if y.shape[2] > 32:` (`h <= 32`)" in text, text
        assert "cnn.py:8 in forward: `return x.reshape(b, c, h // 2, 2, w).amax(3)`" in text, text
    for name in ("test_gate", "test_gate_strict"):  # a data-dependent error: torch's message names the line
        text = cases[name]["stages"]["export"]["message"]
        assert 'cnn_models/gate.py", line 7, in forward' in text, text


def test_a_refusal_of_two_dims_together_is_blamed_on_both_with_the_sizes_each_takes_alone(outcome):
    cases = outcome.cases
    case = cases["test_shortcut"]
    text = _guards_text(case)
    assert "refused where h16*w16 == 196" in text, text
    assert "a relation between h16 and w16" in text, text
    # the whole refused set, decided over every declared size (issue #41): one pair of 2,601
    assert "refused where h16*w16 == 196: 1 of 2601 sizes of (h16, w16): (14, 14)" in text, text
    assert "(proved over every declared size, not sampled)" in text, text
    for row in case["shapes"]:
        assert row["status"] == "refused-in-range" and row["refused_where"] == "h16*w16 == 196", row
        assert "refused_at" not in row, row  # neither dim is refused at 224 alone
    assert "refused-in-range (refused where h16*w16 == 196)" in outcome.stdout, outcome.stdout
    assert "(refuses 224)" not in outcome.stdout


def test_the_fix_says_what_it_gives_up_and_the_model_side_fix_is_offered(outcome):
    cases = outcome.cases
    text = _guards_text(cases["test_shortcut"])
    assert "w16 = Dim('w16', min=15, max=64)" in text and "ready to paste (proved:" in text, text
    # what the fix gives up, computed over the whole box: w16=14 at all 51 sizes of h16 (issue #41)
    assert "it gives up 1 of its 51 declared sizes (51 of the 2601 declared size combinations)" in text, text
    assert "though the program refuses 1 of them" in text, text
    assert ("or change the model: shortcut_lib.py:8 in forward branches on a size" in text
            and "torch.cond(pred, true_fn, false_fn, operands)" in text), text
    cnn = cases["test_cnn"]["stages"]["export"]["message"]
    assert "or change the model: cnn_models/cnn.py:19 in forward branches on a size" in cnn, cnn
