"""`--export-repro`: the script says exactly what it needs (the packages and the files of the user's it imports,
computed), and the weights stay out of its pickle: saved beside it where the check compares numbers, left out
(seeded random values) where the failure cannot depend on them; tied weights stay tied."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_check

MODELS = '''
import hypothesis  # a package the model's file imports: a script that imports this file needs it
import torch


class Tied(torch.nn.Module):
    """Tied weights (the head is the embedding's transpose), an integer buffer, and a branch export cannot trace."""
    def __init__(self):
        super().__init__()
        self.made_by = hypothesis.__name__  # the classes read a package: the script imports their file, not a copy
        self.l = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 256, bias=False)
        self.head.weight = self.l.weight
        self.register_buffer("steps", torch.tensor(3))
    def forward(self, x):
        if x.sum() > 0:
            return self.head(self.l(x)) * self.steps
        return x

class Off(torch.nn.Module):
    """A program that disagrees with eager, through its weights."""
    def __init__(self):
        super().__init__()
        self.made_by = hypothesis.__name__
        self.l = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 256, bias=False)
        self.head.weight = self.l.weight
    def forward(self, x):
        y = self.head(self.l(x))
        return y * 2 if torch.compiler.is_exporting() else y
'''

TESTS = '''
import pytest, torch
from models import Off, Tied

@pytest.mark.exportable
def test_export_fails():
    torch.manual_seed(0)
    return Tied(), (torch.ones(2, 256),)

@pytest.mark.exportable
def test_compare_fails():
    torch.manual_seed(0)
    return Off(), (torch.ones(2, 256),)
'''

WEIGHTS = 256 * 256 * 4  # one copy of the tied matrix


def _run(script: Path, cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The script in a fresh interpreter from a folder of its own, and the top-level packages loaded there that
    plain ``import torch`` does not load."""
    cwd.mkdir(exist_ok=True)
    probe = ("import runpy, sys, json\nbefore = set(m.split('.')[0] for m in sys.modules)\nimport torch\n"
             "base = set(m.split('.')[0] for m in sys.modules)\nsys.argv = [sys.argv[1]]\ncode = 0\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as exc:\n    code = exc.code\n"
             "print('LOADED ' + json.dumps(sorted(set(m.split('.')[0] for m in sys.modules) - base)))\n"
             "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", probe, str(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=600)
    loaded = json.loads(proc.stdout.rsplit("LOADED ", 1)[1]) if "LOADED " in proc.stdout else []
    return proc, loaded


def _header(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("# ") and ":" in line[:12] and not line.startswith("#   "):
            key, value = line[2:].split(":", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


@pytest.mark.slow
def test_the_script_names_what_it_imports_and_keeps_the_weights_out_of_its_pickle(pytester, tmp_path):
    import hypothesis
    import torch

    pytester.makepyfile(models=MODELS)
    pytester.makepyfile(test_cases=TESTS)
    pytester.syspathinsert()
    result, data = run_check(pytester, "-p", "no:xdist", "--export-repro", "repro")
    result.assert_outcomes(failed=2)
    repro = pytester.path / "repro"
    names = {n: f"repro_test_cases__{n}" for n in ("test_export_fails", "test_compare_fails")}
    assert sorted(p.name for p in repro.iterdir()) == sorted(
        [f"{n}{s}" for n in names.values() for s in (".py", ".pt")] + [f"{names['test_compare_fails']}.weights.pt"])

    needs = [f"torch {torch.__version__}", f"hypothesis {hypothesis.__version__}"]
    for case, name in names.items():
        text = (repro / f"{name}.py").read_text()
        head = _header(text)
        # exactly what it imports: torch, the package the model's file imports, the file by its absolute path
        assert head["needs"] == [f"{', '.join(needs)} (as installed when written; the script imports nothing else, "
                                 "but the files below import what they import)"], head
        assert head["imports"][0] == str(pytester.path / "models.py"), head["imports"]
        assert all(line.endswith("(put on sys.path)") for line in head["imports"][1:])
        assert f"needs {', '.join(needs)} and 1 file of yours;" in text.splitlines()[1]
        assert "torch only" not in text
        # the pickle holds the module without its weights
        assert (repro / f"{name}.pt").stat().st_size < WEIGHTS // 4, (repro / f"{name}.pt").stat().st_size

    export_head = _header((repro / f"{names['test_export_fails']}.py").read_text())
    assert export_head["weights"] == ["not saved: this check's failure does not depend on their values; the script "
                                      "fills them with seeded random values (integer buffers are saved)"]
    compare_head = _header((repro / f"{names['test_compare_fails']}.py").read_text())
    weights = repro / f"{names['test_compare_fails']}.weights.pt"
    assert compare_head["weights"][0].startswith(f"{weights.name} beside it (")
    saved = torch.load(weights, weights_only=True)  # plain tensors only
    assert sorted(saved) == ["l.bias", "l.weight"]  # the tied matrix once
    assert WEIGHTS <= weights.stat().st_size < 2 * WEIGHTS

    for case, name in names.items():
        proc, loaded = _run(repro / f"{name}.py", tmp_path / "elsewhere")
        assert proc.returncode == 1 and "REPRODUCED: " in proc.stdout, (case, proc.stdout, proc.stderr[-3000:])
        assert "hypothesis" in loaded and "models" in loaded  # what the header says is what it imports
    assert "REPRODUCED: torch.export.export raised GuardOnDataDependentSymNode" in _run(
        repro / f"{names['test_export_fails']}.py", tmp_path / "elsewhere")[0].stdout


def test_tied_weights_stay_tied_and_the_module_is_put_back(tmp_path):
    """The weights swapped for meta tensors while pickled come back as they were; the script's loader rebuilds
    one tensor for the two slots of a tied weight."""
    import torch

    from pytest_export.repro.source import meta_weights

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[1].weight = model[0].weight
    model.register_buffer("n", torch.tensor(7))
    before = {n: t for n, t in model.state_dict(keep_vars=True).items()}
    with meta_weights(model) as tensors:
        assert model[0].weight.is_meta and model[1].weight is model[0].weight
        torch.save(model, tmp_path / "m.pt")
        assert sorted(tensors) == ["0.bias", "0.weight", "1.bias", "n"]
    assert all(t is before[n] for n, t in model.state_dict(keep_vars=True).items())
    assert (tmp_path / "m.pt").stat().st_size < 4000
