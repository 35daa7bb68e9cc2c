"""Failures point into the model (issue #26): when eager forward or ``torch.export`` raises inside the model's code,
the item shows the model's own frames (file, line, source line), the harness's frames cut and torch's folded, the
report keeps the innermost one (``where``), and each message prints once. A class torch's pytree does not know is
named with the registration that fixes it.

The models live in a file of their own (``models.py``) beside the test file, as in a model repository.
"""

from __future__ import annotations

import dataclasses
import re
import traceback

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.torchside import frames
from tests.helpers import cases_by_name, run_check

MODELS = '''
import torch


def reshape(x):
    return x.view(-1, 7)  # LINE:reshape


class Bad(torch.nn.Module):
    def forward(self, x):
        y = x + 1
        return reshape(y)  # LINE:bad


class Sub(torch.nn.Module):
    def forward(self, x):
        return x.view(-1, 7)  # LINE:sub


class Outer(torch.nn.Module):
    """The model calls a submodule: torch's module call lies between the two frames."""
    def __init__(self):
        super().__init__()
        self.sub = Sub()

    def forward(self, x):
        return self.sub(x) * 2  # LINE:outer


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LINE:branch
            return x + 1
        return x - 1


class OnlyExport(torch.nn.Module):
    """Runs in eager; the same shape error while exporting."""
    def forward(self, x):
        if torch.compiler.is_exporting():
            return x.view(-1, 7)  # LINE:only_export
        return x
'''

MESSAGE = "shape '[-1, 7]' is invalid for input of size 12"


def line(tag: str) -> int:
    """The line number of the ``# LINE:tag`` comment in ``MODELS`` (as written to models.py)."""
    for n, text in enumerate(MODELS.strip().splitlines(), start=1):  # pytester writes it stripped
        if text.endswith(f"# LINE:{tag}"):
            return n
    raise KeyError(tag)


def plant(pytester, tests: str) -> None:
    pytester.makepyfile(models=MODELS, test_x="import pytest, torch\nfrom models import *\n" + tests)
    pytester.syspathinsert()


def section(out: str, head: str) -> str:
    """The text of one ``--- stage: failed ---`` section of an item's failure (up to the next item or summary)."""
    start = out.index(head)
    end = min((i for i in (out.find("\n___", start), out.find("\n===", start), out.find("\n---", start + 1))
               if i != -1), default=len(out))
    return out[start:end]


EAGER_CASES = '''
@pytest.mark.exportable
def test_bad():
    return Bad(), (torch.randn(4, 3),)

@pytest.mark.exportable
def test_outer():
    return Outer(), (torch.randn(4, 3),)
'''


def _eager_frames_shown(out: str) -> None:
    out = out.split("warnings summary")[0]  # the failures' text (pytest's own warnings name site-packages)
    # the model's frames, as pytest shows a test's: place and source line, outermost first
    assert f"models.py:{line('bad')} in forward\n      return reshape(y)" in out, out
    assert f"models.py:{line('reshape')} in reshape\n      return x.view(-1, 7)" in out, out
    # torch's module call between the model's two frames: folded into one line
    outer = out[out.index(f"models.py:{line('outer')} in forward"):]
    assert re.match(rf"models.py:{line('outer')} in forward\n      return self.sub\(x\) \* 2[^\n]*\n"
                    rf"  \.\.\. \d+ frames in torch\n  models.py:{line('sub')} in forward\n", outer), outer
    assert "pytest_export/" not in out and "site-packages" not in out  # the harness's frames cut, torch's folded
    assert "During handling of the above exception" not in out


def test_eager_failure_shows_the_models_frames_in_plain_mode(pytester):
    plant(pytester, EAGER_CASES)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    _eager_frames_shown(out)
    assert out.count(MESSAGE) == 2, out  # once per item: no chained copy


