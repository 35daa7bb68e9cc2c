"""Warnings users can act on (issue #26): every ExportWarning names the test's file and line and comes from the
test's module, so ``-W`` and ``filterwarnings`` select it; sizes below the min that torch does not check are
recorded, never warned about; a module left in training mode warns; torch's own output goes to the report."""

from __future__ import annotations

import sys
import warnings

import pytest

from pytest_export.torchside.torchlog import Origins, captured_torch_output
from tests.helpers import cases_by_name, run_check, write_cases

# ---- A: attributed to the test's file and line, selected by its module --------------------------------

NARROWED = '''
class BranchOnSize(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x * 2
        return x + 1


@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim.AUTO}}, examples=2)
def test_narrowed():
    return BranchOnSize(), (torch.randn(8, 3),)


def test_fixture_narrowed(export_check):
    torch.manual_seed(0)
    export_check(BranchOnSize(), (torch.randn(8, 3),), dynamic_shapes={"x": {0: Dim.AUTO}}, examples=2)
'''


def _line(pytester, name: str, text: str) -> int:
    lines = (pytester.path / f"{name}.py").read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if text in ln)


def test_export_warnings_name_the_test_file_and_line_and_filter_by_its_module(pytester):
    write_cases(pytester, NARROWED, name="test_attr")
    marker_line = _line(pytester, "test_attr", "@pytest.mark.exportable")
    call_line = _line(pytester, "test_attr", "export_check(BranchOnSize()")

    result, data = run_check(pytester)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert f"test_attr.py:{marker_line}: ExportWarning: test_attr.py::test_narrowed: x.shape[0]" in out, out
    assert f"test_attr.py:{call_line}: ExportWarning: test_attr.py::test_fixture_narrowed: x.shape[0]" in out, out
    assert "items.py" not in out and "session.py" not in out

    # -W selects by the test's module: another module's filter leaves them alone, this one's fails both
    result, _ = run_check(pytester, "-W", "error::pytest_export.ExportWarning:other_module")
    result.assert_outcomes(passed=2)
    result, _ = run_check(pytester, "-W", "error::pytest_export.ExportWarning:test_attr")
    result.assert_outcomes(failed=2)
    assert "ExportWarning: test_attr.py::test_narrowed" in result.stdout.str()


def test_a_filterwarnings_mark_on_the_module_silences_them_and_the_report_keeps_them(pytester):
    write_cases(pytester, 'pytestmark = pytest.mark.filterwarnings("ignore::pytest_export.ExportWarning")\n'
                + NARROWED, name="test_quiet")
    result, data = run_check(pytester, "-W", "error::pytest_export.ExportWarning")
    result.assert_outcomes(passed=2)
    assert "ExportWarning" not in result.stdout.str()
    assert any("export kept only" in w for w in cases_by_name(data)["test_narrowed"]["warnings"])


# ---- B: below the min, where torch checks nothing: recorded, no warning ---------------------------------

ATTENTION = '''
class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        w = (q @ k.transpose(-1, -2) / 8 ** 0.5).softmax(-1)
        return (w @ v).amax(dim=1)  # no maximum over an empty sequence: size 0 raises inside


@pytest.mark.exportable(dynamic_shapes={"x": {1: Dim("seq", min=1, max=16)}}, examples=2)
def test_attention():
    torch.manual_seed(0)
    return Attention().eval(), (torch.randn(2, 5, 8),)
'''


def test_size_zero_below_a_min_of_one_is_recorded_and_not_warned(pytester):
    write_cases(pytester, ATTENTION)
    result, data = run_check(pytester, "-W", "error::pytest_export.ExportWarning")
    result.assert_outcomes(passed=1)
    assert "ExportWarning" not in result.stdout.str()
    case = cases_by_name(data)["test_attention"]
    assert not case.get("warnings")
    guards = case["stages"]["guards"]
    (row,) = guards["below_min"]
    assert row["probe"].startswith("seq=0 (below the min") and "raised inside the program" in row["what"]
    assert not guards["findings"]


# ---- C: a module left in training mode --------------------------------------------------------------

