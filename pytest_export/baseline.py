"""The CI ratchet: a committed file of known failures (one entry per case and stage, with a reason) and of the
ops outside Core ATen that survive decomposition (with the cases that carry them).

A failure not in the baseline fails the run; a baseline entry that now passes is stale and fails it too.
``--export-baseline-update`` rewrites the file, pruning entries of cases that did not run only inside the
part of the suite that ran whole (a ``-k`` or single-file run prunes nothing).

Plain Python over the report's case dicts; no torch, no pytest.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable

from .options import UsageError

BASELINE_VERSION = 1
CASE_STAGE = "case"  # the entry of a case that failed before any stage ran (build error, crashed worker)
FAILING = ("failed", "error")


@dataclasses.dataclass
class Baseline:
    failures: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    non_core_ops: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": BASELINE_VERSION,
            "failures": {n: dict(sorted(s.items())) for n, s in sorted(self.failures.items()) if s},
            "non_core_ops": {op: sorted(set(c)) for op, c in sorted(self.non_core_ops.items()) if c},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def load(path: str | os.PathLike, *, missing_ok: bool = False) -> Baseline:
    """Read a baseline file; a malformed one raises UsageError naming the file, the key and the fix."""
    if not os.path.exists(path):
        if missing_ok:
            return Baseline()
        raise UsageError(f"--export-baseline {path}: no such file; create it with --export-baseline-update")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--export-baseline {path}: not readable JSON ({exc}); "
                         "fix it or recreate it with --export-baseline-update")
    where = f"--export-baseline {path}"
    if not isinstance(data, dict) or data.get("version") != BASELINE_VERSION:
        raise UsageError(f"{where}: expected a JSON object with \"version\": {BASELINE_VERSION}; "
                         "recreate it with --export-baseline-update")
    failures = data.get("failures", {})
    if not isinstance(failures, dict):
        raise UsageError(f"{where}: \"failures\" must map a test id to {{stage: reason}}")
    for nodeid, stages in failures.items():
        if not isinstance(stages, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in stages.items()):
            raise UsageError(f"{where}: failures[{nodeid!r}] must be a {{stage: reason}} object of strings")
    ops = data.get("non_core_ops", {})
    if not isinstance(ops, dict) or not all(isinstance(v, list) for v in ops.values()):
        raise UsageError(f"{where}: \"non_core_ops\" must map an op name to the list of test ids that carry it")
    return Baseline({n: dict(s) for n, s in failures.items()}, {op: list(c) for op, c in ops.items()})


def _reason(text: str) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def failures_of(case: dict[str, Any]) -> dict[str, str]:
    """{stage: reason} for the stages of a case that failed (a case error without stages is stage ``case``)."""
    out = {name: _reason(s.get("message", "")) or s["status"]
           for name, s in case.get("stages", {}).items() if s.get("status") in FAILING}
    if case.get("outcome") == "error" and not out:
        out[CASE_STAGE] = _reason(case.get("error", "")) or "error"
    return out


def non_core_of(case: dict[str, Any]) -> list[str]:
    return list((case.get("stages", {}).get("decomp") or {}).get("non_core") or [])


def judge(case: dict[str, Any], baseline: Baseline) -> dict[str, Any]:
    """One case against the baseline: ``new`` and ``known`` failures, ``stale`` entries, ``new_non_core`` ops."""
    nodeid = case["nodeid"]
    expected = baseline.failures.get(nodeid, {})
    now = failures_of(case)
    statuses = {n: s.get("status") for n, s in case.get("stages", {}).items()}
    verdict: dict[str, Any] = {
        "new": {s: r for s, r in now.items() if s not in expected},
        "known": {s: expected[s] for s in now if s in expected},
        # stale only where the stage ran and passed: a stage skipped behind a failure says nothing
        "stale": {s: r for s, r in expected.items()
                  if statuses.get(s) == "passed" or (s == CASE_STAGE and case.get("outcome") != "error")},
        "new_non_core": [op for op in non_core_of(case) if op not in baseline.non_core_ops],
    }
    return {k: v for k, v in verdict.items() if v}


def in_scope(nodeid: str, scope: Iterable[str] | None) -> bool:
    """Whether a case lies in the part of the suite that ran whole (``scope``: rootdir-relative folders)."""
    if scope is None:
        return False
    path = nodeid.split("::")[0]
    return any(d in ("", ".") or path == d or path.startswith(d.rstrip("/") + "/") for d in scope)


def session_stale(baseline: Baseline, cases: Iterable[dict[str, Any]], scope: list[str] | None) -> list[str]:
    """Entries no case of this run can confirm although their whole part of the suite ran: cases that are gone,
    and non-core ops no case carries any more."""
    cases = list(cases)
    ran = {c["nodeid"] for c in cases}
    out = [f"{nodeid} [{', '.join(sorted(stages))}]: the case did not run (removed or renamed?)"
           for nodeid, stages in sorted(baseline.failures.items()) if nodeid not in ran and in_scope(nodeid, scope)]
    carried = {op for c in cases for op in non_core_of(c)}
    for op, owners in sorted(baseline.non_core_ops.items()):
        if op not in carried and owners and all(in_scope(n, scope) or n in ran for n in owners):
            out.append(f"non-core op {op}: no case carries it after decomposition any more")
    return out


def updated(baseline: Baseline, cases: Iterable[dict[str, Any]], scope: list[str] | None) -> Baseline:
    """The baseline this run implies: cases that ran get their current failures; cases that did not run keep
    their entries unless they lie in the part of the suite that ran whole."""
    cases = list(cases)
    ran = {c["nodeid"] for c in cases}
    new = Baseline()
    for nodeid, stages in baseline.failures.items():
        if nodeid not in ran and not in_scope(nodeid, scope):
            new.failures[nodeid] = dict(stages)
    for c in cases:
        f = failures_of(c)
        if f:
            new.failures[c["nodeid"]] = f
    for op, owners in baseline.non_core_ops.items():
        kept = [n for n in owners if n not in ran and not in_scope(n, scope)]
        if kept:
            new.non_core_ops[op] = kept
    for c in cases:
        for op in non_core_of(c):
            new.non_core_ops.setdefault(op, []).append(c["nodeid"])
    return new


__all__ = ["Baseline", "load", "judge", "failures_of", "session_stale", "updated", "in_scope", "CASE_STAGE"]
