"""One story in every summary (issue #26): each case's verdict, said the same way in the Markdown summary, the
terminal tables and the conformance table, and in agreement with pytest's own outcome line.

A case's ``item`` is what pytest reported for its test (``passed``, ``failed``, ``error``, ``skipped``,
``xfailed``, ``xpassed``), as the controller saw the call's report; its ``verdict`` says why:

- ``passed``;
- ``known``: a failure in the baseline (pytest: xfailed, ``pytest.xfail`` by the gate);
- ``new``: a failure or non-core op not in the baseline (pytest: failed);
- ``failed``: a failure without a baseline, or a strict XPASS (pytest: failed);
- ``stale``: it passes, and its baseline entry says it fails (pytest: failed);
- ``error``: the harness could not decide (pytest: failed, or error where the test's setup failed);
- ``xfailed``: expected by the marker's ``xfail=`` or by ``@pytest.mark.xfail`` (pytest: xfailed);
- ``xpassed``: a non-strict ``@pytest.mark.xfail`` test that passed;
- ``skipped``.

Plain Python over the report's case dicts; no torch, no pytest.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..util import plural

PASSED, KNOWN, NEW, FAILED, STALE, ERROR, XFAILED, XPASSED, SKIPPED = (
    "passed", "known", "new", "failed", "stale", "error", "xfailed", "xpassed", "skipped")
ORDER = (PASSED, KNOWN, NEW, FAILED, STALE, ERROR, XFAILED, XPASSED, SKIPPED)
FAILING = (NEW, FAILED, STALE, ERROR)  # the verdicts that fail their test
# (one, many, note): "6 known failures (in the baseline; pytest: xfailed)"
_WORDS = {
    PASSED: ("passed", "passed", ""),
    KNOWN: ("known failure", "known failures", "in the baseline"),
    NEW: ("new failure", "new failures", "not in the baseline"),
    FAILED: ("failing", "failing", ""),
    STALE: ("stale baseline entry", "stale baseline entries", "the case passes now"),
    ERROR: ("error", "errors", "the harness could not decide"),
    XFAILED: ("xfailed", "xfailed", "xfail= or @pytest.mark.xfail"),
    XPASSED: ("xpassed", "xpassed", ""),
    SKIPPED: ("skipped", "skipped", ""),
}
# what pytest counts for a verdict, where the case records no item (a saved report, the plain-Python API)
_PYTEST = {PASSED: "passed", KNOWN: "xfailed", NEW: "failed", FAILED: "failed", STALE: "failed", ERROR: "failed",
           XFAILED: "xfailed", XPASSED: "xpassed", SKIPPED: "skipped"}
_BAD = ("failed", "error", "xpassed")  # stage statuses that fail a stage
MARKED = "xfailed by @pytest.mark.xfail: "  # the gate's end-of-run line of a test pytest's own xfail mark covers


def reported(report: Any) -> str:
    """What pytest's outcome line counts for a test report (a ``pytest.TestReport``)."""
    if report.passed:
        return "xpassed" if hasattr(report, "wasxfail") else "passed"
    if report.skipped:
        return "xfailed" if hasattr(report, "wasxfail") else "skipped"
    return "error" if report.when in ("setup", "teardown") else "failed"


def _has_error(case: dict[str, Any]) -> bool:
    return bool(case.get("error")) or case.get("outcome") == "error" or any(
        s.get("status") == "error" for s in (case.get("stages") or {}).values())


def item_verdict(case: dict[str, Any], item: str, gate: str | None) -> str:
    """The verdict of a case whose test pytest reported as ``item``, where the gate (``items.settle``) said
    ``gate`` (``passed``, ``failed`` or ``xfailed``; None where the test settled its case itself)."""
    if item in (SKIPPED, XPASSED, PASSED):
        return item
    if item == XFAILED:
        # the gate's pytest.xfail on a case that failed: known to the baseline (or being recorded in it)
        return KNOWN if gate == XFAILED and case.get("outcome") != XFAILED else XFAILED
    verdict = case.get("baseline") or {}
    if _has_error(case):
        return ERROR
    if verdict.get("new") or verdict.get("new_non_core"):
        return NEW
    if verdict.get("stale") and case.get("outcome") in (PASSED, XFAILED):
        return STALE
    return FAILED


def decided(case: dict[str, Any], item: str) -> str:
    """The verdict of a case its test decided (``export_check(raise_on_failure=False)``, #32), whose test pytest
    reported as ``item``: a case that failed is what its test made of it (``passed`` where the test accepted it),
    one that did not keeps its own (a passing case in a test that failed for another reason is ``passed``)."""
    return item_verdict(case, item, None) if case.get("outcome") in ("failed", "error") else _from_outcome(case)


def _from_outcome(case: dict[str, Any]) -> str:
    """The verdict of a case that records neither verdict nor item: from its outcome and baseline verdict."""
    outcome, verdict = case.get("outcome"), case.get("baseline") or {}
    if outcome in (SKIPPED, XFAILED):
        return outcome
    if _has_error(case):
        return ERROR
    if verdict.get("new") or verdict.get("new_non_core"):
        return NEW
    if outcome == "failed":
        xpassed = any(s.get("status") == "xpassed" for s in (case.get("stages") or {}).values())
        return KNOWN if verdict.get("known") and not xpassed else FAILED
    return STALE if verdict.get("stale") else PASSED


