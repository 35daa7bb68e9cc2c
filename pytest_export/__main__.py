"""``python -m pytest_export merge|show|diff|gate|table|durations``: reports of CI shards into one, a report as a
table, two reports compared (before and after a torch upgrade), the baseline gate applied once to a merged report,
the conformance table per model and torch version, and the cases' durations for pytest-split. Reads and writes report JSON only (or the case lines a run stopped from
outside left: a partial report); imports no torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from .declare.options import SessionOptions, UsageError
from .gate import baseline as bl
from .gate.judge import judge_report
from .gate.scope import Scope
from .gate.verdicts import said
from .report.conformance import model_table, stage_order
from .report.files import (build_report, lines_path, load_report, partial_text, write_json_atomic, write_summary_md,
                           write_text_atomic)
from .report.schema import FIX
from .report.summary import coverage_line, coverage_summary, stage_table
from .util import markdown_table, output_problem, plural, text_table

BAD = ("failed", "error", "xpassed")
USAGE_ERROR = 4  # pytest's exit status for a usage error: the in-run gate's for a missing or broken baseline


def _load(path: str) -> dict[str, Any]:
    """A report (or the partial one a ``.jsonl`` file of case lines makes, with a note on each line it skips), or
    exit with the usage error's status and a message naming the file (and, for a field that is not what the
    commands read, the case and the field: ``report.schema``), never a traceback."""
    fix = ("; write it with pytest --export-check --export-report PATH, or merge the shards' reports with "
           "python -m pytest_export merge")
    try:
        report, notes = load_report(path)
        for note in notes:
            print(f"pytest-export: note: {note}", file=sys.stderr)
        return report
    except FileNotFoundError:
        problem = f"{path}: no such report"
    except OSError as exc:
        problem = f"{path}: cannot be read ({exc.strerror or exc})"
    except (ValueError, RecursionError) as exc:  # not JSON, not a report, a field the schema refuses
        problem = str(exc) if str(path) in str(exc) else f"{path}: {exc}"
        fix = "" if FIX in problem else fix
    print(f"pytest-export: {problem}{fix}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


def _output(option: str, path: str | None) -> None:
    """An output path checked as the in-run options are (``declare.settings.output_problem``): a usage error naming
    the option, the path and why, exit status 4, before anything is read or written."""
    why = output_problem(path) if path else None
    if why:
        print(f"pytest-export: {option} {path}: {why}; give a path in a writable directory (or make the directory "
              "writable)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def _written(option: str, path: str, write: Any) -> None:
    """``write()``, where the file still cannot be written (a race, a full disk): the usage error, no traceback."""
    try:
        write()
    except OSError as exc:
        print(f"pytest-export: {option} {path}: cannot be written ({exc.strerror or exc})", file=sys.stderr)
        raise SystemExit(USAGE_ERROR) from None


def merge_reports(reports: Sequence[dict[str, Any]], names: Sequence[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """One report from the reports of shards; a case in two shards keeps the later one (with a warning). It is
    ``partial`` where one of them is (a run stopped from outside), with the cases they were running when it
    stopped (``unfinished``) that no other report holds, or where a pytest-split group has no finished report.
    Its ``scope`` is theirs merged (``Scope.merged``)."""
    cases: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    warnings: list[str] = []
    torch_versions = sorted({r.get("torch") for r in reports if r.get("torch")})
    if len(torch_versions) > 1:
        warnings.append(f"the reports come from different torch versions: {', '.join(torch_versions)}")
    totals = [(r.get("coverage") or {}).get("core_ops_total") for r in reports]
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
    partial = [r for r in reports if r.get("partial") or r.get("interrupted")]
    # what the runs covered, merged (#24): the groups of a split add up; a merge short of one is partial
    scopes = [Scope.from_json(r["scope"]) if "scope" in r else None for r in reports]
    scope = Scope.merged(scopes) if any(s is not None for s in scopes) else None
    missing = bool(scope and scope.missing_groups)
    out = build_report(merged, torch_versions[-1] if torch_versions else None, partial=bool(partial) or missing,
                       coverage=cov, **({"scope": scope.to_json()} if scope else {}))
    unfinished = sorted({n for r in partial for n in r.get("unfinished") or () if n not in cases})
    if unfinished:
        out["unfinished"] = unfinished
    return out, warnings


def show_text(report: dict[str, Any], markdown: bool = False) -> str:
    cases = report["cases"]
    stages = stage_order(cases)
    header = ["case", "outcome", *stages]
    # a failure the baseline knows is `known`, as in the stage table and the deployment matrix (#32)
    rows = [[c["nodeid"], said(c), *(said(c, s) if s in c.get("stages", {}) else "-" for s in stages)] for c in cases]
    if markdown:
        case_table = markdown_table(header, [[f"`{r[0]}`", *r[1:]] for r in rows])
    else:
        case_table = text_table(header, rows)
    title = f"pytest-export report: {len(cases)} cases (torch {report.get('torch')})"
    cov = report.get("coverage") or coverage_summary(cases, None)
    partial = partial_text(report)
    if partial:
        title += f"\n{partial}"
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


def gate(report_path: str, baseline_path: str, *, warn_stale: bool = False, markdown: str | None = None,
         environ: Mapping[str, str] = os.environ) -> int:
    """``gate REPORT --baseline PATH``: the in-run gate's rules, messages and exit statuses, applied once to a
    whole run's report (issue #19): 0 when nothing is new or stale, 1 when something is, 4 for a usage error.
    A partial report (a run stopped from outside, or its case lines: issue #23) never passes: its cases are
    judged, and the entries of the cases it lacks are left alone (neither stale nor confirmed). Nor does the report of
    a run with collection errors or stopped early (-x): pytest failed it whatever its cases say (#32)."""
    step = environ.get("GITHUB_STEP_SUMMARY")
    _output("--markdown", markdown)
    _output("$GITHUB_STEP_SUMMARY", step if markdown is None else None)
    report = _load(report_path)
    try:
        base = bl.load(baseline_path, option="--baseline")
    except UsageError as exc:
        print(f"pytest-export: {exc}", file=sys.stderr)
        return USAGE_ERROR
    options = SessionOptions(check=True, baseline=baseline_path, baseline_warn_stale=warn_stale)
    partial = partial_text(report, report_path)
    # the in-run gate's scope, recorded in the report (#24); a report written before scopes were is a whole run
    scope = Scope.from_json(report["scope"]) if "scope" in report else Scope()
    incomplete = scope.incomplete()  # files pytest could not collect, a stop (-x): the run failed on them (#32)
    if partial:  # a partial report lacks cases of its run: none of its entries is gone
        scope = dataclasses.replace(scope, stopped=scope.stopped or "the report is partial")
    verdict = judge_report(base, report["cases"], options, scope)
    n = verdict.counts
    found = ["the report is partial"] if partial else []
    if incomplete:
        found.append(plural(len(scope.errors), "collection error") if scope.errors else "the run stopped early")
    found += [plural(n["new"], "case with a new failure or non-core op", "cases with a new failure or non-core op"),
             plural(n["errors"], "error"), plural(n["failed"], "other failing case"),
             plural(n["stale"], "stale entry", "stale entries") + ("" if verdict.failed else " (a warning)")]
    found = [f for f in found if not f.startswith("0 ")]
    if verdict.failed or partial or incomplete:
        line = f"gate failed: {', '.join(found)}"
    else:
        line = f"gate passed: {', '.join(found) or 'nothing new or stale'}, {plural(n['known'], 'known failure')}"
    line += f"; {plural(n['cases'], 'case')} of {report_path} against the baseline {baseline_path}"
    head = [partial] if partial else []
    head += [f"incomplete run: {report_path}: {incomplete}"] if incomplete else []
    print("\n".join([*head, f"export baseline {baseline_path}", *verdict.messages, line]))
    md_path, append = markdown, False
    if step and (md_path is None or os.path.abspath(md_path) == os.path.abspath(step)):
        md_path, append = step, True  # the job page's file is shared by the job's steps: add, never replace
    if md_path:
        # the cases as this gate judged them (a merged gate finds what no shard could: a stale entry, #26)
        judged = {**report, "cases": verdict.cases} if verdict.cases else report
        _written("--markdown" if md_path == markdown else "$GITHUB_STEP_SUMMARY", md_path,
                 lambda: write_summary_md(md_path, judged, [*head, *verdict.messages, line], append=append))
    return 1 if verdict.failed or partial or incomplete else 0


def durations(report_paths: Sequence[str], output: str) -> int:
    """``durations REPORT... -o PATH``: each case's ``duration`` as pytest-split's ``--store-durations`` writes
    it (a JSON object {nodeid: seconds}, sorted, indented by 4), merged into PATH as pytest-split merges: the
    entries of tests that are in no report are kept."""
    _output("-o", output)
    found: dict[str, float] = {}
    for path in report_paths:
        cases = [c for c in _load(path)["cases"] if isinstance(c.get("duration"), (int, float))]
        if not cases:
            print(f"warning: {path}: no case has a duration (a report of pytest-export 0.1 or older?)", file=sys.stderr)
        found.update((c["nodeid"], float(c["duration"])) for c in cases)
    stored: Any = {}
    if os.path.exists(output):
        try:
            with open(output, encoding="utf-8") as fh:
                stored = json.load(fh)
            if isinstance(stored, list):  # pytest-split's older list of [nodeid, seconds] pairs, read as it does
                stored = dict(stored)
        except (OSError, ValueError, TypeError):
            stored = None
        if not isinstance(stored, dict):
            print(f"pytest-export: {output}: not a pytest-split durations file (a JSON object {{test id: seconds}}); "
                  "fix it or remove it", file=sys.stderr)
            return 1
    kept = len(set(stored) - set(found))
    merged = {**stored, **found}
    _written("-o", output, lambda: write_text_atomic(output, json.dumps(merged, sort_keys=True, indent=4) + "\n"))
    print(f"wrote the durations of {plural(len(found), 'case')} to {output}"
          + (f" (kept {plural(kept, 'other test')} it had)" if kept else ""))
    return 0


def table(args: argparse.Namespace) -> int:
    """``table``: the per-model table written or printed; with ``--check``, compared with the expected file."""
    import difflib

    if args.output:
        _output("-o", args.output)
    text = model_table([_load(p) for p in args.reports], title=args.title)
    if args.output:
        _written("-o", args.output, lambda: write_text_atomic(args.output, text))
    elif not args.check:
        sys.stdout.write(text)
    if args.check:
        try:
            expected = Path(args.check).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"pytest-export: --check {args.check}: cannot be read ({exc.strerror or exc})", file=sys.stderr)
            return USAGE_ERROR
        if expected != text:
            sys.stdout.writelines(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                                       args.check, "this run"))
            return 1
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_export",
                                     description=" ".join(__doc__.split("\n\n")[0].split()).replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("merge", help="merge the reports of CI shards into one report")
    p.add_argument("reports", nargs="+", help="report JSON files (--export-report of each shard), or the .jsonl "
                                              "case lines of a run stopped before it wrote its report (the lines "
                                              "of a report also given are left out)")
    p.add_argument("-o", "--output", required=True, help="where to write the merged report")
    p = sub.add_parser("show", help="print a report as a table (or Markdown)")
    p.add_argument("report")
    p.add_argument("--markdown", action="store_true", help="Markdown instead of a text table")
    p = sub.add_parser("diff", help="compare two reports: new failures, fixed ones, coverage change "
                                    "(exit status 1 when there are new failures)")
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--markdown", action="store_true", help="Markdown instead of text")
    p = sub.add_parser("gate", help="the baseline gate applied once to a whole run's report (the merged report of "
                                    "CI shards): exit status 1 on new failures, new non-core ops, errors, stale "
                                    "entries, a partial report or one of a run that had collection errors or stopped "
                                    "early, 4 when the report or the baseline is missing or malformed")
    p.add_argument("report", help="the report (python -m pytest_export merge of the shards' reports), or the "
                                   ".jsonl case lines of a run stopped before it wrote its report (partial)")
    p.add_argument("--baseline", required=True, metavar="PATH",
                   help="the baseline file (the shards' --export-baseline)")
    p.add_argument("--warn-stale", action="store_true", help="stale entries warn instead of failing "
                                                             "(as --export-baseline-warn-stale)")
    p.add_argument("--markdown", metavar="PATH", help="write the Markdown summary to PATH (default: appended to "
                                                      "$GITHUB_STEP_SUMMARY when that is set)")
    p = sub.add_parser("table", help="the conformance table per model and torch version (one report per version), "
                                     "in Markdown; with --check, exit status 1 and the diff where it differs from "
                                     "the expected file")
    p.add_argument("reports", nargs="+", help="report JSON files, one per torch version")
    p.add_argument("-o", "--output", help="write the table to PATH (default: standard output)")
    p.add_argument("--check", metavar="PATH", help="the expected table: exit status 1 where the new one differs")
    p.add_argument("--title", default="Conformance per model", help="the table's heading")
    p = sub.add_parser("durations", help="write the cases' durations in pytest-split's format, so that the next "
                                         "run balances its shards by what export costs")
    p.add_argument("reports", nargs="+", help="report JSON files (the merged one, or each shard's)")
    p.add_argument("-o", "--output", required=True, help="the durations file (pytest-split's --durations-path, "
                                                         "default .test_durations); entries of other tests are kept")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)

    if args.command == "merge":
        # a run's case lines beside its report hold the same cases: `merge shard-*.json*` takes the report where
        # the run wrote one, and the lines of a run killed before it could
        _output("-o", args.output)
        written = {lines_path(p) for p in args.reports if not p.endswith(".jsonl")}
        paths = [p for p in args.reports if Path(p) not in written]
        reports = [_load(p) for p in paths]
        merged, warnings = merge_reports(reports, paths)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        _written("-o", args.output, lambda: write_json_atomic(args.output, merged))
        for path, report in zip(paths, reports):
            if partial_text(report, path):
                print(partial_text(report, path))
        short = merged["partial"] and not any(partial_text(r) for r in reports)  # a pytest-split group is missing
        if short:
            print(partial_text(merged, args.output))
        print(f"merged {len(paths)} reports ({len(merged['cases'])} cases) into {args.output}"
              + (" (partial: a pytest-split group has no finished report)" if short else
                 " (partial: a report it merges is partial)" if merged["partial"] else ""))
        return 0
    if args.command == "gate":
        return gate(args.report, args.baseline, warn_stale=args.warn_stale, markdown=args.markdown)
    if args.command == "durations":
        return durations(args.reports, args.output)
    if args.command == "table":
        return table(args)
    if args.command == "show":
        sys.stdout.write(show_text(_load(args.report), markdown=args.markdown))
        return 0
    d = diff_reports(_load(args.before), _load(args.after))
    sys.stdout.write(diff_text(d, markdown=args.markdown))
    return 1 if d["new_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
