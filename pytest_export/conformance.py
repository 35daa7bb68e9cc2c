"""The conformance table: cases by tag and stage, and the Core ATen coverage the cases reach.

Works on the report's case dicts (the one wire format), so it renders a live session and a saved report alike.
Plain Python; no torch, no pytest.
"""

from __future__ import annotations

from typing import Any, Iterable

from .util import text_table

UNTAGGED = "(untagged)"
ALL = "all"
LEGEND = ("each cell: passed/failed/xfailed/skipped (failed counts error and xpassed too); "
          "outcome is the case's, the other columns its stages'")

_COLUMN_OF = {"passed": 0, "failed": 1, "error": 1, "xpassed": 1, "xfailed": 2, "skipped": 3}


def _counts() -> list[int]:
    return [0, 0, 0, 0]


def _cell(counts: list[int] | None) -> str:
    return "/".join(map(str, counts)) if counts else "-"


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
        return rows.setdefault(name, {"cases": 0, "outcome": _counts(), "stages": {}})

    for case in cases:
        tags = list(dict.fromkeys(case.get("tags") or [])) or [UNTAGGED]
        for name in [*tags, ALL]:
            r = row(name)
            r["cases"] += 1
            col = _COLUMN_OF.get(case.get("outcome", ""))
            if col is not None:
                r["outcome"][col] += 1
            for stage, data in case.get("stages", {}).items():
                col = _COLUMN_OF.get(data.get("status", ""))
                if col is not None:
                    r["stages"].setdefault(stage, _counts())[col] += 1

    ordered = sorted((n for n in rows if n not in (ALL, UNTAGGED)), key=str.lower)
    ordered += [n for n in (UNTAGGED, ALL) if n in rows]
    header = ["tag", "cases", "outcome", *stages]
    body = [[name, rows[name]["cases"], _cell(rows[name]["outcome"]), *(_cell(rows[name]["stages"].get(s)) for s in stages)]
            for name in ordered]
    lines = [text_table(header, body, right=range(1, len(header)),
                        rule_before=[i for i, name in enumerate(ordered) if name == ALL])]
    lines.append(LEGEND)
    if core_ops is not None:
        lines.append(core_aten_line(cases, core_ops))
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


__all__ = ["conformance_table", "core_ops_reached", "core_aten_line", "stage_order"]