TRAINING = '''
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x))


@pytest.mark.exportable(examples=0)
def test_train_mode():
    torch.manual_seed(0)
    return Net(), (torch.randn(2, 4),)


@pytest.mark.exportable(examples=0, train=True)
def test_train_on_purpose():
    torch.manual_seed(0)
    return Net(), (torch.randn(2, 4),)


@pytest.mark.exportable(examples=0)
def test_eval_mode():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 4),)
'''


def test_training_mode_warns_naming_the_submodules_unless_train_or_eval(pytester):
    write_cases(pytester, TRAINING)
    result, data = run_check(pytester, "-W", "error::pytest_export.ExportWarning")
    result.assert_outcomes(passed=2, failed=1)
    cases = cases_by_name(data)
    (warning,) = cases["test_train_mode"]["warnings"]
    assert "training mode: drop (Dropout p=0.5)" in warning and ".eval()" in warning and "train=True" in warning
    assert not cases["test_train_on_purpose"].get("warnings") and not cases["test_eval_mode"].get("warnings")
    assert "ExportWarning: test_cases.py::test_train_mode: the module is in training mode" in result.stdout.str()

    # plain mode too: the same warning, no export (pytest's own warnings, such as an assert-rewrite note under
    # xdist, are not counted: only the ExportWarning's)
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestWarning")
    result.assert_outcomes(passed=3, warnings=1)
    assert "test_cases.py::test_train_mode: the module is in training mode: drop (Dropout p=0.5)" in result.stdout.str()


def test_training_warning_names_at_most_five_submodules():
    import torch

    from pytest_export.torchside.training import active_training, training_warning

    net = torch.nn.Sequential(*[torch.nn.Dropout(0.1) for _ in range(6)], torch.nn.BatchNorm1d(3),
                              torch.nn.Dropout(0.0), torch.nn.InstanceNorm1d(3))
    assert active_training(net)[-1] == "6 (BatchNorm1d)" and len(active_training(net)) == 7
    text = training_warning(net)
    assert "0 (Dropout p=0.1), 1 (Dropout p=0.1)" in text and "and 2 more" in text
    assert training_warning(net.eval()) is None and active_training(lambda x: x) == []


# ---- D: torch's own output goes to the report ---------------------------------------------------------

NOISY = '''
import logging, sys, warnings

SEEN = []

class Seen(logging.Handler):
    def emit(self, record):
        SEEN.append(record.getMessage())

logging.getLogger("torch._dynamo").addHandler(Seen())


# code that runs as torch's own: its frame is in a file of torch
exec(compile("def torch_prints(text):\\n    print(text, file=sys.stderr)\\n", torch.__file__, "exec"))


class Noisy(torch.nn.Module):
    def forward(self, x):
        logging.getLogger("torch._dynamo").warning("a torch W record at %d", 7)
        warnings.warn_explicit("torch's own deprecation", FutureWarning, torch.__file__, 1)
        torch_prints("a line torch wrote on stderr")
        print("the model's line on stderr", file=sys.stderr)
        warnings.warn("the model's own warning")
        return x + 1


@pytest.mark.exportable(examples=0)
def test_noisy():
    return Noisy(), (torch.randn(3),)


def test_nothing_reached_torch_handlers():
    assert SEEN == []
'''


def test_torch_output_is_in_the_report_not_the_terminal(pytester):
    write_cases(pytester, NOISY)
    result, data = run_check(pytester, "-p", "no:randomly", "-rP")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    torch_output = cases_by_name(data)["test_noisy"]["torch_output"]
    assert "WARNING torch._dynamo: a torch W record at 7" in torch_output
    assert "a line torch wrote on stderr" in torch_output
    assert any(line.startswith("FutureWarning: torch's own deprecation (torch/__init__.py:1)") for line in torch_output)
    for text in ("torch W record", "a line torch wrote on stderr", "torch's own deprecation", "LeafSpec"):
        assert text not in out, text
    # the model's own print is the model's: in its test's captured stderr (-rP shows it), not in torch_output (#32)
    assert not any("the model's line" in line for line in torch_output)
    assert "the model's line on stderr" in out
    # the model's own warning is the model's: it reaches pytest's summary, from the model's line
    assert "test_cases.py:" in out and "UserWarning: the model's own warning" in out
    assert len(data["cases"]) == 1 and len(torch_output) <= 51


