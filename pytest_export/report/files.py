"""Every file this tool writes: the JSON report, its case lines, the coverage op table (JSON and Markdown), the
Markdown summary and the baseline. Always JSON (never pickle); whole files atomically (an interrupted write keeps
the old file), the case lines one flushed line at a time (a killed run keeps every case that finished).

The renderings come from ``summary``; this module only decides what goes where. Plain Python; no torch, no pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Mapping

from ..gate.scope import FROM_OUTSIDE, Scope, test_id
from ..util import plural
from . import schema, summary
from .schema import case_problem

if TYPE_CHECKING:
    from ..declare.options import SessionOptions
    from ..gate.baseline import Baseline

REPORT_VERSION = 1
COVERAGE_VERSION = 1


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # the temporary file is private (0600); the file it becomes gets what the user's umask gives (#17)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Strict JSON: Python writes ``inf``/``nan`` as ``Infinity``/``NaN`` by default, which ``jq``, browsers and
    most other parsers reject, so non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"`` and
    ``allow_nan=False`` makes a missed one an error here instead of a file nobody else can read."""
    text = json.dumps(strict_json(data), indent=2, sort_keys=False, default=_default, allow_nan=False)
    return write_text_atomic(path, text + "\n")


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its string (``"inf"``, ``"-inf"``, ``"nan"``) and sets
    as sorted lists, ready for ``json.dumps(..., allow_nan=False)``."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        try:
            items = sorted(obj)
        except TypeError:  # mixed types: still a stable order
            items = sorted(obj, key=repr)
        return [strict_json(v) for v in items]
    return obj


def _default(obj: Any) -> Any:
    return str(obj)  # anything else JSON does not know (a path, a dtype) is written as its text


def build_report(cases: list[dict[str, Any]], torch_version: str | None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"version": REPORT_VERSION, "torch": torch_version}
    data.update(extra)
    data["cases"] = sorted(cases, key=lambda c: c["nodeid"])
    return data


