"""Failure injection: bad declarations, raising factories, hangs, interrupted writes, the user's module."""

from __future__ import annotations

import ast
import copy
import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest_export
from pytest_export.declare.options import KEYWORDS, UsageError, validate_keywords
from pytest_export.report.files import read_report, write_json_atomic
from tests.helpers import HANGS, cases_by_name, run_check, statuses, write_cases

# ---- malformed declarations ---------------------------------------------------------------

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_keys = st.sampled_from(sorted(KEYWORDS)) | st.text(min_size=1, max_size=12)


@given(st.dictionaries(_keys, _values, min_size=1, max_size=3))
def test_validation_accepts_or_names_the_key(kwargs):
    try:
        validate_keywords("case.py::test_x", (), kwargs)
    except UsageError as exc:
        msg = str(exc)
        assert msg.startswith("case.py::test_x: ")
        assert any(repr(k) in msg for k in kwargs), msg
        assert "exportable" in msg


_bad_marks = st.one_of(
    st.builds(lambda k, v: f"{k}={v!r}", st.sampled_from(["strict", "rtol", "atol", "core_aten", "examples", "seed"]),
              st.text(min_size=1, max_size=4)),
    st.builds(lambda k: f"{k}=1", st.from_regex(r"[a-z]{3,10}", fullmatch=True).filter(lambda k: k not in KEYWORDS)),
    st.builds(lambda s, r: f"xfail={{{s!r}: {r!r}}}", st.text(min_size=1, max_size=6).filter(lambda s: s not in pytest_export.STAGES),
              st.text(min_size=1, max_size=4)),
    st.builds(lambda v: f"dynamic_shapes={v!r}", st.integers() | st.text(max_size=4) | st.floats(allow_nan=False, allow_infinity=False)),  # repr(inf) is no Python literal
)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_bad_marks, min_size=1, max_size=4, unique=True))
def test_bad_markers_fail_their_own_item_and_the_session_goes_on(pytester, marks):
    body = "class M(torch.nn.Module):\n    def forward(self, x):\n        return x * 3\n\n"
    for i, mark in enumerate(marks):
        body += f"@pytest.mark.exportable({mark})\ndef test_bad_{i}():\n    return M(), (torch.ones(2),)\n\n"
    body += "@pytest.mark.exportable\ndef test_good():\n    return M(), (torch.ones(2),)\n"
    write_cases(pytester, body)
    result, data = run_check(pytester)
    result.assert_outcomes(passed=1, failed=len(marks))
    out = result.stdout.str()
    assert "INTERNALERROR" not in out
    cases = cases_by_name(data)
    for i in range(len(marks)):
        assert cases[f"test_bad_{i}"]["outcome"] == "error"
        assert f"test_bad_{i}: " in cases[f"test_bad_{i}"]["error"]
    assert cases["test_good"]["outcome"] == "passed"


class _TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(0) + y.sum(0)


def _dims():
    bounds = st.tuples(st.integers(-2, 12), st.integers(-2, 12) | st.none())
    named = st.builds(lambda name, b: (name, b), st.sampled_from(["a", "b"]), bounds)
    return st.one_of(
        st.none(), st.just("STATIC"), st.just("AUTO"), st.just("DYNAMIC"), named,
        st.integers(-3, 9), st.text(max_size=3),
    )


def _to_dim(spec):
    from torch.export import Dim

    if spec in ("STATIC", "AUTO", "DYNAMIC"):
        return getattr(Dim, spec)
    if isinstance(spec, tuple):
        name, (lo, hi) = spec
        try:
            return Dim(name, min=lo, max=hi)
        except Exception:  # noqa: BLE001 - torch rejects the Dim itself: the user sees torch's error
            return None
    return spec


_shape_specs = st.dictionaries(st.integers(-3, 4), _dims(), max_size=3) | st.lists(_dims(), max_size=4) | _dims()
_declarations = st.dictionaries(st.sampled_from(["x", "y", "z"]), _shape_specs, max_size=3) | st.lists(_shape_specs, max_size=3)


def _materialize(value):
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_materialize(v) for v in value]
    return _to_dim(value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_declarations)
def test_malformed_dynamic_shapes_end_in_a_clear_message_on_the_case(declaration):
    ds = _materialize(declaration)
    try:
        res = pytest_export.check(_TwoInputs(), (torch.randn(4, 3), torch.randn(4, 3)), name="case.py::test_x",
                                  dynamic_shapes=ds, examples=3)
    except pytest_export.UsageError as exc:  # the marker's own validation (a dynamic_shapes of the wrong type)
        assert str(exc).startswith("case.py::test_x: "), exc
        return
    if res.error:  # a declaration that does not fit the case: the case's usage error, naming the key (#32)
        assert res.outcome == "error" and res.stages == {}, res.failure_text()
        assert res.error.startswith("case.py::test_x: dynamic_shapes"), res.error
        return
    export = res.stages["export"]
    if export.status == "failed":
        assert export.message.strip(), res.failure_text()
    assert res.outcome in ("passed", "failed"), res.failure_text()
    assert "error" not in {s.status for s in res.stages.values()}, res.failure_text()  # no harness crash