def test_capture_caps_and_dedups_and_passes_other_warnings_through(capsys):
    import sys

    import torch

    space: dict = {"sys": sys}
    exec(compile("def torch_prints(text):\n    print(text, file=sys.stderr)\n", torch.__file__, "exec"), space)
    info: dict = {}
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        with captured_torch_output(info):
            for i in range(200):
                space["torch_prints"](f"line {i % 120}")
            print("the test's own line", file=sys.stderr)
            warnings.warn("not torch's", UserWarning)
    assert [str(w.message) for w in log] == ["not torch's"] and log[0].filename == __file__
    lines = info["torch_output"]
    assert lines[:2] == ["line 0", "line 1"] and len(lines) == 51
    assert lines[-1] == "... and 70 more lines (not kept)"
    assert capsys.readouterr().err == "the test's own line\n"  # not torch's: where it would have gone (#32)


def test_origins_rule():
    import copy
    import torch

    o = Origins()
    assert o.is_torchs(FutureWarning, torch.__file__)
    assert o.is_torchs(FutureWarning, copy.__file__)  # torch's classes deep-copied: the standard library
    assert not o.is_torchs(UserWarning, __file__)  # the model's own code
    assert not o.is_torchs(UserWarning, pytest.__file__)  # a library in site-packages
    assert not o.is_torchs(pytest.PytestWarning, torch.__file__)


def test_a_deployment_toolchains_warnings_are_the_harnesss(tmp_path, monkeypatch):
    """executorch warned DeprecationWarning and ExperimentalWarning from its own files into the user's warnings
    summary while the executorch stage ran: a toolchain the stages drive warns like torch, into torch_output."""
    from pytest_export.torchside import torchlog

    tool = tmp_path / "site-packages" / "executorch"
    tool.mkdir(parents=True)  # no __init__.py: a namespace package, as executorch is
    monkeypatch.syspath_prepend(str(tool.parent))
    monkeypatch.delitem(sys.modules, "executorch", raising=False)  # imported by another test: found here instead
    torchlog._toolchains.cache_clear()
    try:
        o = Origins()
        assert o.is_torchs(DeprecationWarning, str(tool / "exir" / "_ops.py"))
        assert not o.is_torchs(UserWarning, __file__)  # the model's own code still passes
    finally:
        torchlog._toolchains.cache_clear()


# ---- the model's own output is the model's (issue #32) ----------------------------------------------------

LOUD = '''
import sys, warnings

class Loud(torch.nn.Module):
    def forward(self, x):
        print("MODEL SAYS HI on stdout")
        print("MODEL SAYS HI on stderr", file=sys.stderr)
        warnings.warn_explicit("torch's own note", FutureWarning, torch.__file__, 1)
        return x * 2 if torch.compiler.is_exporting() else x * 2 + 1  # compare fails: the test fails


@pytest.mark.exportable(examples=0)
def test_loud():
    return Loud(), (torch.ones(3),)
'''


def test_the_models_prints_reach_pytest_and_torchs_warning_the_report(pytester):
    write_cases(pytester, LOUD)
    result, data = run_check(pytester, "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # pytest's captured output of the failing test shows both lines, each in its section
    assert "Captured stdout call" in out and "MODEL SAYS HI on stdout" in out
    assert "Captured stderr call" in out and "MODEL SAYS HI on stderr" in out
    torch_output = cases_by_name(data)["test_loud"]["torch_output"]
    assert not any("MODEL SAYS HI" in line for line in torch_output), torch_output
    assert any(line.startswith("FutureWarning: torch's own note") for line in torch_output), torch_output


def test_the_models_prints_reach_the_terminal_with_s(pytester):
    write_cases(pytester, LOUD)
    result, data = run_check(pytester, "-p", "no:randomly", "-s")
    result.assert_outcomes(failed=1)
    assert "MODEL SAYS HI on stdout" in result.stdout.str()
    assert "MODEL SAYS HI on stderr" in result.stderr.str()
    assert not any("MODEL SAYS HI" in line for line in cases_by_name(data)["test_loud"]["torch_output"])
