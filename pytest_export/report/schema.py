"""The report's schema: every field ``python -m pytest_export`` (``show``, ``diff``, ``merge``, ``gate``,
``durations``) reads from a report, with its type, checked once where a report file is read (``files.load_report``)
so that a hand-edited or truncated report is a message naming the file, the case, the field and the fix, never a
traceback from deep inside a command.

Only the fields some command reads are described; a key the schema does not name (a field of a newer version, a
stage's own data) is allowed and left alone, so that a report of a later pytest-export is still read. A field
may be absent wherever the commands read it with a default; ``nodeid`` of a case and ``status`` of a stage are
required. Plain Python; no torch, no pytest.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

from ..gate.scope import Scope

FIX = "correct the field by hand, or write the report again (pytest --export-check --export-report PATH)"
NON_FINITE = ("inf", "-inf", "nan")  # how the strict JSON report writes a non-finite float


class Problem(ValueError):
    """A field of a report that is not what the commands read: ``where`` (``ranges.dims[0]``) and why."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}" if where else why)
        self.where, self.why = where, why


class Spec:
    """What a field must be: ``text`` says it in a message (``a list of strings``); ``check`` raises ``Problem``."""

    text = "anything"

    def check(self, value: Any, where: str) -> None:
        if not self.accepts(value):
            raise Problem(where, f"expected {self.text}, got {shown(value)}")

    def accepts(self, value: Any) -> bool:
        return True


class Kind(Spec):
    def __init__(self, text: str, test: Callable[[Any], bool]):
        self.text, self.accepts = text, test  # type: ignore[method-assign]


class Nullable(Spec):
    def __init__(self, inner: Spec):
        self.inner, self.text = inner, f"{inner.text} or null"

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            try:
                self.inner.check(value, where)
            except Problem as exc:
                if exc.where != where:  # a problem inside it: name that
                    raise
                raise Problem(where, f"expected {self.text}, got {shown(value)}") from None


class ListOf(Spec):
    def __init__(self, item: Spec, length: int | None = None):
        self.item, self.length = item, length
        self.text = (f"a list of {length} " if length else "a list of ") + _plural(item.text)

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list) or (self.length is not None and len(value) != self.length):
            raise Problem(where, f"expected {self.text}, got {shown(value)}")
        for i, v in enumerate(value):
            self.item.check(v, f"{where}[{i}]")


class MapOf(Spec):
    def __init__(self, item: Spec):
        self.item, self.text = item, f"an object of {_plural(item.text)}"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Problem(where, f"expected {self.text}, got {shown(value)}")
        for k, v in value.items():
            self.item.check(v, field(where, k))


class Obj(Spec):
    """An object with these fields (``required``: those it must have); other keys are allowed."""

    def __init__(self, text: str, fields: Mapping[str, Spec], required: tuple[str, ...] = ()):
        self.text, self.fields, self.required = text, dict(fields), required

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise Problem(where, f"expected {self.text}, got {shown(value)}")
        for key in self.required:
            if key not in value:
                raise Problem(where, f"expected {self.text}, got one without {json.dumps(key)}")
        for key, spec in self.fields.items():
            if key in value:
                spec.check(value[key], field(where, key))


