"""The conformance table: cases by tag and stage, and the Core ATen coverage the cases reach; and the table per
model and torch version (``python -m pytest_export table``), kept as an expected file so a change shows as a diff.

Works on the report's case dicts (the one wire format), so it renders a live session and a saved report alike.
Plain Python; no torch, no pytest.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..gate.verdicts import case_column, said, stage_column
from ..util import text_table

UNTAGGED = "(untagged)"
ALL = "all"
CELL = ("passed", "failed", "xfailed", "skipped")
CELL_KNOWN = ("passed", "failed", "known", "xfailed", "skipped")  # where the baseline knows some failures
LEGEND = ("each cell: {cell} (failed counts error and xpassed too{known}); "
          "outcome is the case's as pytest reports it, the other columns its stages'")
KNOWN_NOTE = "; known: failures in the baseline, which pytest counts as xfailed"


def legend(columns: tuple[str, ...]) -> str:
    return LEGEND.format(cell="/".join(columns), known=KNOWN_NOTE if "known" in columns else "")


def _cell(counts: dict[str, int] | None, columns: tuple[str, ...]) -> str:
    return "/".join(str(counts.get(c, 0)) for c in columns) if counts else "-"


def stage_order(cases: Iterable[dict[str, Any]]) -> list[str]:
    """Stage names in the order the cases ran them (first seen first)."""
    order: list[str] = []
    for case in cases:
        for name in case.get("stages", {}):
            if name not in order:
                order.append(name)
    return order


def core_ops_reached(cases: Iterable[dict[str, Any]]) -> set[str]:
    """Core ATen ops left in some case's decomposed program (``decomp``'s ``ops_after`` minus ``non_core``)."""
    reached: set[str] = set()
    for case in cases:
        decomp = case.get("stages", {}).get("decomp") or {}
        after = decomp.get("ops_after") or []
        non_core = set(decomp.get("non_core") or [])
        reached.update(op for op in after if op not in non_core)
    return reached


def conformance_table(cases: list[dict[str, Any]], core_ops: Iterable[str] | int | None = None) -> str:
    """Rows per tag (a case counts under each of its tags), then ``all``; columns per stage.

    ``core_ops`` is every Core ATen op of the installed torch (or just their number); with it, a last line
    says how many of them the cases reach after decomposition.
    """
    stages = stage_order(cases)
    rows: dict[str, dict[str, Any]] = {}

    def row(name: str) -> dict[str, Any]:
        return rows.setdefault(name, {"cases": 0, "outcome": {}, "stages": {}})

    for case in cases:
        tags = list(dict.fromkeys(case.get("tags") or [])) or [UNTAGGED]
        outcome = case_column(case)
        columns = {stage: stage_column(case, stage, data.get("status", ""))
                   for stage, data in case.get("stages", {}).items()}
        for name in [*tags, ALL]:
            r = row(name)
            r["cases"] += 1
            r["outcome"][outcome] = r["outcome"].get(outcome, 0) + 1
            for stage, col in columns.items():
                if col is not None:
                    counts = r["stages"].setdefault(stage, {})
                    counts[col] = counts.get(col, 0) + 1

    known = any(r["outcome"].get("known") or any(c.get("known") for c in r["stages"].values()) for r in rows.values())
    cell = CELL_KNOWN if known else CELL
    ordered = sorted((n for n in rows if n not in (ALL, UNTAGGED)), key=str.lower)
    ordered += [n for n in (UNTAGGED, ALL) if n in rows]
    header = ["tag", "cases", "outcome", *stages]
    body = [[name, rows[name]["cases"], _cell(rows[name]["outcome"], cell),
             *(_cell(rows[name]["stages"].get(s), cell) for s in stages)] for name in ordered]
    lines = [text_table(header, body, right=range(1, len(header)),
                        rule_before=[i for i, name in enumerate(ordered) if name == ALL])]
    lines.append(legend(cell))
    if core_ops is not None:
        lines.append(core_aten_line(cases, core_ops))
    matrix = deployment_matrix(cases)  # the deployment paths per case (issue #27)
    if matrix:
        lines.append(matrix)
    return "\n".join(lines)


def core_aten_line(cases: list[dict[str, Any]], core_ops: Iterable[str] | int) -> str:
    reached = core_ops_reached(cases)
    if isinstance(core_ops, int):
        total = core_ops
    else:
        known = set(core_ops)
        total = len(known)
        reached &= known
    pct = 100.0 * len(reached) / total if total else 0.0
    return f"Core ATen coverage: {len(reached)} of {total} core ops ({pct:.0f}%) reached after run_decompositions()"


DEPLOYMENT = ("export", "aoti", "onnx", "executorch")
"""The deployment matrix's columns: the exported program, and each path it ships by."""


