"""The gate: what a case's result means for its test, and what the baseline means for the session.

``judge`` turns one result into the item's action (``fail``, ``xfail``, ``warn`` or ``pass``) and its text;
``finish`` turns the session's cases into the baseline's end-of-run messages, the rewritten baseline (update
mode) and whether stale entries fail the session. The marker and the ``export_check`` fixture both go through
``judge`` (``session.settle`` applies its action), so a case is gated the same way however it was checked.
``judge_report`` applies both, once, to the cases of a whole run's report (the merged report of CI shards,
``python -m pytest_export gate``), so that gate has the same rules and messages as the in-run one. Both finish
over the run's ``scope.Scope``, the one record of what it covered (issue #24).

Plain Python over results and the report's case dicts; no torch, no pytest.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Sequence

from ..results import BAD, XFAILED, CaseResult
from . import baseline as bl
from .scope import Scope
from .verdicts import MARKED, decided, item_verdict

if TYPE_CHECKING:
    from ..declare.options import CaseOptions, SessionOptions

FAIL, XFAIL, WARN, PASS = "fail", "xfail", "warn", "pass"


def judge(result: CaseResult, base: bl.Baseline | None, options: SessionOptions) -> tuple[str, str]:
    """What the item does with its result: ``(FAIL | XFAIL | WARN | PASS, text)``.

    An error (a stage that ended ``error``, or a case-level error) always fails, with or without a baseline
    and in update mode too: the harness could not decide, so no baseline can expect it. Without a baseline
    a failed case fails. With one, known failures are expected (xfail); new failures (unlisted, or listed
    with another signature) and new non-core ops fail; entries that now pass are stale (fail, or warn).
    In update mode every failure is being recorded, so no failure fails the item. The verdict is kept in
    ``result.info["baseline"]`` for the report and the end-of-run messages. A case its test decides
    (``raise_on_failure=False``) is judged for errors only: the baseline neither expects nor records it.
    """
    case = result.to_json()
    decides = result.info.get("raise_on_failure") is False  # export_check(raise_on_failure=False): its test's (#32)
    verdict: dict[str, Any] = {}
    if base is not None and not options.baseline_update and not decides:
        verdict = bl.judge(case, base)  # in the report even where an error fails the item
        if verdict:
            result.info["baseline"] = verdict
    errors = bl.errors_of(case)
    if errors:
        return FAIL, error_text(result, errors)
    if decides:
        return PASS, ""
    if base is None:
        return (FAIL, result.failure_text()) if result.failed else (PASS, "")
    # a strict XPASS (the marker's xfail= on a stage that passes) is no failure to record: it fails, also in
    # update mode (#24), until the xfail entry is removed
    xpassed = result.outcome == "failed" and any(s.status == "xpassed" for s in result.stages.values())
    if options.baseline_update:
        now = bl.failures_of(case)
        if xpassed:
            return FAIL, result.failure_text()
        return (XFAIL, "recorded in the baseline: " + stages_text(
            {s: e["reason"] for s, e in now.items()})) if now else (PASS, "")
    if verdict.get("new") or verdict.get("new_non_core"):
        return FAIL, _new_text(result, verdict, base, options.baseline)
    if xpassed:
        return FAIL, result.failure_text()
    if verdict.get("stale"):
        text = (f"stale: remove it: baseline {options.baseline} expects {stages_text(verdict['stale'])} to fail, "
                "but it passes now (rerun with --export-baseline-update)")
        return (WARN if options.baseline_warn_stale else FAIL), text
    if verdict.get("known"):
        # what is known, by the signature that makes it the same failure: shown where the diagnosis of a known
        # failure is skipped (issue #52)
        now = bl.failures_of(case)
        sigs = "; ".join(f"{s}: {now[s]['signature']}" for s in sorted(verdict["known"]) if s in now)
        return XFAIL, "known failure in the baseline: " + stages_text(verdict["known"]) + (
            f" (signature {sigs})" if sigs else "")
    return (FAIL, result.failure_text()) if result.failed else (PASS, "")


ALWAYS = "--export-diagnose=always runs it"


def diagnosis_skipped(nodeid: str, case: CaseOptions, base: bl.Baseline | None, options: SessionOptions,
                      torch_version: str | None = None) -> str:
    """Why a failed export of this case goes undiagnosed under ``--export-diagnose=auto`` (issue #26), decided
    before it runs: its ``export`` stage is known to the baseline (the item's test id names its mode and device),
    or expected by the marker's ``xfail=`` for its mode and device. "" where it is diagnosed (or never is)."""
    from ..declare.options import xfail_for

    if not case.diagnose or options.diagnose_when != "auto":
        return ""
    if base is not None and "export" in base.failures.get(nodeid, {}):
        return f"diagnosis skipped: known failure (in the baseline {options.baseline}); {ALWAYS}"
    if "export" in xfail_for(case.xfail or {}, case.strict, case.device, torch_version):
        return f"diagnosis skipped: expected failure (xfail= in the marker); {ALWAYS}"
    return ""


def _new_text(result: CaseResult, verdict: dict[str, Any], base: bl.Baseline, path: str | None) -> str:
    lines = [result.failure_text(), "", f"--- baseline {path} ---"]
    listed = base.failures.get(result.nodeid, {})
    unlisted = {s: r for s, r in verdict.get("new", {}).items() if s not in listed}
    if unlisted:
        lines.append("new failure (not in the baseline): " + stages_text(unlisted))
    for s, r in sorted(verdict.get("new", {}).items()):
        if s in listed:  # listed, but it fails for another reason now
            lines.append(f"new failure in {s}: {r}")
    if verdict.get("new_non_core"):
        lines.append("new non-core op after decomposition (not in the baseline): " + ", ".join(verdict["new_non_core"]))
    lines.append("fix it, or accept it with --export-baseline-update")
    return "\n".join(lines)


def xfailed_text(result: CaseResult) -> str:
    """Why a case whose failing stages were all expected (``xfail={stage: reason}``) is xfailed."""
    return "; ".join(f"{s.name}: {s.message.splitlines()[0]}" for s in result.stages.values() if s.status == XFAILED)


def error_text(result: CaseResult, errors: list[str]) -> str:
    """The failure text of a result the harness could not decide: never expected, never baselined."""
    stages = [e for e in errors if e != bl.CASE_STAGE]
    what = f"the {stages[0]} stage's message" if stages else "the case's error"
    return (f"{result.failure_text()}\n\n{result.nodeid} [{', '.join(errors)}]: error: the harness could not "
            f"decide; errors are never expected or baselined; fix what stopped it ({what} above says what; "
            "a timeout: raise --export-timeout or make the case smaller)")


def stages_text(stages: dict[str, str]) -> str:
    return "; ".join(f"{s} ({r})" if r else s for s, r in sorted(stages.items()))


@dataclasses.dataclass
class Finish:
    """The baseline's end of a run: lines for the summary, the file to write (update mode) and whether stale
    entries fail the session."""

    messages: list[str] = dataclasses.field(default_factory=list)
    updated: bl.Baseline | None = None
    stale_fails: bool = False


def finish(base: bl.Baseline, cases: list[dict[str, Any]], scope: Scope | Sequence[str] | None,
           options: SessionOptions) -> Finish:
    """The session's baseline verdict over every case. ``scope``: what the run covered (``scope.Scope``: where a
    case that did not run is gone, which tests pytest's own xfail mark covers, whether the run stopped early), or
    the folders that ran whole (None: a subset run)."""
    scope = Scope.of(scope)
    out = Finish()

    def line(case: dict[str, Any], text: str, kind: str) -> str:
        # pytest's own xfail mark turns the failure of its test into an xfail: said, but it fails nothing (#24)
        mark = scope.xfail_of(case["nodeid"])
        return f"{MARKED}{text}" if mark and not mark.get("raises") else f"{kind}{text}"

    # errors fail their items whatever the baseline says; list them here too, so the summary explains why
    # an update did not record them and a gate run did not expect them
    errors = [line(c, f"{c['nodeid']} [{', '.join(bl.errors_of(c))}]: the harness could not decide; fix what "
                      "stopped it and rerun", "error (never baselined): ")
              for c in sorted(cases, key=lambda c: c["nodeid"]) if bl.errors_of(c)]
    if options.baseline_update:
        if scope.stopped:  # a run stopped early saw only part of what it selected: it writes nothing (#24)
            out.messages.append(f"baseline {options.baseline} not updated: the run stopped early ({scope.stopped}); "
                                "nothing was written; rerun it to the end to update the baseline")
        else:
            out.updated = new = bl.updated(base, cases, scope)
            out.messages.append(
                f"baseline {options.baseline} updated: {sum(len(s) for s in new.failures.values())} known "
                f"failure(s), {len(new.non_core_ops)} non-core op(s)"
                + ("" if scope.whole else " (subset run: entries of cases that did not run were kept)"))
        out.messages += errors
        return out
    stale = [f"{c['nodeid']} [{', '.join(sorted(c['baseline']['stale']))}]: passes now"
             for c in cases if c.get("baseline", {}).get("stale")]
    stale += bl.session_stale(base, cases, scope)
    new = []
    for c in cases:
        verdict = c.get("baseline", {})
        listed = base.failures.get(c["nodeid"], {})
        unlisted = sorted(s for s in verdict.get("new", {}) if s not in listed)
        parts = [f"new failure in {', '.join(unlisted)}"] if unlisted else []
        parts += [f"new failure in {s} ({r})" for s, r in sorted(verdict.get("new", {}).items()) if s in listed]
        if verdict.get("new_non_core"):
            parts.append(f"new non-core op {', '.join(verdict['new_non_core'])}")
        if parts:
            new.append(line(c, f"{c['nodeid']}: " + "; ".join(parts), "new: "))
    out.messages += new + errors
    # entries that match by their kind alone: kept, and named, so that an update makes them precise (issue #52)
    out.messages += [f"refresh: {bl.refresh_text(c['nodeid'], c['baseline']['refresh'])}"
                     for c in sorted(cases, key=lambda c: c["nodeid"]) if c.get("baseline", {}).get("refresh")]
    verb = "stale (warning)" if options.baseline_warn_stale else "stale: remove it"
    out.messages += [f"{verb}: {m}" for m in stale]
    out.stale_fails = bool(stale) and not options.baseline_warn_stale
    return out


def item_outcome(action: str, mark: dict[str, bool] | None) -> str:
    """What pytest makes of an item whose gate says ``action``, under its own xfail mark ``mark`` (as the run
    evaluated it): ``failed``, ``xfailed`` or ``passed``. The gate fails an item with ``pytest.fail``, which a
    mark's ``raises=`` does not name."""
    if action == XFAIL:
        return "xfailed"
    if mark is None:
        return "failed" if action == FAIL else "passed"
    if action == FAIL:
        return "failed" if mark.get("raises") else "xfailed"
    return "failed" if mark.get("strict") else "passed"  # an XPASS: strict fails it


@dataclasses.dataclass
class ReportVerdict:
    """The gate over a whole run's report: the end-of-run lines (the in-run gate's, then one per failing item
    those lines do not explain), the items the in-run gate fails, and the counts for the verdict line."""

    messages: list[str]
    failing: list[str]
    stale_fails: bool
    counts: dict[str, int]
    cases: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # judged here, with their verdicts

    @property
    def failed(self) -> bool:
        return bool(self.failing) or self.stale_fails


def judge_report(base: bl.Baseline, cases: list[dict[str, Any]], options: SessionOptions,
                 scope: Scope | None = None) -> ReportVerdict:
    """The gate applied once to the cases of a whole run (issue #19: the merged report of CI shards).

    Each case is judged as its item was in the run (``judge``, against ``base``: a verdict the case carries from
    its shard's run is dropped; pytest's own xfail mark, recorded in ``scope``, applied as pytest did), then the
    session is finished over the report's ``scope`` (``finish``), as the in-run gate finishes over its own
    (issue #24): an entry whose case the merged shards had every chance to see and did not is stale. ``scope``
    None: the report is a whole run of its rootdir (a report written before scopes were recorded)."""
    scope = Scope() if scope is None else scope
    judged, failing, other = [], [], []
    for case in sorted(cases, key=lambda c: c["nodeid"]):
        result = CaseResult.from_json({k: v for k, v in case.items() if k != "baseline"})
        action, _ = judge(result, base, options)
        judged.append(result.to_json())
        mark = scope.xfail_of(result.nodeid)
        gated = {FAIL: "failed", XFAIL: "xfailed"}.get(action, "xfailed" if result.outcome == XFAILED else "passed")
        outcome = "xfailed" if gated == "xfailed" else item_outcome(action, mark)  # pytest.xfail ends the test
        decides = action != FAIL and case.get("raise_on_failure") is False and case.get("item")
        if decides:  # export_check(raise_on_failure=False): the case ends as its test did in the run (#32)
            outcome = case["item"]
        judged[-1].update(item=outcome, verdict=decided(judged[-1], outcome) if decides else
                          item_verdict(judged[-1], outcome, gated))
        if outcome == "failed" and decides:
            failing.append(result.nodeid)
            other.append(f"failed: {result.nodeid}: its test failed (export_check(raise_on_failure=False): the test "
                         "decides)")
        elif outcome == "failed":
            failing.append(result.nodeid)
            if action != FAIL:  # it passes, and its strict xfail mark wants it to fail
                other.append(f"failed: {result.nodeid}: XPASS(strict): it passes, and its @pytest.mark.xfail "
                             "is strict")
                continue
            verdict = result.info.get("baseline", {})
            explained = (bl.errors_of(judged[-1]) or verdict.get("new") or verdict.get("new_non_core")
                         or verdict.get("stale"))
            if not explained:  # a strict XPASS, or a failure no baseline line names
                bad = [(n, s) for n, s in result.stages.items() if s.status in BAD]
                other += [f"failed: {result.nodeid} [{n}]: {s.status}: {(s.message.splitlines() or [''])[0]}"
                          for n, s in bad] or [f"failed: {result.nodeid}: {result.outcome}"]
    end = finish(base, judged, scope, options)
    counts = {
        "new": sum(m.startswith("new: ") for m in end.messages),
        "errors": sum(m.startswith("error (never baselined): ") for m in end.messages),
        "stale": sum(m.startswith(("stale: remove it: ", "stale (warning): ")) for m in end.messages),
        "failed": len(other),
        "known": sum(len(c.get("baseline", {}).get("known", {})) for c in judged),
        "cases": len(judged),
    }
    return ReportVerdict(end.messages + other, failing, end.stale_fails, counts, judged)


__all__ = ["judge", "finish", "Finish", "judge_report", "ReportVerdict", "item_outcome", "xfailed_text", "error_text",
           "stages_text", "diagnosis_skipped", "FAIL", "XFAIL", "WARN", "PASS", "MARKED"]