def session_report(cases: list[dict[str, Any]], session_data: Mapping[str, Any], torch_version: str | None,
                   unfinished: Iterable[str] | None = None, scope: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report of a run: its cases, the torch that ran them, the coverage they reach and what the run covered
    (``scope``: ``scope.Scope``'s JSON, which the merged gate reads). ``unfinished`` (the cases that were running)
    is given for a run stopped from outside: its report is ``interrupted`` and ``partial``."""
    interrupted = unfinished is not None
    data = build_report(cases, session_data.get("torch") or torch_version, interrupted=interrupted,
                        partial=interrupted, coverage=summary.coverage_summary(cases, session_data.get("core_ops")),
                        **({"scope": dict(scope)} if scope is not None else {}))
    if unfinished:
        data["unfinished"] = sorted(unfinished)
    return data


def write_session(options: SessionOptions, cases: list[dict[str, Any]], session_data: Mapping[str, Any],
                  torch_version: str | None, messages: Iterable[str] = (), environ: Mapping[str, str] = os.environ,
                  unfinished: Iterable[str] | None = None, scope: Mapping[str, Any] | None = None) -> list[str]:
    """The files a run asked for: ``--export-report``, ``--export-coverage`` and ``--export-summary-md`` (by
    default appended to ``$GITHUB_STEP_SUMMARY`` where that is set and there are cases). A file that cannot be
    written (a full disk, a permission changed during the run) leaves the others to be written: the lines that
    say so are returned, for the end of the terminal summary."""
    problems: list[str] = []

    def written(flag: str, path: str, write: Callable[[], Any]) -> None:
        try:
            write()
        except OSError as exc:
            problems.append(unwritten(flag, path, exc))

    if options.report:
        written("--export-report", options.report, lambda: write_json_atomic(
            options.report, session_report(cases, session_data, torch_version, unfinished, scope)))
    if options.coverage:
        written("--export-coverage", options.coverage, lambda: write_coverage(options.coverage, cases, session_data))
    md_path, append = options.summary_md, False
    if md_path is None and environ.get("GITHUB_STEP_SUMMARY"):
        md_path, append = environ["GITHUB_STEP_SUMMARY"], True
    if md_path and cases:
        written("--export-summary-md" if options.summary_md else "$GITHUB_STEP_SUMMARY", md_path, lambda: write_summary_md(
            md_path, session_report(cases, session_data, torch_version), messages, append=append))
    return problems


def unwritten(flag: str, path: str | os.PathLike, exc: OSError) -> str:
    """``--export-report out/r.json: not written (No space left on device)``."""
    return f"{flag} {path}: not written ({exc.strerror or exc})"


def write_coverage(path: str, cases: list[dict[str, Any]], session: Mapping[str, Any]) -> tuple[Path, Path]:
    """``--export-coverage PATH``: the op table as JSON at PATH and as Markdown at PATH with its suffix replaced by
    ``.md`` (``coverage.json`` -> ``coverage.md``; a PATH that is already ``.md`` gets ``.md.md``)."""
    cov = summary.coverage_summary(cases, session.get("core_ops"))
    data = {"version": COVERAGE_VERSION, "torch": session.get("torch"), "core_ops_total": cov.get("core_ops_total"),
            "core_ops_reached": cov["core_ops_reached"], "ops": summary.op_table(cases, session.get("op_facts") or {})}
    json_path = Path(path)
    md_path = json_path.with_suffix(".md")
    if md_path == json_path:
        md_path = json_path.with_name(json_path.name + ".md")
    write_json_atomic(json_path, data)
    write_text_atomic(md_path, summary.coverage_markdown(data))
    return json_path, md_path


def write_summary_md(path: str, report: dict[str, Any], messages: Iterable[str] = (), append: bool = False) -> None:
    text = summary.summary_markdown(report, messages)
    if append:  # $GITHUB_STEP_SUMMARY is shared by every step of the job: add, never replace
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    else:
        write_text_atomic(path, text)


def write_baseline(path: str, baseline: Baseline) -> Path:
    return write_text_atomic(path, baseline.dumps())


def read_report(path: str | os.PathLike) -> dict[str, Any]:
    """A report file's JSON; ValueError naming the file where it is no report (``load_report`` checks its fields)."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION or not isinstance(data.get("cases"), list):
        raise ValueError(f"{path}: not a pytest-export report (version {REPORT_VERSION} JSON with a 'cases' list)")
    return data


# ---- case lines (issue #23: a run stopped from outside keeps what it found) -------------------------------
def lines_path(report_path: str | os.PathLike) -> Path:
    """Where ``--export-report PATH`` writes its case lines: PATH with its suffix replaced by ``.jsonl``
    (``export-report.json`` -> ``export-report.jsonl``; a PATH that is already ``.jsonl`` gets ``.jsonl.jsonl``)."""
    path = Path(report_path)
    lines = path.with_suffix(".jsonl")
    return lines if lines != path else path.with_name(path.name + ".jsonl")


class CaseLines:
    """The run's results as they come, one JSON object a line (as pytest-reportlog writes its reports): a
    ``session-start`` header, then ``case-start``, ``case`` (the report's case dict) and ``case-end`` (the test's
    ``duration``) per case, and ``scope`` (what the run covered, #32) and ``session-finish`` at the end. Each line
    is flushed as it is written, so a run killed hard (SIGKILL, a CI job's timeout) leaves every case that
    finished; ``read_lines`` makes a report of them. A write that fails (a full disk) stops the lines, never the
    run: ``problem`` says why."""

    def __init__(self, path: str | os.PathLike, header: Mapping[str, Any]):
        self.path = Path(path)
        self.problem: str | None = None
        self.running: dict[str, None] = {}  # started, not ended: the cases running when a run is stopped
        self._fh: Any = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "w", encoding="utf-8")  # each run starts its lines afresh, as its report
        except OSError as exc:
            self.problem = f"{self.path}: cannot be written ({exc.strerror or exc})"
        self.write("session-start", version=REPORT_VERSION, **header)

    @classmethod
    def for_session(cls, options: SessionOptions, args: Iterable[str]) -> CaseLines:
        """The lines of a run with ``--export-report``, beside its report, headed by its torch (the installed one,
        read without importing it), start time, command line and options."""
        return cls(lines_path(options.report or ""), {
            "torch": torch_version_unimported(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "args": list(args), "options": dataclasses.asdict(options)})

    def write(self, kind: str, **fields: Any) -> None:
        if self._fh is None:
            return
        try:
            self._fh.write(json.dumps(strict_json({"kind": kind, **fields}), default=_default, allow_nan=False) + "\n")
            self._fh.flush()  # in the OS's hands now: a killed process loses nothing it wrote (no fsync needed)
        except OSError as exc:
            self.problem = f"{self.path}: stopped writing ({exc.strerror or exc})"
            self.close()

    def start(self, nodeid: str) -> None:
        self.running[nodeid] = None
        self.write("case-start", nodeid=nodeid)

    def end(self, nodeid: str, duration: float | None) -> None:
        """The end of a test that started (``duration``: its setup, call and teardown, as the report counts it)."""
        if self.running.pop(nodeid, 1) is None:
            self.write("case-end", nodeid=nodeid, duration=None if duration is None else round(duration, 6))

    def unfinished(self, cases: Collection[str]) -> list[str]:
        """The tests that started and neither ended nor reported a case."""
        return [n for n in self.running if n not in cases]

    def case(self, case: dict[str, Any], marks: Mapping[str, dict[str, bool]]) -> None:
        """A case's line, with pytest's xfail mark on its test (``marks``: by test id) where one is in force: the
        lines of a run stopped before its scope line still apply it (#32)."""
        mark = marks.get(test_id(case["nodeid"]))
        self.write("case", case=case, **({"xfail": dict(mark)} if mark else {}))

    def close(self, scope: Scope | None = None, **finish: Any) -> None:
        """``finish``: the ``session-finish`` line's fields (none: close without one, as a killed run does), after a
        ``scope`` line with what the run covered (its report's ``scope``, #32)."""
        if scope is not None:
            self.write("scope", scope=scope.to_json())
        if finish:
            self.write("session-finish", **finish)
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


def torch_version_unimported() -> str | None:
    """The installed torch's version, without importing it (an xdist controller has no other need of torch)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def read_lines(path: str | os.PathLike) -> tuple[dict[str, Any], list[str]]:
    """The report that a run's case lines make, and notes on the lines skipped (a line cut off mid-write by a
    killed run): ``partial`` unless the run wrote its ``session-finish`` line and was not interrupted, with the
    cases that were running when it stopped as ``unfinished``, and the run's ``scope`` from its ``scope`` line (or,
    where it has none, the cases' xfail marks: nothing is gone). ValueError where the file is not case lines."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        raw = fh.read().split("\n")
    header: dict[str, Any] | None = None
    finish: dict[str, Any] | None = None
    scope: dict[str, Any] | None = None
    marks: dict[str, dict[str, bool]] = {}
    cases: dict[str, dict[str, Any]] = {}
    started: dict[str, None] = {}
    ended: dict[str, Any] = {}
    notes: list[str] = []
    last = max((i for i, line in enumerate(raw) if line.strip()), default=-1)
    for i, line in enumerate(raw):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        kind = record.get("kind") if isinstance(record, dict) else None
        if header is None and kind != "session-start":
            break
        case = record.get("case") if kind == "case" else None
        if (kind == "case" and (case_problem(case) or not isinstance(record.get("xfail", {}), dict))
                or kind == "scope" and _scope_problem(record.get("scope"))):
            kind = None
        if kind is None or (kind in ("case-start", "case-end") and not isinstance(record.get("nodeid"), str)):
            cut = " (the last line, cut off: the run was killed while writing it)" if i == last else ""
            notes.append(f"{path}:{i + 1}: skipped a line that is not a whole case line{cut}")
        elif kind == "session-start":
            header = record
        elif kind == "case":
            cases[case["nodeid"]] = case
            if record.get("xfail"):
                marks[test_id(case["nodeid"])] = record["xfail"]
        elif kind == "scope":
            scope = record["scope"]
        elif kind == "case-start":
            started[record["nodeid"]] = None
        elif kind == "case-end":
            ended[record["nodeid"]] = record.get("duration")
        elif kind == "session-finish":
            finish = record
    if header is None or header.get("version") != REPORT_VERSION:
        raise ValueError(f"{path}: not pytest-export case lines (its first line must be a version "
                         f"{REPORT_VERSION} session-start record, as --export-report writes beside its report)")
    for nodeid, seconds in ended.items():
        if nodeid in cases and isinstance(seconds, (int, float)):
            cases[nodeid]["duration"] = seconds
    interrupted = bool(finish.get("interrupted")) if finish else None
    if scope is None and marks:  # a run stopped before its scope line: its cases' xfail marks, and nothing is gone
        scope = Scope(folders=None, xfail=marks).to_json()
    data = build_report(list(cases.values()), header.get("torch"), partial=finish is None or bool(interrupted),
                        coverage=summary.coverage_summary(list(cases.values()), None),
                        **({"scope": scope} if scope is not None else {}))
    if interrupted is not None:
        data["interrupted"] = interrupted
    unfinished = [n for n in started if n not in ended and n not in cases]
    if data["partial"] and unfinished:
        data["unfinished"] = unfinished
    return data, notes


def _scope_problem(data: Any) -> str | None:
    try:
        Scope.from_json(data)
    except ValueError as exc:
        return str(exc)
    return None


def load_report(path: str | os.PathLike) -> tuple[dict[str, Any], list[str]]:
    """A report (``read_report``), or the report a ``.jsonl`` file of case lines makes (``read_lines``), with the
    notes on what was skipped: the one way the commands read a report. Its fields are checked here, once, against
    ``schema``: ValueError naming the file, the case, the field and the fix where one is not what they read."""
    data, notes = read_lines(path) if Path(path).suffix == ".jsonl" else (read_report(path), [])
    problem = schema.report_problem(data)
    if problem:
        raise ValueError(f"{path}: {problem}; {schema.FIX}")
    return data, notes


def partial_text(report: Mapping[str, Any], name: str | None = None) -> str | None:
    """The line that says a report is partial (a run stopped from outside, a merge of one, or a merge short of a
    pytest-split group), or None."""
    if not (report.get("partial") or report.get("interrupted")):
        return None
    scope = Scope.from_json(report["scope"]) if isinstance(report.get("scope"), dict) else Scope()
    missing = ", ".join(str(g) for g in scope.missing_groups)
    stop = scope.stopped if scope.stopped != FROM_OUTSIDE else None  # a report of 0.1 called any stop that (#32)
    why = (f"the run stopped early ({stop})" if report.get("interrupted") and stop else
           "the run was interrupted (Ctrl-C or SIGTERM)" if report.get("interrupted") else
           f"no finished report of pytest-split group {missing} of {scope.split['splits']}" if missing else
           "the run did not finish")
    text = f"partial report: {f'{name}: ' if name else ''}{why}; {plural(len(report['cases']), 'case')} recorded"
    if report.get("unfinished"):
        text += f"; it stopped while running {', '.join(report['unfinished'])}"
    return text


__all__ = ["write_text_atomic", "write_json_atomic", "strict_json", "build_report", "session_report", "read_report",
           "write_session", "unwritten", "write_coverage", "write_summary_md", "write_baseline", "REPORT_VERSION", "lines_path",
           "CaseLines", "read_lines", "load_report", "partial_text", "case_problem"]
