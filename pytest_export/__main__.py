"""``python -m pytest_export merge|show|diff``: reports of CI shards into one, a report as a table, two reports
compared (before and after a torch upgrade). Reads and writes report JSON only; imports no torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from .conformance import stage_order
from .report import build_report, read_report, write_json_atomic
from .summary import coverage_line, coverage_summary, stage_table
from .util import markdown_table, text_table

BAD = ("failed", "error", "xpassed")


def _load(path: str) -> dict[str, Any]:
    try:
        return read_report(path)
    except FileNotFoundError:
        raise SystemExit(f"pytest-export: {path}: no such report")
    except ValueError as exc:
        raise SystemExit(f"pytest-export: {exc}" if str(path) in str(exc) else f"pytest-export: {path}: {exc}")


def merge_reports(reports: Sequence[dict[str, Any]], names: Sequence[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """One report from the reports of shards; a case in two shards keeps the later one (with a warning)."""
    cases: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    warnings: list[str] = []
    torch_versions = sorted({r.get("torch") for r in reports if r.get("torch")})
    if len(torch_versions) > 1:
        warnings.append(f"the reports come from different torch versions: {', '.join(torch_versions)}")
    totals = [r.get("coverage", {}).get("core_ops_total") for r in reports]
    for i, r in enumerate(reports):
        name = names[i] if i < len(names) else f"report {i + 1}"
        for case in r["cases"]:
            if case["nodeid"] in cases and cases[case["nodeid"]] != case:
                warnings.append(f"{case['nodeid']} is in {origin[case['nodeid']]} and {name}; keeping {name}'s")
            cases[case["nodeid"]] = case
            origin[case["nodeid"]] = name
    total = max((t for t in totals if t), default=None)
    merged = list(cases.values())
    cov = coverage_summary(merged, None)
    if total:
        cov = {"core_ops_total": total, **cov}
    return build_report(merged, torch_versions[-1] if torch_versions else None, coverage=cov), warnings


def show_text(report: dict[str, Any], markdown: bool = False) -> str:
    cases = report["cases"]
    stages = stage_order(cases)
    header = ["case", "outcome", *stages]
    rows = [[c["nodeid"], c.get("outcome", ""), *(c.get("stages", {}).get(s, {}).get("status", "-") for s in stages)]
            for c in cases]
    if markdown:
        case_table = markdown_table(header, [[f"`{r[0]}`", *r[1:]] for r in rows])
    else:
        case_table = text_table(header, rows)
    title = f"pytest-export report: {len(cases)} cases (torch {report.get('torch')})"
    cov = report.get("coverage") or coverage_summary(cases, None)
    parts = [f"### {title}" if markdown else title, case_table, stage_table(cases, markdown=markdown), coverage_line(cov)]
    return "\n\n".join(parts) + "\n"


def _failing(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    out = {}
    for c in report["cases"]:
        bad = [n for n, s in c.get("stages", {}).items() if s.get("status") in BAD]
        if c.get("outcome") == "error" and not bad:
            bad = ["case"]
        for n in bad:
            status = c.get("outcome") if n == "case" else c["stages"][n]["status"]
            out[(c["nodeid"], n)] = status
    return out


def diff_reports(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """New failures, fixed ones, cases added and removed, and the change in decomposition coverage."""
    fb, fa = _failing(before), _failing(after)
    nb = {c["nodeid"] for c in before["cases"]}
    na = {c["nodeid"] for c in after["cases"]}
    cb = before.get("coverage") or coverage_summary(before["cases"], None)
    ca = after.get("coverage") or coverage_summary(after["cases"], None)
    rb, ra = set(cb.get("core_ops_reached", [])), set(ca.get("core_ops_reached", []))
    ncb, nca = set(cb.get("non_core", {})), set(ca.get("non_core", {}))
    return {
        "torch": [before.get("torch"), after.get("torch")],
        "new_failures": sorted(f"{n} [{s}]: {st}" for (n, s), st in fa.items() if (n, s) not in fb),
        "fixed": sorted(f"{n} [{s}]" for (n, s) in fb if (n, s) not in fa and n in na),
        "added_cases": sorted(na - nb),
        "removed_cases": sorted(nb - na),
        "core_ops": [len(rb), len(ra)],
        "core_ops_gained": sorted(ra - rb),
        "core_ops_lost": sorted(rb - ra),
        "non_core_new": sorted(nca - ncb),
        "non_core_gone": sorted(ncb - nca),
    }


def diff_text(d: dict[str, Any], markdown: bool = False) -> str:
    b, a = d["torch"]
    lines = [("### " if markdown else "") + f"pytest-export diff: torch {b} -> {a}"]

    def section(title: str, items: list[str]) -> None:
        lines.append(f"{title}: {len(items)}")
        lines.extend(f"  - {'`' + i + '`' if markdown else i}" for i in items)

    section("new failures", d["new_failures"])
    section("fixed", d["fixed"])
    section("added cases", d["added_cases"])
    section("removed cases", d["removed_cases"])
    n0, n1 = d["core_ops"]
    lines.append(f"Core ATen ops exercised: {n0} -> {n1} ({n1 - n0:+d})")
    section("  gained", d["core_ops_gained"])
    section("  lost", d["core_ops_lost"])
    section("non-core ops new after decomposition", d["non_core_new"])
    section("non-core ops gone", d["non_core_gone"])
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_export", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("merge", help="merge the reports of CI shards into one report")
    p.add_argument("reports", nargs="+", help="report JSON files (--export-report of each shard)")
    p.add_argument("-o", "--output", required=True, help="where to write the merged report")
    p = sub.add_parser("show", help="print a report as a table (or Markdown)")
    p.add_argument("report")
    p.add_argument("--markdown", action="store_true", help="Markdown instead of a text table")
    p = sub.add_parser("diff", help="compare two reports: new failures, fixed ones, coverage change "
                                    "(exit status 1 when there are new failures)")
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--markdown", action="store_true", help="Markdown instead of text")
    args = parser.parse_args(argv)

    if args.command == "merge":
        merged, warnings = merge_reports([_load(p) for p in args.reports], args.reports)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        write_json_atomic(args.output, merged)
        print(f"merged {len(args.reports)} reports ({len(merged['cases'])} cases) into {args.output}")
        return 0
    if args.command == "show":
        sys.stdout.write(show_text(_load(args.report), markdown=args.markdown))
        return 0
    d = diff_reports(_load(args.before), _load(args.after))
    sys.stdout.write(diff_text(d, markdown=args.markdown))
    return 1 if d["new_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