def field(where: str, key: Any) -> str:
    """``ranges.dims``; a key that is no name is quoted: ``coverage.non_core["aten.add.Tensor"]``."""
    name = str(key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return f"{where}.{name}" if where else name
    return f"{where}[{json.dumps(name)}]"


def shown(value: Any) -> str:
    """A value as a message shows it: its JSON, cut to 60 characters."""
    try:
        text = json.dumps(value, default=str)
    except ValueError:  # a NaN a JSON parser let through
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _plural(text: str) -> str:
    for a in ("a ", "an "):
        if text.startswith(a):
            text = text[len(a):]
    return {"string": "strings", "integer": "integers", "number": "numbers", "boolean": "booleans",
            "string or null": "strings or nulls", "integer or null": "integers or nulls"}.get(text, f"({text})")


STR = Kind("a string", lambda v: isinstance(v, str))
BOOL = Kind("a boolean", lambda v: isinstance(v, bool))
INT = Kind("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
NUM = Kind("a number", lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in NON_FINITE)
STRS = ListOf(STR)

STAGE = Obj('an object with a "status"', {
    "status": STR, "message": STR, "duration": NUM, "signature": Nullable(STR), "detail": Nullable(STR),
    "exception": Nullable(STR),
    # the decomp stage's ops (the coverage lines, the conformance table, the baseline's non-core ops)
    "ops_before": STRS, "ops_after": STRS, "non_core": STRS,
}, required=("status",))

DIM_ROW = Obj('an object with "dim" and "declared"', {
    "dim": STR, "declared": ListOf(Nullable(INT), 2), "shape_max": Nullable(INT), "numeric_max": Nullable(INT),
    "why": STR,
}, required=("dim", "declared"))

RANGES = Obj("an object", {
    "dims": ListOf(DIM_ROW),
    "guards": Nullable(Obj("an object", {"proved": BOOL, "line": STR})),
})

VERDICT = Obj("an object", {"new": MapOf(STR), "known": MapOf(STR), "stale": MapOf(STR), "new_non_core": STRS,
                            "refresh": MapOf(STR)})

# one declared axis, declared vs achieved (the audit's row; the failure text's table reads every field)
SIZE = Kind("a string or an integer", lambda v: isinstance(v, (str, int)) and not isinstance(v, bool))
RANGE = ListOf(Nullable(INT), 2)
SHAPE_ROW = Obj('an object with "input", "axis", "declared", "declared_range", "achieved", "achieved_range" and '
                '"status"', {
                    "input": STR, "axis": Nullable(INT), "declared": STR, "declared_range": RANGE, "achieved": SIZE,
                    "achieved_range": Nullable(RANGE), "status": STR, "refused_at": Nullable(INT),
                    "refused_where": STR, "equal_to": STRS, "note": STR,
                }, required=("input", "axis", "declared", "declared_range", "achieved", "achieved_range", "status"))

CASE = Obj('an object with a "nodeid"', {
    "nodeid": STR, "outcome": STR, "stages": MapOf(STAGE), "error": STR, "tags": STRS, "warnings": STRS,
    "item": STR, "verdict": STR, "duration": Nullable(NUM), "raise_on_failure": BOOL, "baseline": VERDICT,
    "ranges": Nullable(RANGES), "torch_output": STRS, "repro": STR, "shapes": ListOf(SHAPE_ROW),
}, required=("nodeid",))


COVERAGE = Obj("an object", {"core_ops_total": Nullable(INT), "core_ops_reached": STRS, "non_core": MapOf(STRS)})

REPORT = Obj("an object", {
    "torch": Nullable(STR), "interrupted": BOOL, "partial": BOOL, "unfinished": STRS,
    "coverage": Nullable(COVERAGE),
})


def case_problem(case: Any) -> str | None:
    """What makes ``case`` no case the commands can read (``stages.export: expected ..., got ...``), or None."""
    try:
        CASE.check(case, "")
    except Problem as exc:
        return str(exc)
    return None


def report_problem(data: Any) -> str | None:
    """What makes ``data`` no report the commands can read, naming the case (``cases[3] (t.py::a): ...``) and the
    field, or None. The version and the ``cases`` list are ``files.read_report``'s to check."""
    try:
        REPORT.check(data, "")
        if "scope" in data:
            Scope.from_json(data["scope"])  # the run's scope reads itself, naming its field
    except ValueError as exc:
        return str(exc)
    for i, case in enumerate(data["cases"]):
        problem = case_problem(case)
        if problem:
            name = f" ({case['nodeid']})" if isinstance(case, dict) and isinstance(case.get("nodeid"), str) else ""
            return f"cases[{i}]{name}: {problem}"
    return None


__all__ = ["case_problem", "report_problem", "Problem", "FIX", "CASE", "REPORT", "STAGE", "field", "shown"]