def deployment_matrix(cases: list[dict[str, Any]]) -> str | None:
    """One row per case that ran a deployment stage (``aoti``, ``onnx``, ``executorch``): each column's status (with the failure's
    signature, ``failed (unsupported-op)``), ``-`` where not run, and an ``all`` row of passed/failed/xfailed/
    skipped counts; None where no case ran one."""
    shipped = [c for c in cases if any(s in c.get("stages", {}) for s in DEPLOYMENT[1:])]
    if not shipped:
        return None
    totals: dict[str, dict[str, int]] = {s: {} for s in DEPLOYMENT}

    def cell(case: dict[str, Any], stage: str) -> str:
        data = case.get("stages", {}).get(stage)
        if not data:
            return "-"
        status = data.get("status", "")
        column = stage_column(case, stage, status)  # a failure the baseline knows is `known`, as in every table
        if column:
            totals[stage][column] = totals[stage].get(column, 0) + 1
        word = said(case, stage)
        signature = data.get("signature") if status in ("failed", "xfailed") else None
        return f"{word} ({signature})" if signature else word

    body = [[c["nodeid"].rsplit("/", 1)[-1], *(cell(c, s) for s in DEPLOYMENT)]
            for c in sorted(shipped, key=lambda c: c["nodeid"])]
    cells = CELL_KNOWN if any(t.get("known") for t in totals.values()) else CELL
    body.append([ALL, *("/".join(str(totals[s].get(c, 0)) for c in cells) for s in DEPLOYMENT)])
    return ("deployment matrix: the exported program and the paths it ships by, per case\n"
            + text_table(["case", *DEPLOYMENT], body, rule_before=[len(body) - 1])
            + f"\nall: {'/'.join(cells)} (failed counts error and xpassed too"
            + ("; known: failures in the baseline" if "known" in cells else "") + "); - where the stage did not run")


__all__ = ["conformance_table", "deployment_matrix", "DEPLOYMENT", "legend", "CELL", "CELL_KNOWN", "core_ops_reached",
           "core_aten_line", "stage_order"]


MARK = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "-"}
# the table states torch's verdict, not the run's bookkeeping against an expected file: an expected failure that
# held is a failure, one that did not hold (XPASS) a pass
AS_VERDICT = {"xfailed": "failed", "xpassed": "passed"}
REASON = 110  # characters of a first failure's reason in the table


def model_of(nodeid: str) -> str:
    """A case's model: its parameter id (``test_transformers[bert]`` -> ``bert``), else its test's name."""
    name = nodeid.rsplit("::", 1)[-1]
    return name[name.index("[") + 1:-1] if name.endswith("]") and "[" in name else name


def stage_verdict(stage: dict[str, Any] | None) -> str:
    """A stage's verdict as torch gave it ("" where it did not run): an expected failure is a failure, an XPASS a
    pass."""
    status = str((stage or {}).get("status", ""))
    return AS_VERDICT.get(status, status)


def model_verdict(case: dict[str, Any]) -> str:
    """A case's verdict from its stages: ``error`` where the harness could not decide (the case or a stage),
    ``failed`` where a stage failed (expected or not), ``skipped`` where nothing ran, else ``passed``."""
    verdicts = {stage_verdict(st) for st in (case.get("stages") or {}).values()}
    if case.get("error") or "error" in verdicts or case.get("outcome") == "error":
        return "error"
    if "failed" in verdicts:
        return "failed"
    return "passed" if "passed" in verdicts else "skipped"


def found_message(text: str) -> str:
    """An expected failure's message without its ``expected failure (REASON): `` prefix. The reason is the first
    line of an earlier run's message, so the message is cut where what follows begins as the reason does."""
    if not text.startswith("expected failure ("):
        return text
    rest = text.removeprefix("expected failure (")
    first = rest.split("\n", 1)[0]
    cuts = [i for i in range(len(first)) if first.startswith("): ", i)]
    same = [i for i in cuts if first[i + 3:i + 3 + min(i, 30)] == first[:min(i, 30)]]
    return rest[(same or cuts or [-3])[0] + 3:]


def first_failure(case: dict[str, Any]) -> str:
    """The first stage that failed (or errored, or was an expected failure), and the first line of why."""
    if case.get("error"):
        return "case: " + str(case["error"]).splitlines()[0][:REASON]
    for name, stage in (case.get("stages") or {}).items():
        if stage_verdict(stage) in ("failed", "error"):
            text = found_message(str(stage.get("message") or ""))
            line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            return f"{name}: {line[:REASON]}" + ("..." if len(line) > REASON else "")
    return ""


def model_table(reports: list[dict[str, Any]], title: str = "Conformance per model") -> str:
    """Markdown: per model and torch version (one report each), each stage's verdict and the first failure's
    reason; above it, the counts per verdict of each version. Sorted, so that two runs of one tree give the same
    text and a change is a diff. A case in a later report of the same torch version replaces the earlier one's (a
    re-run of some cases, given after the whole run)."""
    latest = {(str(r.get("torch", "?")), c["nodeid"]): c for r in reports for c in r.get("cases", [])}
    cases = [(v, c) for (v, _), c in latest.items()]
    stages = stage_order(c for _, c in cases)
    versions = sorted({v for v, _ in cases})
    lines = [f"# {title}", "", "| torch | models | " + " | ".join(MARK) + " |",
             "|---|---|" + "---|" * len(MARK)]
    for v in versions:
        verdicts = [model_verdict(c) for w, c in cases if w == v]
        lines.append(f"| {v} | {len(verdicts)} | " + " | ".join(str(verdicts.count(k)) for k in MARK) + " |")
    lines += ["", "Each cell is a stage's verdict as torch gave it (`-`: skipped; an expected failure is a failure, an "
              "XPASS a pass); the last column is the first failure's reason.", "",
              "| model | torch | verdict | " + " | ".join(stages) + " | first failure |",
              "|---|---|---|" + "---|" * len(stages) + "---|"]
    for v, c in sorted(cases, key=lambda vc: (model_of(vc[1]["nodeid"]), vc[0])):
        cells = [MARK.get(stage_verdict(c.get("stages", {}).get(s)), "") for s in stages]
        reason = first_failure(c).replace("|", "\\|").replace("`", "'")
        lines.append(f"| {model_of(c['nodeid'])} | {v} | {MARK[model_verdict(c)]} | " + " | ".join(cells)
                     + f" | {reason} |")
    return "\n".join(lines) + "\n"
