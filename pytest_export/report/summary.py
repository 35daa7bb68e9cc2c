"""Renderings of a run's cases (the report's case dicts): the terminal summary, the decomposition coverage op
table (JSON and Markdown) and the Markdown summary for CI job pages. ``files`` writes them.

Plain Python; no torch, no pytest. Torch facts (the Core ATen op list, which ops the default table
decomposes) come in as data, from the workers that ran the cases.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..gate.verdicts import (FAILING, KNOWN, MARKED, PASSED, SKIPPED, bad_stages, case_column, failing_label, head,
                             stage_column, verdict_of)
from ..util import markdown_table, text_table
from .conformance import conformance_table, core_ops_reached, stage_order

COLUMNS = ("passed", "failed", "skipped", "xfailed")
COLUMNS_KNOWN = ("passed", "failed", "known", "skipped", "xfailed")  # where the baseline knows some failures
KNOWN_LEGEND = "known: failures in the baseline (pytest counts them as xfailed)"
OUTCOME_ROW = "(case)"


def stage_counts(cases: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{stage: {column: n}} in run order, then under ``(case)`` each item's outcome as pytest reports it, with
    known failures (``pytest.xfail`` by the gate) apart from other xfails (``verdicts``)."""
    rows: dict[str, dict[str, int]] = {s: dict.fromkeys(COLUMNS_KNOWN, 0) for s in stage_order(cases)}
    rows[OUTCOME_ROW] = dict.fromkeys(COLUMNS_KNOWN, 0)
    for case in cases:
        for name, stage in case.get("stages", {}).items():
            col = stage_column(case, name, stage.get("status", ""))
            if col:
                rows[name][col] += 1
        rows[OUTCOME_ROW][case_column(case)] += 1
    return rows


def stage_table(cases: list[dict[str, Any]], markdown: bool = False) -> str:
    """Cases by stage: how many passed, failed (error and strict XPASS count as failed), were known failures (a
    column only where there are some), skipped, xfailed."""
    counts = stage_counts(cases)
    columns = COLUMNS_KNOWN if any(c["known"] for c in counts.values()) else COLUMNS
    header = ["stage", *columns]
    rows = [[name, *(c[k] for k in columns)] for name, c in counts.items()]
    numbers = range(1, len(header))
    table = markdown_table(header, rows, right=numbers) if markdown else text_table(header, rows, right=numbers)
    return table + (("\n\n" if markdown else "\n") + KNOWN_LEGEND if "known" in columns else "")