def verdict_of(case: dict[str, Any]) -> str:
    """The case's verdict: the one its run recorded, else the one its item and outcome imply."""
    if case.get("verdict") in _WORDS:
        return case["verdict"]
    item = case.get("item")
    return item_verdict(case, item, item) if item in _PYTEST.values() or item == "error" else _from_outcome(case)


def pytest_outcome_of(case: dict[str, Any]) -> str:
    """What pytest counted for the case's test."""
    return case.get("item") or _PYTEST[verdict_of(case)]


def settle(cases: list[dict[str, Any]], report: Any) -> None:
    """Record, on the case dicts an item's call report carries, what pytest reported (``item``) and the verdict.

    The test's outcome is that of its last case the gate settled (an earlier ``export_check`` call passed, or
    the gate would have ended the test there). A case built without stages (a skip, a case that could not be
    built) is its test's, and so is one its test decides (``raise_on_failure=False``, ``decided``: #32)."""
    outcome = reported(report)
    settled = [c for c in cases if c.get("item")]
    for case in cases:
        if case.get("verdict"):  # settled already: by the xdist worker that ran it, on this very report
            continue
        if case.get("item"):
            gate = case["item"]
            case["item"] = outcome if case is settled[-1] else gate
            case["verdict"] = item_verdict(case, case["item"], gate)
        elif case.get("raise_on_failure") is False:  # its test decided: it counts as the test ended (#32)
            case["item"] = outcome
            case["verdict"] = decided(case, outcome)
        elif len(cases) == 1 and not case.get("stages"):
            case["item"] = outcome
            case["verdict"] = item_verdict(case, outcome, None)
        else:
            case["verdict"] = _from_outcome(case)


def verdict_text(verdict: str, cases: list[dict[str, Any]]) -> str:
    """``6 known failures (in the baseline; pytest: xfailed)``: the verdict's cases, and what pytest counted for
    them where its word is another."""
    one, many, note = _WORDS[verdict]
    said = Counter(pytest_outcome_of(c) for c in cases)
    notes = [note] if note else []
    if set(said) != {verdict}:
        notes.append("pytest: " + (next(iter(said)) if len(said) == 1 else
                                   ", ".join(f"{n} {word}" for word, n in sorted(said.items()))))
    return f"{len(cases)} {one if len(cases) == 1 else many}" + (f" ({'; '.join(notes)})" if notes else "")


def head(cases: list[dict[str, Any]]) -> str:
    """``13 cases: 7 passed, 6 known failures (in the baseline; pytest: xfailed)``."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        by.setdefault(verdict_of(c), []).append(c)
    parts = [verdict_text(v, by[v]) for v in ORDER if v in by]
    return plural(len(cases), "case") + (": " + ", ".join(parts) if parts else "")


def failing_label(case: dict[str, Any]) -> str:
    """How a list of cases names a case's verdict: ``failing (new)``, ``known``, ``error``, ..."""
    verdict = verdict_of(case)
    return {NEW: "failing (new)", FAILED: "failing", STALE: "failing (stale baseline entry: it passes now)",
            ERROR: "error (the harness could not decide)", KNOWN: "known failure"}.get(verdict, verdict)


def bad_stages(case: dict[str, Any]) -> list[str]:
    return [n for n, s in (case.get("stages") or {}).items() if s.get("status") in _BAD]


def case_column(case: dict[str, Any]) -> str:
    """The case's column in the tables: passed, failed, known, xfailed or skipped."""
    verdict = verdict_of(case)
    return {XPASSED: PASSED, STALE: FAILED, NEW: FAILED, ERROR: FAILED}.get(verdict, verdict)


def stage_column(case: dict[str, Any], stage: str, status: str) -> str | None:
    """A stage's column in the tables: its status, where a failure (error and strict XPASS count as failed) is
    ``known`` where the baseline lists it, and ``xfailed`` where pytest's own xfail mark covers its test."""
    if status not in _BAD:
        return status if status in (PASSED, SKIPPED, XFAILED) else None
    verdict = verdict_of(case)
    if verdict == XFAILED:
        return XFAILED
    if status == "failed" and (verdict == KNOWN or stage in ((case.get("baseline") or {}).get("known") or {})):
        return KNOWN
    return FAILED


def said(case: dict[str, Any], stage: str | None = None) -> str:
    """The word every table gives a case's outcome (``stage`` None) or a stage's status: ``known`` for a failure the
    baseline knows, ``xfailed`` for one pytest's own xfail mark covers (as the stage table's columns say them) and
    ``stale`` for a case that passes while the baseline says it fails (its test fails: the tables count it failed),
    else the status the case records (#32)."""
    if stage is None:
        verdict = verdict_of(case)
        return verdict if verdict in (KNOWN, XFAILED, STALE) else str(case.get("outcome", ""))
    status = ((case.get("stages") or {}).get(stage) or {}).get("status", "")
    column = stage_column(case, stage, status)
    return column if column in (KNOWN, XFAILED) else status


__all__ = ["reported", "said", "item_verdict", "decided", "verdict_of", "pytest_outcome_of", "settle", "verdict_text", "head",
           "failing_label", "bad_stages", "case_column", "stage_column", "MARKED", "ORDER", "FAILING", "PASSED",
           "KNOWN", "NEW", "FAILED", "STALE", "ERROR", "XFAILED", "XPASSED", "SKIPPED"]
