"""Every file this tool writes: the JSON report, the coverage op table (JSON and Markdown), the Markdown summary
and the baseline. Always JSON (never pickle), always atomically (an interrupted write keeps the old file).

The renderings come from ``summary``; this module only decides what goes where. Plain Python; no torch, no pytest.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from . import summary

if TYPE_CHECKING:
    from .baseline import Baseline
    from .options import SessionOptions

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
                   ) -> dict[str, Any]:
    """The report of a run: its cases, the torch that ran them and the coverage they reach."""
    return build_report(cases, session_data.get("torch") or torch_version,
                        coverage=summary.coverage_summary(cases, session_data.get("core_ops")))


def write_session(options: SessionOptions, cases: list[dict[str, Any]], session_data: Mapping[str, Any],
                  torch_version: str | None, messages: Iterable[str] = (), environ: Mapping[str, str] = os.environ,
                  ) -> None:
    """The files a run asked for: ``--export-report``, ``--export-coverage`` and ``--export-summary-md`` (by
    default appended to ``$GITHUB_STEP_SUMMARY`` where that is set and there are cases)."""
    if options.report:
        write_json_atomic(options.report, session_report(cases, session_data, torch_version))
    if options.coverage:
        write_coverage(options.coverage, cases, session_data)
    md_path, append = options.summary_md, False
    if md_path is None and environ.get("GITHUB_STEP_SUMMARY"):
        md_path, append = environ["GITHUB_STEP_SUMMARY"], True
    if md_path and cases:
        write_summary_md(md_path, session_report(cases, session_data, torch_version), messages, append=append)


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
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION or not isinstance(data.get("cases"), list):
        raise ValueError(f"{path}: not a pytest-export report (version {REPORT_VERSION} JSON with a 'cases' list)")
    return data


__all__ = ["write_text_atomic", "write_json_atomic", "strict_json", "build_report", "session_report", "read_report",
           "write_session", "write_coverage", "write_summary_md", "write_baseline", "REPORT_VERSION"]