def non_core_cases(cases: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """{non-core op that survived decomposition: the cases whose decomposed program carries it}."""
    out: dict[str, list[str]] = {}
    for case in cases:
        for op in (case.get("stages", {}).get("decomp") or {}).get("non_core") or []:
            out.setdefault(op, []).append(case["nodeid"])
    return {op: sorted(v) for op, v in sorted(out.items())}


def coverage_summary(cases: list[dict[str, Any]], core_ops: Iterable[str] | None) -> dict[str, Any]:
    """The report's ``coverage`` field."""
    reached = core_ops_reached(cases)
    out: dict[str, Any] = {}
    if core_ops is not None:
        known = set(core_ops)
        reached &= known
        out["core_ops_total"] = len(known)
    out["core_ops_reached"] = sorted(reached)
    out["non_core"] = non_core_cases(cases)
    return out


def coverage_line(coverage: dict[str, Any], verbose: bool = False, limit: int = 3) -> str:
    n = len(coverage.get("core_ops_reached", []))
    total = coverage.get("core_ops_total")
    head = (f"decomposition coverage: {n} of {total} Core ATen ops exercised ({100.0 * n / total:.0f}%)"
            if total else f"decomposition coverage: {n} Core ATen ops exercised")
    non_core = coverage.get("non_core") or {}
    if not non_core:
        line = head + "; no non-core op survived decomposition"
    else:
        parts = []
        for op, owners in non_core.items():
            shown = owners if verbose else owners[:limit]
            more = f", +{len(owners) - len(shown)} more" if len(owners) > len(shown) else ""
            parts.append(f"{op} ({len(owners)} case{'s' * (len(owners) != 1)}: {', '.join(shown)}{more})")
        line = head + f"; {len(non_core)} non-core op(s) survived decomposition: " + "; ".join(parts)
    if verbose and coverage.get("core_ops_reached"):
        line += "\nCore ATen ops exercised: " + ", ".join(coverage["core_ops_reached"])
    return line


def summary_text(cases: list[dict[str, Any]], core_ops: Iterable[str] | None, verbose: bool = False) -> str:
    """The terminal summary: the stage table, then the decomposition coverage line."""
    return stage_table(cases) + "\n" + coverage_line(coverage_summary(cases, core_ops), verbose)


def op_table(cases: list[dict[str, Any]], op_facts: dict[str, dict[str, bool]]) -> list[dict[str, Any]]:
    """One row per op any case used: core or not, decomposed by the default table or not, and which cases
    use it before and after decomposition."""
    rows: dict[str, dict[str, Any]] = {}
    for case in sorted(cases, key=lambda c: c["nodeid"]):  # arrival order differs under xdist
        decomp = case.get("stages", {}).get("decomp") or {}
        non_core = set(decomp.get("non_core") or [])
        for key, col in (("ops_before", "cases_before"), ("ops_after", "cases_after")):
            for op in decomp.get(key) or []:
                facts = op_facts.get(op, {})
                row = rows.setdefault(op, {"op": op, "core": facts.get("core"), "decomposed": facts.get("decomposed"),
                                           "cases_before": [], "cases_after": []})
                if row["core"] is None and key == "ops_after":
                    row["core"] = op not in non_core
                row[col].append(case["nodeid"])
    return [rows[op] for op in sorted(rows)]


def coverage_markdown(data: dict[str, Any]) -> str:
    """The ``--export-coverage`` op table (``data``: its JSON) in Markdown."""
    yes = {True: "yes", False: "no", None: "?"}
    rows = [[f"`{r['op']}`", yes[r["core"]], yes[r["decomposed"]], len(r["cases_before"]), len(r["cases_after"])]
            for r in data["ops"]]
    non_core = {r["op"]: r["cases_after"] for r in data["ops"] if r["cases_after"] and not r["core"]}
    lines = [f"# Decomposition coverage (torch {data.get('torch')})", "",
             coverage_line({"core_ops_reached": data["core_ops_reached"], "core_ops_total": data.get("core_ops_total"),
                            "non_core": non_core}, verbose=False), "",
             markdown_table(["op", "core", "decomposed", "cases before", "cases after"], rows, right=(3, 4))]
    return "\n".join(lines) + "\n"


def summary_markdown(report: dict[str, Any], messages: Iterable[str] = (), limit: int = 20) -> str:
    """A short Markdown summary for a CI job page, headed by the cases' verdicts as pytest counts them."""
    cases = report["cases"]
    coverage = report.get("coverage") or coverage_summary(cases, None)
    lines = [f"### torch.export check (torch {report.get('torch')}): {head(cases)}", "",
             stage_table(cases, markdown=True), "", coverage_line(coverage)]
    for title, listed in (("Failing cases:", [c for c in cases if verdict_of(c) in FAILING]),
                          ("Known failures (in the baseline; pytest: xfailed):",
                           [c for c in cases if verdict_of(c) == KNOWN])):
        if listed:
            lines += ["", title, ""]
            for c in listed[:limit]:
                stages = bad_stages(c)
                lines.append(f"- `{c['nodeid']}`: {failing_label(c)}" + (f" in {', '.join(stages)}" if stages else ""))
            if len(listed) > limit:
                lines.append(f"- ... and {len(listed) - limit} more")
    ranged = [c for c in cases if (c.get("ranges") or {}).get("dims")]
    if ranged:
        from ..memory.cost import coverage_line as range_line

        lines += ["", "Declared ranges (how far each dim was checked by shape, and by numerics):", ""]
        for c in ranged[:limit]:
            lines.append(f"- `{c['nodeid']}`: " + "; ".join(range_line(row) for row in c["ranges"]["dims"]))
        if len(ranged) > limit:
            lines.append(f"- ... and {len(ranged) - limit} more")
    messages = list(messages)
    if messages:
        lines += ["", "Baseline:", ""] + [f"- {m}" for m in messages]
    return "\n".join(lines) + "\n"


def _stages(case: dict[str, Any]) -> str:
    stages = bad_stages(case)
    return f" [{', '.join(stages)}]" if stages else ""


# ---- the end of a run in the terminal (--export-summary=full|short|off) --------------------------------------
SHORT_SKIPS = ("new: ", "error (never baselined): ", MARKED)  # what the short summary's lines say already


def _baseline_line(path: str | None, message: str) -> str:
    return "pytest-export: " + ("" if message.startswith("baseline ") else f"baseline {path}: ") + message


def short_of_max_lines(cases: list[dict[str, Any]]) -> list[str]:
    """One line per passed case whose numerics fell short of a declared max (issue #31): a pass that was partly a
    shape check says so where the user looks, naming the dims, how far numerics reached and why."""
    from ..memory.cost import short_of_max, short_text

    out = []
    for c in sorted(cases, key=lambda c: c["nodeid"]):
        short = short_of_max(c.get("ranges")) if c.get("outcome") == "passed" else []
        if short:
            out.append(f"numerics short of max: {c['nodeid']}: {short_text(short)}")
    return out


def opaque_lines(cases: list[dict[str, Any]]) -> list[str]:
    """One line per case with ops the memory count cannot see into (issue #43): which, how each was predicted,
    and what the memory guard stopped; and one per case whose program the count could not run at an in-range size
    (its memory there predicted from eager's count alone)."""
    from ..memory.cost import opaque_line

    out = []
    for c in sorted(cases, key=lambda c: c["nodeid"]):
        ranges = c.get("ranges") or {}
        if isinstance(ranges.get("opaque"), dict):
            out.append(f"{c['nodeid']}: {opaque_line(ranges['opaque'])}")
        if ranges.get("program_problem"):
            out.append(f"{c['nodeid']}: the program could not be counted by fake tensors {ranges['program_problem']}:"
                       " its memory there is predicted from eager's count alone")
    return out


def runtime_short_lines(cases: list[dict[str, Any]]) -> list[str]:
    """One line per passed case whose deployment runtime ran short of the sizes numerics reached, or was planned
    below the declared max (its memory plan did not fit the cap): the runtime's share of a pass, where the user
    looks."""
    out = []
    for c in sorted(cases, key=lambda c: c["nodeid"]):
        stages = c.get("stages") if isinstance(c.get("stages"), dict) else {}
        for name in ("onnx", "executorch"):
            st = stages.get(name)
            if c.get("outcome") == "passed" and isinstance(st, dict) and isinstance(st.get("coverage"), str):
                out.append(f"runtime short of max: {c['nodeid']}: {name}: {st['coverage']}")
    return out


def proof_lines(cases: list[dict[str, Any]], limit: int = 5) -> list[str]:
    """How the programs' guards were decided over the declared sizes (issue #41): one line for the run, and one per
    case where they were sampled or left undecided (a pass there is partly sampled)."""
    ranged = [(c, (c.get("ranges") or {}).get("guards")) for c in cases]
    ranged = [(c, g) for c, g in ranged if isinstance(g, dict)]
    if not ranged:
        return []
    proved = [c for c, g in ranged if g.get("proved")]
    out = [f"guards proved over every declared size: {len(proved)} of {len(ranged)} cases with dynamic shapes"]
    open_ = sorted((c for c, g in ranged if not g.get("proved") and c.get("outcome") == "passed"),
                   key=lambda c: c["nodeid"])
    out += [f"guards not proved: {c['nodeid']}: {c['ranges']['guards'].get('line', '')}" for c in open_[:limit]]
    if len(open_) > limit:
        out.append(f"guards not proved: ... and {len(open_) - limit} more")
    return out


def summary_mode(given: str, verbose: int) -> str:
    """``--export-summary``'s value; not given: ``short`` under ``-q``, ``full`` under ``-v``, else ``auto`` (one
    line for a run that needs no attention, else ``full``)."""
    return given or ("short" if verbose < 0 else "full" if verbose > 0 else "auto")


def needs_attention(cases: list[dict[str, Any]], messages: Iterable[str] = ()) -> bool:
    """Whether the end of a run shows its tables by default: a case that did not pass (a failure, an error, a known
    failure, an xfail, an XPASS; a skipped case is no news), a pass short of a declared max by numerics, whose
    guards were not proved over every declared size or whose memory was partly predicted from eager alone, or a
    line of the baseline's."""
    return (any(verdict_of(c) not in (PASSED, SKIPPED) for c in cases) or bool(short_of_max_lines(cases))
            or bool(runtime_short_lines(cases)) or len(proof_lines(cases)) > 1 or bool(list(messages))
            or any((c.get("ranges") or {}).get("opaque", {}).get("stopped") for c in cases)
            or any((c.get("ranges") or {}).get("program_problem") for c in cases))


def green_line(cases: list[dict[str, Any]], torch: str | None, report: str | None = None) -> str:
    """The whole end of a run that needs no attention: its cases, the stages they passed, the report's path."""
    ran = [name for name, counts in stage_counts(cases).items() if name != OUTCOME_ROW and counts["passed"]]
    where = f"; report: {report}" if report else ""
    return (f"pytest-export: {head(cases)} (torch {torch}); {len(ran)} stage{'s' * (len(ran) != 1)}: "
            f"{', '.join(ran)}{where}")


def terminal_parts(mode: str, cases: list[dict[str, Any]], data: dict[str, Any], *, verbose: bool = False,
                   baseline: str | None = None, messages: Iterable[str] = (), report: str | None = None,
                   lines: str | None = None) -> list[tuple[str | None, str]]:
    """The end of a run as ``(separator title or None, text)`` pairs: ``full`` the tables (the stage table, the
    conformance table where cases carry tags, the baseline's lines, the report's path), ``auto`` (the default) one
    line where the run needs no attention (``green_line``) and ``full`` where it does, ``short`` one line of
    verdicts and the report's path with a line per failing case and the baseline's other lines, ``off`` only
    the baseline's lines that fail the run on their own (stale entries)."""
    messages = list(messages)
    torch = data.get("torch")
    out: list[tuple[str | None, str]] = []
    if mode == "auto":
        if cases and not needs_attention(cases, messages):
            return [(None, green_line(cases, torch, report))]
        mode = "full"
    if mode == "off":
        return [(None, _baseline_line(baseline, m)) for m in messages if m.startswith("stale: ")]
    if mode == "short":
        if cases:
            where = f"; report: {report}" if report else ""
            out.append((None, f"pytest-export: {head(cases)}{where}"))
            failing = sorted((c for c in cases if verdict_of(c) in FAILING), key=lambda c: c["nodeid"])
            out += [(None, f"  {failing_label(c)}: {c['nodeid']}{_stages(c)}") for c in failing]
            out += [(None, f"  {line}") for line in short_of_max_lines(cases) + runtime_short_lines(cases)
                    + proof_lines(cases)[1:] + opaque_lines(cases)]
        out += [(None, _baseline_line(baseline, m)) for m in messages if not m.startswith(SHORT_SKIPS)]
        return out
    if cases:
        text = head(cases) + "\n" + summary_text(cases, data.get("core_ops"), verbose)
        short = short_of_max_lines(cases) + runtime_short_lines(cases) + proof_lines(cases) + opaque_lines(cases)
        if short:
            text += "\n" + "\n".join(short)
        out.append((f"export summary (torch {torch})", text))
        if any(c.get("tags") for c in cases):
            out.append((f"export conformance (torch {torch})", conformance_table(cases, data.get("core_ops"))))
    if messages:
        out.append((f"export baseline {baseline}", "\n".join(messages)))
    if report and cases:
        out.append((None, f"pytest-export: report written to {report}" + (f" (case lines: {lines})" if lines else "")))
    return out


__all__ = ["opaque_lines", "proof_lines", "runtime_short_lines", "summary_text", "stage_table", "stage_counts", "coverage_summary", "coverage_line", "op_table",
           "coverage_markdown", "summary_markdown", "non_core_cases", "terminal_parts", "summary_mode", "needs_attention",
           "green_line"]
