"""A report a user hands the commands is checked once, against one schema, where it is read: a hand-edited field
is a message naming the file, the case, the field and the fix, with exit status 4, never a traceback; a key the
schema does not name is left alone. The reports are real ones, from a pytester run, mutated by Hypothesis."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_export.__main__ import USAGE_ERROR, main
from tests.helpers import LIN, SHORTCUT, run_check, write_cases

CASES = LIN + SHORTCUT + '''
@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=2, max=8)}}, tags=["vision"], examples=2)
def test_lin():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(2, 3),)

@pytest.mark.exportable
def test_short():
    return Shortcut(), (torch.ones(3),)

@pytest.mark.exportable
def test_err():
    raise RuntimeError("boom")
'''


_MADE: dict[str, str] = {}  # the real report, made by the first test that asks for it (one pytester run)


@pytest.fixture
def real(pytester) -> tuple[Path, dict[str, Any]]:
    """A real report of three cases (a dynamic one that passes, with tags and declared ranges; a new failure,
    judged against the baseline beside it; an error) as ``report.json``, and an empty baseline beside it."""
    (pytester.path / "baseline.json").write_text(json.dumps({"version": 2, "failures": {}, "non_core_ops": {}}))
    if "report" not in _MADE:
        write_cases(pytester, CASES)
        _, data = run_check(pytester, "-p", "no:xdist", "--export-baseline", "baseline.json")
        assert {c["nodeid"].split("::")[-1] for c in data["cases"]} == {"test_lin", "test_short", "test_err"}
        assert any((c.get("ranges") or {}).get("dims") for c in data["cases"])
        assert any(c.get("baseline") for c in data["cases"])
        _MADE["report"] = (pytester.path / "report.json").read_text()
    (pytester.path / "report.json").write_text(_MADE["report"])
    return pytester.path, json.loads(_MADE["report"])


def commands(folder: Path, path: Path) -> dict[str, list[str]]:
    good, base = str(folder / "report.json"), str(folder / "baseline.json")
    return {"show": ["show", str(path)], "show --markdown": ["show", "--markdown", str(path)],
            "diff": ["diff", good, str(path)], "diff (before)": ["diff", str(path), good],
            "merge": ["merge", "-o", str(folder / "merged.json"), good, str(path)],
            "gate": ["gate", str(path), "--baseline", base, "--markdown", str(folder / "gate.md")],
            "durations": ["durations", str(path), "-o", str(folder / "durations.json")]}


def run(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in this process: its exit status (returned or raised) and what it wrote to stderr. Any
    other exception propagates: a traceback is the failure these tests look for."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code
    return status, err.getvalue()


def paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON value (object keys and list items), the value itself first."""
    out = [at]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, v in items:
        out += paths(v, (*at, key))
    return out


