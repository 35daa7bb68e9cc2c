"""`--export-repro DIR` (issue #26): a standalone script per failing case, which reproduces the failure
in a fresh process, from any directory: the export that raises, the program that disagrees with eager, the size
guards and fuzz found wrong (its inputs saved as the harness built them). A passing case gets none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.export import Dim

from pytest_export.declare.options import SessionOptions
from pytest_export.repro.checks import CHECKS
from pytest_export.repro.script import assemble
from pytest_export.repro.source import render_dynamic_shapes
from pytest_export.repro.write import MARK, script_name
from tests.helpers import SHORTCUT, cases_by_name, run_check, statuses, write_cases

CASES = '''
def doubled(x):
    return x * 2

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # a branch on a tensor's value: export cannot trace it
            return x + 1
        return x - 1

class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1

class UsesHelper(torch.nn.Module):
    """Reads a function of its file: the script imports the file instead of copying the class."""
    def forward(self, x):
        return doubled(x) if torch.compiler.is_exporting() else doubled(x) + 1

class BranchOnOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:  # resolved statically at export: the program is wrong at size 1 only
            return x * 3
        return x * 2

class WrongInTheMiddle(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and 5 <= x.shape[0] <= 7:  # sizes no guards probe reaches
            return x * 3
        return x * 2

@pytest.mark.exportable
def test_export_fails():
    return DataDependent(), (torch.ones(3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=8)}})
def test_compare_fails():
    return Shortcut(), (torch.ones(3, 2),)

@pytest.mark.exportable(xfail={"compare": "known"})
def test_imports_its_file():
    return UsesHelper(), (torch.ones(3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=32)}})
def test_guards_at_one():
    return BranchOnOne(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("n", min=2, max=9)}})
def test_fuzz_in_the_middle():
    return WrongInTheMiddle(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}})
def test_passes():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
'''


def _run_script(script: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """The script in a fresh interpreter, from a directory of its own (nothing of the test run on its path)."""
    import os

    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def _reproduces(script: Path, cwd: Path) -> str:
    proc = _run_script(script, cwd)
    assert proc.returncode == 1 and "REPRODUCED: " in proc.stdout, (script.name, proc.stdout, proc.stderr[-3000:])
    return proc.stdout[proc.stdout.index("REPRODUCED: "):]


@pytest.mark.slow
def test_a_script_per_failing_case_reproduces_in_a_fresh_process(pytester, tmp_path):
    write_cases(pytester, CASES)
    result, data = run_check(pytester, "--export-repro", "repro", "--hypothesis-seed", "0", "--export-examples", "25")
    result.assert_outcomes(passed=1, failed=4, xfailed=1)
    cases = cases_by_name(data)
    assert statuses(cases["test_fuzz_in_the_middle"])["guards"] == "passed"  # fuzz alone finds it
    repro = pytester.path / "repro"
    names = {"test_export_fails", "test_compare_fails", "test_imports_its_file", "test_guards_at_one",
             "test_fuzz_in_the_middle"}
    assert sorted(p.name for p in repro.iterdir()) == sorted(f"repro_test_cases__{n}{s}" for n in names for s in (".py", ".pt"))
    assert "repro" not in cases["test_passes"]  # a passing case: no script
    scripts = {n: repro / f"repro_test_cases__{n}.py" for n in names}
    for n in names:
        assert cases[n]["repro"] == str(Path("repro") / scripts[n].name)
        text = scripts[n].read_text()
        assert MARK in text and f"# case:    test_cases.py::{n}" in text and "import pytest" not in text
    # the classes are copied into the script where they stand alone, else their file is imported
    guards = scripts["test_guards_at_one"].read_text()
    assert "class BranchOnOne(torch.nn.Module):" in guards and "MODULES =" not in guards
    assert "batch = Dim('batch', min=1, max=32)\nDYNAMIC_SHAPES = {'x': {0: batch}}" in guards
    assert "# probe:   batch=1 (in range; inputs built by the harness with seed 1234)" in guards
    imports = scripts["test_imports_its_file"].read_text()
    assert "class UsesHelper" not in imports and f"MODULES = [('test_cases', '{pytester.path / 'test_cases.py'}')]" in imports
    assert "# stage:   compare (xfailed)" in imports
    fuzz = scripts["test_fuzz_in_the_middle"].read_text()
    assert "# stage:   fuzz (failed)" in fuzz and "# probe:   n=5 (in range" in fuzz
    elsewhere = tmp_path / "elsewhere"
    said = {n: _reproduces(scripts[n], elsewhere) for n in sorted(names)}
    assert said["test_export_fails"].startswith("REPRODUCED: torch.export.export raised GuardOnDataDependentSymNode")
    assert said["test_compare_fails"].startswith("REPRODUCED: the exported program disagrees with eager (call 1)")
    assert said["test_imports_its_file"].startswith("REPRODUCED: the exported program disagrees with eager")
    assert said["test_guards_at_one"].startswith(
        "REPRODUCED: the exported program accepts in-range sizes batch=1 but disagrees with eager")
    assert said["test_fuzz_in_the_middle"].startswith(
        "REPRODUCED: the exported program accepts in-range sizes n=5 but disagrees with eager")
    # the fuzz probe's inputs are the ones the harness drew: the same greatest difference
    worst = cases["test_fuzz_in_the_middle"]["stages"]["fuzz"]["counterexample"]["error"]
    assert f"Greatest absolute difference: {worst.split('Greatest absolute difference: ')[1].split()[0]}" in said[
        "test_fuzz_in_the_middle"]


def test_a_fixed_model_does_not_reproduce_and_its_stale_script_goes(pytester, tmp_path, monkeypatch):
    write_cases(pytester, SHORTCUT + '''
@pytest.mark.exportable
def test_shortcut():
    return Shortcut(), (torch.ones(3),)
''')
    skip = ("--export-skip-stages", "serde,decomp,retrace")
    result, data = run_check(pytester, "--export-repro", "out/repro", *skip)
    result.assert_outcomes(failed=1)
    script = pytester.path / "out" / "repro" / "repro_test_cases__test_shortcut.py"
    assert cases_by_name(data)["test_shortcut"]["repro"] == str(Path("out", "repro", script.name))
    # the bug fixed (here: the model computes the same while exporting): the script says so and exits 0
    proc = _run_script(script, tmp_path / "elsewhere", FIXED="1")
    assert proc.returncode == 0 and "NOT REPRODUCED: the exported program agrees with eager" in proc.stdout, proc
    # the next run passes: the script an earlier run wrote for the case goes, nothing else in DIR does
    (script.parent / "notes.txt").write_text("mine")
    monkeypatch.setenv("FIXED", "1")
    result, data = run_check(pytester, "--export-repro", "out/repro", *skip)
    result.assert_outcomes(passed=1)
    assert sorted(p.name for p in script.parent.iterdir()) == ["notes.txt"]


class Shortcut(torch.nn.Module):
    def forward(self, x):
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1


@pytest.mark.slow
def test_the_plain_python_api_writes_one_too(tmp_path):
    import pytest_export

    result = pytest_export.check(Shortcut(), (torch.ones(3),), name="api::shortcut",
                                 session=SessionOptions(check=True, repro=str(tmp_path / "r")))
    assert result.outcome == "failed" and result.info["repro"] == str(tmp_path / "r" / "repro_api__shortcut.py")
    # the class is copied from this file (a module of the package `tests`): a stand-in module takes it
    text = (tmp_path / "r" / "repro_api__shortcut.py").read_text()
    assert "MODEL_MODULE = 'tests.test_option_export_repro'" in text and "class Shortcut(torch.nn.Module):" in text
    assert _reproduces(tmp_path / "r" / "repro_api__shortcut.py", tmp_path / "elsewhere").startswith(
        "REPRODUCED: the exported program disagrees with eager (call 1)")


class CountsLate(torch.nn.Module):
    """A call counter in the output, from the third call on: the program and eager agree on two calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        import os

        if not os.environ.get("FIXED"):
            self.calls += 1
        return x * 2 if self.calls < 3 else x