# ---- factories, eager, hangs ----------------------------------------------------------------

@pytest.mark.slow
def test_raising_factory_and_eager_are_not_export_failures(pytester):
    write_cases(pytester, '''
''' + HANGS + '''
class Boom(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("model bug")


@pytest.mark.exportable
def test_factory_raises():
    raise KeyError("no such checkpoint")

@pytest.mark.exportable
def test_eager_raises():
    return Boom(), (torch.ones(2),)

@pytest.mark.exportable
def test_hangs():
    return Hangs(), (torch.ones(2),)

@pytest.mark.exportable
def test_fine():
    return torch.nn.ReLU(), (torch.ones(2),)
''')
    result, data = run_check(pytester, "--export-timeout", "3")
    result.assert_outcomes(passed=1, failed=3)
    cases = cases_by_name(data)
    assert cases["test_factory_raises"]["outcome"] == "error"
    assert "KeyError" in cases["test_factory_raises"]["error"]
    eager = cases["test_eager_raises"]
    assert statuses(eager)["eager"] == "failed" and "not in export" in eager["stages"]["eager"]["message"]
    assert statuses(eager)["export"] == "skipped"
    hang = statuses(cases["test_hangs"])
    assert hang["export"] == "error" and hang["compare"] == "skipped", hang
    assert "timed out" in cases["test_hangs"]["stages"]["export"]["message"]
    assert cases["test_fine"]["outcome"] == "passed"


def test_timeout_option_is_validated(pytester):
    write_cases(pytester, "def test_x():\n    pass\n")
    result = pytester.runpytest("--export-check", "--export-timeout", "soon")
    result.stderr.fnmatch_lines(["*--export-timeout must be a positive number of seconds, got 'soon'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


# ---- files ------------------------------------------------------------------------------------

def test_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "report.json"
    write_json_atomic(path, {"version": 1, "cases": [], "torch": "old"})

    def crash(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic(path, {"version": 1, "cases": [{"nodeid": "x"}], "torch": "new"})
    assert json.loads(path.read_text())["torch"] == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_reports_are_json_only(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_bytes(b"\x80\x04K\x01.")  # a pickle
    with pytest.raises(ValueError):
        read_report(bad)


UNPICKLING = ("load", "loads", "Unpickler", "_Unpickler", "_load", "_loads")


def test_package_never_unpickles():
    root = Path(pytest_export.__file__).parent
    offenders = []
    for src in root.rglob("*.py"):
        tree = ast.parse(src.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in ("cPickle", "dill", "marshal", "shelve") for n in names):
                    offenders.append(f"{src.name}: imports {names}")
                if getattr(node, "module", None) == "pickle" and any(a.name in UNPICKLING for a in node.names):
                    offenders.append(f"{src.name}: imports {names}")
            # pickling is allowed (--export-repro's writer walks a module's classes with a Pickler); reading is not
            if isinstance(node, ast.Attribute) and node.attr in UNPICKLING and isinstance(node.value, ast.Name) \
                    and node.value.id == "pickle":
                offenders.append(f"{src.name}:{node.lineno}: pickle.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "load" and isinstance(node.value, ast.Name) \
                    and node.value.id == "torch":
                offenders.append(f"{src.name}:{node.lineno}: torch.load")
    assert not offenders, offenders


# ---- the user's module ------------------------------------------------------------------------

class Trainable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 4, 3)
        self.bn = torch.nn.BatchNorm1d(4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps.add_(1)
        return self.bn(self.conv(x)).relu()


@pytest.mark.parametrize("training", [True, False])
def test_module_unchanged_after_all_stages(training, tmp_path):
    torch.manual_seed(0)
    model = Trainable().train(training)
    before = copy.deepcopy(model.state_dict())
    grads = [p.requires_grad for p in model.parameters()]
    x = torch.randn(2, 3, 8)
    x_before = x.clone()
    result = pytest_export.check(model, (x,), workdir=tmp_path)
    assert result.outcome == "passed", result.failure_text()
    assert model.training is training
    assert [p.requires_grad for p in model.parameters()] == grads
    assert all(p.grad is None for p in model.parameters())
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert torch.equal(x, x_before)


def test_a_malformed_reproduce_blob_is_a_usage_error_naming_the_keyword():
    # issue #44: it was "the harness crashed (please report it)"
    import torch

    import pytest_export
    from pytest_export.declare.options import UsageError

    with pytest.raises(UsageError) as info:
        pytest_export.check(torch.nn.Linear(2, 2), (torch.randn(3, 2),), name="t.py::test_blob", reproduce="!!!")
    text = str(info.value)
    assert "t.py::test_blob" in text and "reproduce" in text and "`replay:` line (`reproduce=" in text, text
    # a blob fuzz printed, whole line or alone, is accepted
    from pytest_export.declare.options import validate_keywords

    for good in ("AEEAQSU=", "@reproduce_failure('6.1', b'AEEAQSU=')"):
        assert validate_keywords("t.py::test_blob", (), {"reproduce": good})["reproduce"] == good
