"""gate: a result's action (fail / xfail / warn / pass) and the baseline's end of a run, in plain Python."""

from __future__ import annotations

import pytest

from pytest_export.declare.options import SessionOptions
from pytest_export.gate import baseline as bl
from pytest_export.gate import judge as gate
from pytest_export.results import CaseResult, StageResult


def result(nodeid="t.py::c", **stages: str) -> CaseResult:
    r = CaseResult(nodeid)
    for name, status in stages.items():
        r.add(StageResult(name, status, f"{name} said {status}" if status != "passed" else ""))
    return r.finish()


def options(**kw) -> SessionOptions:
    return SessionOptions(check=True, baseline="b.json", **kw)


KNOWN = bl.Baseline({"t.py::c": {"compare": {"reason": "planted"}}})


@pytest.mark.parametrize("stages, base, opts, action, text", [
    ({"export": "passed"}, None, SessionOptions(), gate.PASS, ""),
    ({"compare": "failed"}, None, SessionOptions(), gate.FAIL, "export check of t.py::c: failed"),
    ({"compare": "xfailed"}, None, SessionOptions(), gate.PASS, ""),  # settle xfails it by its outcome
    ({"compare": "error"}, KNOWN, options(), gate.FAIL, "errors are never expected or baselined"),
    ({"compare": "failed"}, KNOWN, options(), gate.XFAIL, "known failure in the baseline: compare (planted)"),
    ({"compare": "failed"}, bl.Baseline(), options(), gate.FAIL, "new failure (not in the baseline): compare"),
    ({"compare": "passed"}, KNOWN, options(), gate.FAIL, "stale: remove it: baseline b.json expects compare"),
    ({"compare": "passed"}, KNOWN, options(baseline_warn_stale=True), gate.WARN, "stale: remove it"),
    ({"compare": "failed"}, bl.Baseline(), options(baseline_update=True), gate.XFAIL, "recorded in the baseline"),
    ({"compare": "xpassed"}, bl.Baseline({"t.py::c": {}}), options(), gate.FAIL, "xpassed"),
])
def test_judge(stages, base, opts, action, text):
    got, message = gate.judge(result(**stages), base, opts)
    assert got == action and text in message, message


def test_judge_keeps_the_verdict_for_the_report():
    r = result(compare="failed")
    gate.judge(r, KNOWN, options())
    assert r.info["baseline"] == {"known": {"compare": "planted"}}


def test_xfailed_text_names_each_expected_stage():
    r = result(serde="xfailed", compare="passed")
    assert gate.xfailed_text(r) == "serde: serde said xfailed"


def test_finish_reports_new_stale_and_errors_and_whether_the_session_fails():
    cases = [result("t.py::new", compare="failed"), result("t.py::c", compare="passed"),
             result("t.py::err", export="error")]
    for r in cases:
        gate.judge(r, KNOWN, options())
    out = gate.finish(KNOWN, [r.to_json() for r in cases], None, options())
    assert out.messages == ["new: t.py::new: new failure in compare",
                            "error (never baselined): t.py::err [export]: the harness could not decide; fix what "
                            "stopped it and rerun",
                            "stale: remove it: t.py::c [compare]: passes now"]
    assert out.stale_fails and out.updated is None
    warned = gate.finish(KNOWN, [r.to_json() for r in cases], None, options(baseline_warn_stale=True))
    assert not warned.stale_fails and warned.messages[-1].startswith("stale (warning): t.py::c")


def test_finish_in_update_mode_returns_the_new_baseline():
    cases = [result("t.py::new", compare="failed").to_json()]
    out = gate.finish(KNOWN, cases, [""], options(baseline_update=True))
    assert set(out.updated.failures) == {"t.py::new"}
    assert out.messages == ["baseline b.json updated: 1 known failure(s), 0 non-core op(s)"]
