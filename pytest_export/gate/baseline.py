"""The CI ratchet: a committed file of known failures (one entry per case and stage, with a reason and the
failure's signature) and of the ops outside Core ATen that survive decomposition (with the cases that carry them).

A failure not in the baseline fails the run, and so does a listed stage that now fails differently (another
signature); a baseline entry that now passes is stale and fails the run too. Only ``failed`` stages are
baselined: an ``error`` (the harness could not decide: a timeout, a crashed worker, a case that could not be
built) is never recorded and never expected. ``--export-baseline-update`` rewrites the file, pruning the entries
of cases that are gone: cases the run had every chance to see and did not (``scope.Scope.covers``; a ``-k`` or
single-file run prunes nothing, nor does a skipped, deselected or ignored test).

Plain Python over the report's case dicts; no torch, no pytest.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable

from ..declare.options import ORDER, UsageError
from . import signature

if TYPE_CHECKING:
    from .scope import Scope

BASELINE_VERSION = 2  # written; version 1 ({stage: reason}, no signature) is still read
READABLE_VERSIONS = (1, 2)
# the entry of a case that failed before any stage ran, written by version 1. A case-level error is never
# recorded now (errors are never expected); a legacy entry is stale once the case runs without error, and
# --export-baseline-update drops it.
CASE_STAGE = "case"
BASELINED = ("failed",)  # `error` means undecided, not wrong: it is never a known failure
NON_CORE = "non_core"  # ``confirmed``'s name for the decomposition's list of non-core ops
SIGNATURE_LIMIT = 120

Entry = dict[str, str]  # {"reason": str, "signature": str}; no "signature": matches any failure of the stage


@dataclasses.dataclass
class Baseline:
    failures: dict[str, dict[str, Entry]] = dataclasses.field(default_factory=dict)
    non_core_ops: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": BASELINE_VERSION,
            "failures": {n: {s: _entry_json(e) for s, e in sorted(stages.items())}
                         for n, stages in sorted(self.failures.items()) if stages},
            "non_core_ops": {op: sorted(set(c)) for op, c in sorted(self.non_core_ops.items()) if c},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True, allow_nan=False) + "\n"


def _entry_json(entry: Entry | str) -> Entry:
    if isinstance(entry, str):  # a version-1 value handed in directly
        return {"reason": entry}
    out = {"reason": entry.get("reason", "")}
    if entry.get("signature"):
        out["signature"] = entry["signature"]
    return out


def load(path: str | os.PathLike, *, missing_ok: bool = False, option: str = "--export-baseline") -> Baseline:
    """Read a baseline file (version 1 or 2); a malformed one raises UsageError naming the file, the key and
    the fix (``option``: how the user named the file, ``--export-baseline`` or the gate command's ``--baseline``)."""
    where = f"{option} {path}"
    if not os.path.exists(path):
        if missing_ok:
            return Baseline()
        raise UsageError(f"{where}: no such file; create it with --export-baseline-update")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: not readable JSON ({exc}); fix it or recreate it with --export-baseline-update")
    if not isinstance(data, dict) or data.get("version") not in READABLE_VERSIONS:
        raise UsageError(f"{where}: expected a JSON object with \"version\": {BASELINE_VERSION} "
                         f"(or the older {READABLE_VERSIONS[0]}); recreate it with --export-baseline-update")
    version = data["version"]
    failures = data.get("failures", {})
    shape = "{stage: reason}" if version == 1 else '{stage: {"reason": str, "signature": str}}'
    if not isinstance(failures, dict):
        raise UsageError(f"{where}: \"failures\" must map a test id to {shape}")
    out: dict[str, dict[str, Entry]] = {}
    for nodeid, stages in failures.items():
        if not isinstance(stages, dict) or not all(isinstance(k, str) for k in stages):
            raise UsageError(f"{where}: failures[{nodeid!r}] must be a {shape} object; "
                             "fix it or recreate it with --export-baseline-update")
        out[nodeid] = {}
        for stage, value in stages.items():
            if stage not in ORDER and stage != CASE_STAGE:  # a hand-edited typo would never match (#24)
                close = difflib.get_close_matches(stage, ORDER, n=1)
                raise UsageError(f"{where}: failures[{nodeid!r}][{stage!r}]: no stage is called {stage!r}"
                                 + (f" (did you mean {close[0]!r}?)" if close else "")
                                 + f"; the stages are {', '.join(ORDER)}; fix the entry or recreate the "
                                 "file with --export-baseline-update")
            entry = _read_entry(value, version)
            if entry is None:
                raise UsageError(f"{where}: failures[{nodeid!r}][{stage!r}] must be "
                                 + ("a reason string" if version == 1 else
                                    'an object {"reason": str, "signature": str} ("signature" may be left out)')
                                 + "; fix it or recreate it with --export-baseline-update")
            out[nodeid][stage] = entry
    ops = data.get("non_core_ops", {})
    if not isinstance(ops, dict) or not all(isinstance(v, list) for v in ops.values()):
        raise UsageError(f"{where}: \"non_core_ops\" must map an op name to the list of test ids that carry it")
    return Baseline(out, {op: list(c) for op, c in ops.items()})


def _read_entry(value: Any, version: int) -> Entry | None:
    if version == 1:
        # no signature recorded: the entry matches any failure of its stage, as it did
        return {"reason": value} if isinstance(value, str) else None
    if not isinstance(value, dict) or not isinstance(value.get("reason"), str):
        return None
    sig = value.get("signature")
    if sig is not None and not isinstance(sig, str):
        return None
    if set(value) - {"reason", "signature"}:
        return None
    return _entry_json(value)


def _reason(text: str) -> str:
    line = next((ln.strip() for ln in (text or "").splitlines() if ln.strip()), "")
    return line if len(line) <= 160 else line[:157] + "..."


def signature_of(stage: dict[str, Any]) -> str:
    """Which failure a failed stage is, stable across runs: the stage's own ``signature`` (its kind, set by the
    runner) with its ``detail`` (what identifies it within the kind: ``gate.signature``) as ``kind: detail``, else
    the exception type it recorded, else the first line of its message with digits as ``#`` (sizes, counts and
    addresses change from run to run; the words do not), cut to 120 characters."""
    if isinstance(stage.get("signature"), str) and stage["signature"]:
        detail = stage.get("detail")
        return signature.compose(stage["signature"], detail if isinstance(detail, str) else None)
    if isinstance(stage.get("exception"), str) and stage["exception"]:
        return stage["exception"]
    line = next((ln.strip() for ln in str(stage.get("message") or "").splitlines() if ln.strip()), "")
    return re.sub(r"\d", "#", line)[:SIGNATURE_LIMIT] or str(stage.get("status") or "failed")


def failures_of(case: dict[str, Any]) -> dict[str, Entry]:
    """``{stage: {"reason", "signature"}}`` for the stages of a case that failed. An ``error`` stage or a
    case-level error (outcome ``error``) is not a failure: the harness could not decide, so it is never
    baselined."""
    return {name: {"reason": _reason(s.get("message", "")) or s["status"], "signature": signature_of(s)}
            for name, s in case.get("stages", {}).items() if s.get("status") in BASELINED}


def errors_of(case: dict[str, Any]) -> list[str]:
    """Where the harness could not decide: the ``error`` stages, or ``case`` for a case-level error."""
    out = [name for name, s in case.get("stages", {}).items() if s.get("status") == "error"]
    if case.get("error") or (case.get("outcome") == "error" and not out):
        out.insert(0, CASE_STAGE)
    return out


def non_core_of(case: dict[str, Any]) -> list[str]:
    return list((case.get("stages", {}).get("decomp") or {}).get("non_core") or [])


def changed_text(old: str, new: str) -> str:
    return f"different failure than the baseline's: was {old}, now {new}"


def refresh_text(nodeid: str, stages: dict[str, str]) -> str:
    """The line that names a baseline entry whose signature is the older kind-only form."""
    return (f"{nodeid} [{', '.join(sorted(stages))}]: the baseline's signature names only the kind of failure; "
            "rerun with --export-baseline-update to record the precise one ("
            + "; ".join(f"{s}: {sig}" for s, sig in sorted(stages.items())) + ")")


def judge(case: dict[str, Any], baseline: Baseline) -> dict[str, Any]:
    """One case against the baseline: ``new`` failures (unlisted, or listed with another signature: the text
    says so), ``known`` ones, ``stale`` entries, ``new_non_core`` ops. Values are texts by stage."""
    nodeid = case["nodeid"]
    expected = baseline.failures.get(nodeid, {})
    now = failures_of(case)
    statuses = {n: s.get("status") for n, s in case.get("stages", {}).items()}
    new: dict[str, str] = {}
    known: dict[str, str] = {}
    refresh: dict[str, str] = {}
    for stage, entry in now.items():
        listed = expected.get(stage)
        if listed is None:
            new[stage] = entry["reason"]
            continue
        same, older = signature.matches(listed["signature"], entry["signature"]) if listed.get("signature") \
            else (True, False)
        if not same:
            new[stage] = changed_text(listed["signature"], entry["signature"])
            continue
        known[stage] = listed.get("reason", "")
        if older:
            refresh[stage] = entry["signature"]
    verdict: dict[str, Any] = {
        "new": new,
        "known": known,
        # stale only where the stage ran and passed: a stage skipped behind a failure, or one that erred,
        # says nothing
        "stale": {s: e.get("reason", "") for s, e in expected.items()
                  if statuses.get(s) == "passed" or (s == CASE_STAGE and case.get("outcome") != "error")},
        "new_non_core": [op for op in non_core_of(case) if op not in baseline.non_core_ops],
        # entries that hold the kind alone (written before signatures had details): they match, and an update
        # writes the precise signature
        "refresh": refresh,
    }
    return {k: v for k, v in verdict.items() if v}


def _covered(scope: Scope | None, ran: Collection[str]) -> Callable[[str], bool]:
    """Whether a case that is not in ``ran`` is gone: the run had every chance to see it (``Scope.covers``)."""
    return lambda nodeid: nodeid not in ran and scope is not None and scope.covers(nodeid)


def session_stale(baseline: Baseline, cases: Iterable[dict[str, Any]], scope: Scope | None) -> list[str]:
    """Entries no case of this run can confirm although the run had every chance to see their cases: cases that
    are gone, and non-core ops no case carries any more (``scope`` None: a subset run, where nothing is gone)."""
    cases = list(cases)
    ran = {c["nodeid"] for c in cases}
    gone = _covered(scope, ran)
    out = [f"{nodeid} [{', '.join(sorted(stages))}]: the case did not run (removed or renamed?)"
           for nodeid, stages in sorted(baseline.failures.items()) if gone(nodeid)]
    carried = {op for c in cases for op in non_core_of(c)}
    decomposed = {c["nodeid"] for c in cases if confirmed(c, NON_CORE)}  # a skipped decomp says nothing (#32)
    for op, owners in sorted(baseline.non_core_ops.items()):
        if op not in carried and owners and all(gone(n) or n in decomposed for n in owners):
            out.append(f"non-core op {op}: no case carries it after decomposition any more")
    return out


def confirmed(case: dict[str, Any], stage: str) -> bool:
    """Whether this run reached a verdict on ``stage`` of a case that ran: the stage ran and passed or failed. One
    skipped (not requested, behind an earlier failure), not run (a case that could not be built), in ``error``
    (the harness could not decide) or left to its test (``raise_on_failure=False``) confirms nothing (#32)."""
    data = case.get("stages", {}).get("decomp" if stage == NON_CORE else stage) or {}
    if case.get("raise_on_failure") is False:
        return False
    # a non-core op's owner: the decomposed program's ops were listed (a decomposition that raised lists none)
    return "non_core" in data if stage == NON_CORE else data.get("status") in ("passed", *BASELINED)


def updated(baseline: Baseline, cases: Iterable[dict[str, Any]], scope: Scope | None) -> Baseline:
    """The baseline this run implies: a case that ran keeps the entries of the stages this run reached no verdict on
    (``confirmed``), loses those of the stages that passed, and gets its new failures (``failed`` stages only);
    cases that did not run keep their entries unless they are gone (see ``session_stale``). A non-core op is
    owned by the cases whose decomposition carries it, and still by one whose ``decomp`` reached no verdict.
    Legacy ``case`` entries (case-level errors, version 1) are dropped: an error is never expected."""
    cases = list(cases)
    ran = {c["nodeid"]: c for c in cases}
    gone = _covered(scope, ran)

    def kept(nodeid: str, stage: str) -> bool:
        return stage != CASE_STAGE and not gone(nodeid) and not (nodeid in ran and confirmed(ran[nodeid], stage))

    new = Baseline()
    for nodeid, stages in baseline.failures.items():
        new.failures[nodeid] = {s: dict(e) for s, e in stages.items() if kept(nodeid, s)}
    for c in cases:
        if c.get("raise_on_failure") is not False:
            new.failures.setdefault(c["nodeid"], {}).update(failures_of(c))
    new.failures = {n: s for n, s in new.failures.items() if s}
    for op, owners in baseline.non_core_ops.items():
        kept_owners = [n for n in owners if kept(n, NON_CORE)]
        if kept_owners:
            new.non_core_ops[op] = kept_owners
    for c in cases:
        for op in non_core_of(c) if confirmed(c, NON_CORE) else ():
            new.non_core_ops.setdefault(op, []).append(c["nodeid"])
    return new


__all__ = ["Baseline", "load", "judge", "failures_of", "errors_of", "signature_of", "changed_text", "refresh_text",
           "session_stale", "updated", "confirmed", "CASE_STAGE", "BASELINE_VERSION"]