def test_eager_failure_shows_the_models_frames_and_the_report_keeps_them(pytester):
    plant(pytester, EAGER_CASES)
    result, data = run_check(pytester, "-rN")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    _eager_frames_shown(out)
    assert out.count(MESSAGE) == 2, out  # the table row cuts the message before it: once per item
    cases = cases_by_name(data)
    bad, outer = cases["test_bad"]["stages"]["eager"], cases["test_outer"]["stages"]["eager"]
    assert bad["where"] == f"models.py:{line('reshape')} in reshape", bad
    assert bad["frames"] == [f"models.py:{line('bad')} in forward", f"models.py:{line('reshape')} in reshape"]
    assert outer["where"] == f"models.py:{line('sub')} in forward"
    assert bad["signature"] == "raised"  # the baseline's signature is unchanged


def test_a_declaration_error_prints_once_in_plain_mode(pytester):
    plant(pytester, '''
from torch.export import Dim

@pytest.mark.exportable(dynamic_shapes={"x": {5: Dim("b")}})
def test_decl():
    return Outer(), (torch.randn(4, 7),)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert out.count("axis 5 is past the rank of x") == 1, out
    assert "During handling of the above exception" not in out


EXPORT_CASES = '''
@pytest.mark.exportable
def test_branch():
    return Branch(), (torch.randn(4, 3),)

@pytest.mark.exportable(strict=True)
def test_branch_strict():
    return Branch(), (torch.randn(4, 3),)

@pytest.mark.exportable
def test_only_export():
    return OnlyExport(), (torch.randn(4, 3),)

@pytest.mark.exportable(strict=True)
def test_only_export_strict():
    return OnlyExport(), (torch.randn(4, 3),)
'''


@pytest.mark.slow
def test_export_failure_points_into_the_model_in_both_modes(pytester):
    plant(pytester, EXPORT_CASES)
    result, data = run_check(pytester, "-rN")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    cases = cases_by_name(data)
    # the report keeps the model's frame: from the traceback (non-strict), from Dynamo's stack (strict)
    for name, tag in [("test_branch", "branch"), ("test_branch_strict", "branch"),
                      ("test_only_export", "only_export"), ("test_only_export_strict", "only_export")]:
        export = cases[name]["stages"]["export"]
        assert export["where"] == f"models.py:{line(tag)} in forward", (name, export)
        assert export["status"] == "failed"
    # the data-dependent branch: torch's own text shows the model's line, in both modes; not repeated after it
    for name in ("test_branch", "test_branch_strict"):
        text = cases[name]["stages"]["export"]["message"]
        assert f'models.py", line {line("branch")}, in forward' in text, text
        assert "in the model (most recent call last)" not in text
    # the shape error: torch's text shows no line of the model; the harness adds its frames, once
    failures = out[out.index("test_only_export ___"):]
    non_strict = section(failures, "--- export: failed ---")
    assert re.search(rf"in the model \(most recent call last\):\n  models.py:{line('only_export')} in forward\n"
                     r"      return x.view\(-1, 7\)[^\n]*\n  \.\.\. \d+ frames in torch", non_strict), non_strict
    assert non_strict.count(MESSAGE) == 1 and "pytest_export/" not in non_strict, non_strict
    assert "draft_export raised: the same error (above)" in non_strict  # torch's text once, the diagnosis kept
    strict = cases["test_only_export_strict"]["stages"]["export"]["message"]
    assert f"models.py:{line('only_export')} in forward" in strict, strict


DATACLASSES = '''
import dataclasses
import pytest, torch

@dataclasses.dataclass
class Out:
    a: torch.Tensor
    b: torch.Tensor

class Plain:
    def __init__(self, a):
        self.a = a

@dataclasses.dataclass
class Named:
    a: torch.Tensor

torch.export.register_dataclass(Named)  # registered, but without the serialized_type_name save needs

class GivesOut(torch.nn.Module):
    def forward(self, x):
        return Out(x + 1, x * 2)

class GivesPlain(torch.nn.Module):
    def forward(self, x):
        return Plain(x + 1)

class GivesNamed(torch.nn.Module):
    def forward(self, x):
        return Named(x + 1)

@pytest.mark.exportable
def test_out():
    return GivesOut(), (torch.randn(2),)

@pytest.mark.exportable(strict=True)
def test_out_strict():
    return GivesOut(), (torch.randn(2),)

@pytest.mark.exportable
def test_plain():
    return GivesPlain(), (torch.randn(2),)

@pytest.mark.exportable
def test_named():
    return GivesNamed(), (torch.randn(2),)
'''


@pytest.mark.slow
def test_an_unregistered_output_class_is_named_with_its_registration(pytester):
    pytester.makepyfile(test_dc=DATACLASSES)
    result, data = run_check(pytester, "-rN")
    result.assert_outcomes(failed=4)
    out = result.stdout.str()
    cases = cases_by_name(data)
    fix = 'torch.export.register_dataclass(Out, serialized_type_name="test_dc.Out")'
    for name in ("test_out", "test_out_strict"):
        text = cases[name]["stages"]["export"]["message"]
        assert text.count(fix) == 1, text
        assert "draft_export raised: the same error (above)" in text  # torch's pytree text once
    assert out.count(fix) == 2, out  # once per item
    assert out.count("If you don't need to register a pytree, please leave a comment") == 2, out  # test_out, test_plain
    plain = cases["test_plain"]["stages"]["export"]["message"]
    assert "make it a @dataclass" in plain and "torch.export.register_dataclass(Plain, " in plain
    assert "torch.utils._pytree.register_dataclass(Plain, field_names=['a']" in plain, plain
    serde = cases["test_named"]["stages"]["serde"]
    assert serde["status"] == "failed" and serde["signature"] == "save"
    assert 'torch.export.register_dataclass(Named, serialized_type_name="test_dc.Named")' in serde["message"]


# ---- the module itself, and the probes ----------------------------------------------------------------------

class Pick(torch.nn.Module):
    """Fixed indices: eager itself raises at b=2 (index 2 is out of range)."""

    def forward(self, x):
        return x.index_select(0, torch.tensor([0, 2])) * 2  # the probe's line


def test_eager_raising_in_a_probe_names_the_models_line():
    res = pytest_export.check(Pick(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=16)}},
                              examples=10)
    guards = res.stages["guards"]
    assert guards.data["signature"] == "eager-raised-in-range"
    assert re.search(r"\(at (tests/)?test_frames\.py:\d+ in forward\)", guards.message), guards.message


def test_frames_of_a_raise_inside_torch():
    def model_code(x):
        return torch.nn.functional.linear(x, torch.ones(2, 5))

    try:
        model_code(torch.ones(3))
    except RuntimeError as exc:
        caught = exc
    outer, frame = frames.model_frames(caught)  # this test's frame (where it was caught), then the model's
    assert outer.name == "test_frames_of_a_raise_inside_torch" and frame.name == "model_code"
    assert frame.line.strip().startswith("return torch.nn.functional.linear")
    assert frames.where(caught).endswith(f"test_frames.py:{frame.lineno} in model_code")
    assert frames.frames_data(caught)["frames"][-1] == frames.where(caught)
    assert frames.located("msg", caught).startswith("msg\nin the model (most recent call last):\n")


def test_no_model_frame_leaves_the_message_alone():
    exc = ValueError("nothing of the model")
    assert frames.model_frames(exc) == [] and frames.frames_data(exc) == {} and frames.located("m", exc) == "m"
    assert frames.kind_of(torch.__file__) == "torch" and frames.kind_of(frames.__file__) == "harness"
    assert frames.kind_of(traceback.__file__) == "stdlib" and frames.kind_of("<string>") == "stdlib"
    assert frames.kind_of(pytest.__file__) in ("pytest", "_pytest")


def test_the_class_hint_for_inputs_too():
    @dataclasses.dataclass
    class In:
        a: torch.Tensor

    exc = ValueError("Unsupported input type <class 'x.In'>. Export only supports pytree containers")
    hint = frames.class_hint(exc, None, ((In(torch.ones(1)),), {}))
    assert "torch.export.register_dataclass(" in hint and "In" in hint and hint.count("\nhint:") == 1
    assert frames.class_hint(ValueError("unrelated"), None, ((In(torch.ones(1)),), {})) == ""