class Appends(torch.nn.Module):
    """A list forward appends to, never read: the outputs always agree."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(int(x.shape[0]))
        return x * 2


@pytest.mark.slow
@pytest.mark.parametrize("model, attribute", [(CountsLate, "`calls` (0, then 1, then 2, then 3)"),
                                              (Appends, "`seen` ([], then [3], then [3, 3], then [3, 3, 3])")])
def test_a_python_state_failure_reproduces_while_it_is_there(tmp_path, model, attribute):
    """Issue #32: compare's python-state failure (forward changes the module's Python state on every call) got a
    script that said NOT REPRODUCED wherever the outputs agree on two calls; the script checks the state itself."""
    import pytest_export

    result = pytest_export.check(model(), (torch.ones(3),), name=f"api::{model.__name__}",
                                 session=SessionOptions(check=True, repro=str(tmp_path / "r")))
    assert result.stages["compare"].data["signature"] == "python-state", result.failure_text()
    script = Path(result.info["repro"])
    said = _reproduces(script, tmp_path / "elsewhere")
    assert said.startswith(f"REPRODUCED: forward changes Python attribute {attribute} on every call"), said
    assert "the exported program freezes it at its traced value" in said
    if model is CountsLate:  # the state fixed: the script says so and exits 0
        proc = _run_script(script, tmp_path / "elsewhere", FIXED="1")
        assert proc.returncode == 0 and "NOT REPRODUCED: forward changes no plain Python attribute" in proc.stdout, proc


def test_every_check_is_valid_python():
    for check, text in CHECKS.items():
        script = assemble(header="# header", future=check == "eager", consts={"INPUTS": "x.pt", "SEED": 0x5EED},
                          model="", inlined=check == "compare", dims="DYNAMIC_SHAPES = None\n", check=check,
                          check_text=text)
        compile(script, f"<{check}>", "exec")
        assert "SEED = 0x5EED  # every forward runs after torch.manual_seed(SEED)" in script


def test_dynamic_shapes_are_written_as_source():
    batch, seq = Dim("batch", min=1, max=64), Dim("seq")
    spec = {"x": {0: batch, 1: Dim.AUTO}, "y": (2 * batch + 1, None, Dim.DYNAMIC(min=2, max=8)),
            "z": [{0: seq - 1}, Dim.STATIC], "n": None}
    text, note = render_dynamic_shapes(spec, taken={"seq"})
    assert note is None
    assert text.splitlines() == [
        "batch = Dim('batch', min=1, max=64)",
        "seq_ = Dim('seq', min=0)",
        "DYNAMIC_SHAPES = {'x': {0: batch, 1: Dim.AUTO}, 'y': (2 * batch + 1, None, Dim.DYNAMIC(min=2, max=8)), "
        "'z': [{0: seq_ - 1}, Dim.STATIC], 'n': None}",
    ]
    namespace: dict = {"Dim": Dim}
    exec(text, namespace)
    again = namespace["DYNAMIC_SHAPES"]
    assert again["y"][0].fn(5) == 11 and again["y"][0].root.max == 64 and again["z"][0][0].fn(5) == 4
    text, note = render_dynamic_shapes({"x": {0: object()}}, taken=set())
    assert text.startswith("DYNAMIC_SHAPES = None  # dynamic_shapes could not be written as source (builtins.object)")
    assert "the script exports with static shapes" in note


@pytest.mark.parametrize("nodeid, name", [
    ("test_models.py::test_mlp", "repro_test_models__test_mlp"),
    ("tests/models/test_x.py::TestA::test_b[strict-cuda:0]",
     "repro_tests__models__test_x__TestA__test_b_strict-cuda_0"),
    ("1.py::t", "repro_1__t"),
    ("models_test.py::check_test", "repro_models_test__check_test_"),
])
def test_script_names_follow_the_nodeid(nodeid, name):
    import fnmatch

    assert script_name(nodeid) == name
    # a later pytest run over the folder that holds DIR must not collect the scripts as test modules
    assert not any(fnmatch.fnmatch(f"{name}.py", glob) for glob in ("test_*.py", "*_test.py"))


PROBES = '''
class ShortAtLarge(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting() and x.shape[0] > 1000:  # too large to allocate: probed with fake tensors
            return x[:-1] * 2
        return x * 2

class Specializes(torch.nn.Module):
    def forward(self, x):
        return x.reshape(4, -1)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("b", min=2, max=100000)}}, max_memory="64KB")
def test_fake_probe():
    return ShortAtLarge(), (torch.randn(4, 3),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO(min=2, max=16)}})
def test_specialized():
    return Specializes(), (torch.randn(4, 3),)
'''


@pytest.mark.slow
def test_a_fake_probe_and_a_specialized_axis_reproduce(pytester, tmp_path):
    write_cases(pytester, PROBES)
    result, data = run_check(pytester, "--export-repro", "repro", "--hypothesis-seed", "0", "--export-examples", "5")
    result.assert_outcomes(failed=2)
    fake = pytester.path / "repro" / "repro_test_cases__test_fake_probe.py"
    assert "b=100000 (in range; inputs built by the harness with seed 1234, run with fake tensors)" in fake.read_text()
    assert (pytester.path / "repro" / "repro_test_cases__test_fake_probe.pt").stat().st_size < 20_000  # shapes, no data
    assert _reproduces(fake, tmp_path / "elsewhere") == (
        "REPRODUCED: the exported program accepts in-range sizes b=100000 but disagrees with eager:\n"
        "  output: (100000, 3) torch.float32 vs (99999, 3) torch.float32\n")
    specialized = pytester.path / "repro" / "repro_test_cases__test_specialized.py"
    assert _reproduces(specialized, tmp_path / "elsewhere") == (
        "REPRODUCED: x.shape[0]: declared dynamic in [2, 16], export specialized it to 4\n")


XDIST = '''
class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x + 1
        return x - 1

@pytest.mark.exportable
def test_export_fails():
    return DataDependent(), (torch.ones(3),)

@pytest.mark.exportable
def test_passes():
    return torch.nn.Linear(3, 2), (torch.randn(4, 3),)
'''


@pytest.mark.slow
def test_xdist_workers_write_the_scripts(pytester, tmp_path):
    write_cases(pytester, XDIST)
    result, data = run_check(pytester, "-n", "2", "--export-repro", "repro", subprocess=True)
    result.assert_outcomes(passed=1, failed=1)
    assert sorted(p.name for p in (pytester.path / "repro").iterdir()) == [
        "repro_test_cases__test_export_fails.pt", "repro_test_cases__test_export_fails.py"]
    assert cases_by_name(data)["test_export_fails"]["repro"] == str(Path("repro", "repro_test_cases__test_export_fails.py"))
    assert _reproduces(pytester.path / "repro" / "repro_test_cases__test_export_fails.py", tmp_path / "elsewhere").startswith(
        "REPRODUCED: torch.export.export raised GuardOnDataDependentSymNode")