def objects(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's objects with named fields: the report, its coverage and scope, each case, its stages, its
    ranges and their rows, its baseline verdict."""
    out = [report, *(report[k] for k in ("coverage", "scope") if isinstance(report.get(k), dict))]
    for case in (c for c in report.get("cases", []) if isinstance(c, dict)):
        out.append(case)
        out += [s for s in (case.get("stages") or {}).values() if isinstance(s, dict)]
        ranges = case.get("ranges")
        if isinstance(ranges, dict):
            out += [ranges, *(r for r in ranges.get("dims") or () if isinstance(r, dict))]
        out += [case["baseline"]] if isinstance(case.get("baseline"), dict) else []
    return out


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=3), st.just([]), st.just({}), st.just([[]]), st.just([{}]), st.just({"a": 5}),
                 st.lists(st.integers(0, 3), max_size=2))


@st.composite
def mutated(draw, report: dict[str, Any], extra_only: bool = False) -> dict[str, Any]:
    """``report`` with one to three changes: a value replaced by one of another type, a key deleted, a list or
    object emptied or given an empty row, or (``extra_only``) an unknown key added to an object."""
    out = copy.deepcopy(report)
    for _ in range(draw(st.integers(1, 3))):
        places = [p for p in paths(out) if p]
        path = draw(st.sampled_from(places))
        parent = out
        for key in path[:-1]:
            parent = parent[key]
        owner = parent if isinstance(parent, dict) else None
        ops = ["extra"] if extra_only else ["replace", "delete", "empty", "empty row", "extra"]
        op = draw(st.sampled_from(ops))
        if op == "extra":  # a field of a later version, in one of the report's objects (not in a map of them)
            target = draw(st.sampled_from(objects(out)))
            target[draw(st.sampled_from(["x_future", "note", "zz"]))] = copy.deepcopy(draw(JUNK))
        elif op == "replace":
            parent[path[-1]] = copy.deepcopy(draw(JUNK))
        elif op == "delete" and owner is not None:
            del owner[path[-1]]
        elif op == "empty":
            value = parent[path[-1]]
            parent[path[-1]] = type(value)() if isinstance(value, (list, dict, str)) else None
        elif op == "empty row" and isinstance(parent[path[-1]], list):
            parent[path[-1]].append(draw(st.sampled_from([[], {}, None, ""])))
    return out


def test_every_command_on_a_mutated_real_report_succeeds_or_names_the_problem(real):
    """Whatever is changed in a real report, every command ends normally (0 or 1) or exits with the usage
    error's status 4 and one message naming the file: never a traceback."""
    folder, data = real
    path = folder / "mutated.json"

    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(mutated(data))
    def check(report):
        path.write_text(json.dumps(report))
        for name, argv in commands(folder, path).items():
            status, err = run(argv)
            assert status in (0, 1, USAGE_ERROR), (name, status, err)
            if status == USAGE_ERROR:
                assert err.startswith(f"pytest-export: {path}: ") and err.count("\n") == 1, (name, err)

    check()


def test_unknown_keys_are_read_as_if_absent(real):
    """Forward compatibility: a key no command reads (a field of a later version) changes no exit status."""
    folder, data = real
    path = folder / "extra.json"
    path.write_text(json.dumps(data))
    before = {name: run(argv)[0] for name, argv in commands(folder, path).items()}
    assert USAGE_ERROR not in before.values(), before

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(mutated(data, extra_only=True))
    def check(report):
        path.write_text(json.dumps(report))
        assert {name: run(argv)[0] for name, argv in commands(folder, path).items()} == before

    check()


def _lin(data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return next((i, c) for i, c in enumerate(data["cases"]) if c["nodeid"].endswith("::test_lin"))


@pytest.mark.parametrize("edit, field, expected", [
    (lambda r, c: r.update(coverage="x"), "coverage", 'expected an object or null, got "x"'),
    (lambda r, c: r.update(torch=5), "torch", "expected a string or null, got 5"),
    (lambda r, c: c.update(tags=5), "{case}: tags", "expected a list of strings, got 5"),
    (lambda r, c: c.update(error=5), "{case}: error", "expected a string, got 5"),
    (lambda r, c: c["ranges"]["dims"].insert(0, []), "{case}: ranges.dims[0]",
     'expected an object with "dim" and "declared", got []'),
    (lambda r, c: c["ranges"]["dims"][0].update(declared=[2]), "{case}: ranges.dims[0].declared",
     "expected a list of 2 integers or nulls, got [2]"),
    (lambda r, c: c["stages"]["export"].update(duration="x"), "{case}: stages.export.duration",
     'expected a number, got "x"'),
    (lambda r, c: c["stages"]["decomp"].pop("status"), "{case}: stages.decomp",
     'expected an object with a "status", got one without "status"'),
])
@pytest.mark.parametrize("command", ["show", "diff", "merge", "gate"])
def test_a_bad_field_is_named_with_its_case_and_its_fix(real, edit, field, expected, command):
    folder, data = real
    i, case = _lin(data)
    edit(data, case)
    path = folder / "edited.json"
    path.write_text(json.dumps(data))
    status, err = run(commands(folder, path)[command])
    where = field.format(case=f"cases[{i}] ({case['nodeid']})")
    assert (status, err) == (USAGE_ERROR, f"pytest-export: {path}: {where}: {expected}; correct the field by hand, "
                                          "or write the report again (pytest --export-check --export-report PATH)\n")
