"""The plan under load (issues #43, #50): the same cases run as the machine is, then beside CPU hogs, and their plans
compared case by case. A plan is a function of the model and the declaration: which probes ran numeric and which by
shape, each dim's shape and numeric max, the predicted seconds and the budget, the outcome and every stage's status
must be equal; only the wall clock may differ. Prints a row per case (predicted seconds, probing wall seconds each
way, predicted / wall idle) and ends with the cases whose plans differ (none is the goal).

    python benchmarks/bench_plan_load.py corpus/zoo/test_zoo_width.py          # the zoo's five real-width cases
    python benchmarks/bench_plan_load.py corpus/zoo --export-tags zoo-ci --hogs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(paths: list[str], extra: list[str], hogs: int) -> tuple[dict, float]:
    """The report of ``pytest <paths> --export-check`` (serially), with ``hogs`` busy processes beside it."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        with tempfile.TemporaryDirectory() as d:
            report = Path(d) / "r.json"
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pytest", *paths, "--export-check", "-p", "no:xdist", "-p",
                            "no:cacheprovider", "-q", "--export-report", str(report), *extra],
                           cwd=ROOT, capture_output=True, text=True, env={**os.environ, "CI": "true"})
            wall = time.perf_counter() - t0
            return json.loads(report.read_text()), wall
    finally:
        for p in spin:
            p.kill()


def plan_of(case: dict) -> dict:
    """What must not depend on the machine's load."""
    ranges = case.get("ranges") or {}
    guards = (case.get("stages") or {}).get("guards") or {}
    return {"outcome": case.get("outcome"), "stages": {k: v["status"] for k, v in case.get("stages", {}).items()},
            "probes": ranges.get("probes"), "budget": ranges.get("budget"),
            "predicted_s": (ranges.get("plan") or {}).get("predicted_s"),
            "dims": [(r["dim"], r["shape_max"], r["numeric_max"]) for r in ranges.get("dims", [])],
            "modes": [(p["probe"], p.get("mode")) for p in guards.get("probe_list", [])],
            "fuzz": [(d.get("mode"), sorted((k, v) for k, v in d.items() if k != "mode"))
                     for d in ((case.get("stages") or {}).get("fuzz") or {}).get("drawn", [])]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes beside the second run")
    args, extra = parser.parse_known_args()
    idle, idle_wall = run(args.paths, extra, 0)
    busy, busy_wall = run(args.paths, extra, args.hogs)
    by_id = {c["nodeid"]: c for c in busy["cases"]}
    print(f"idle run {idle_wall:.0f} s; beside {args.hogs} hogs {busy_wall:.0f} s")
    print("| case | outcome | numerics reach (of the declared max) | probes numeric / by shape | budget s | predicted s | "
          "probing wall s, idle | beside the hogs | predicted / wall, idle |")
    print("|---|---|---|---|---|---|---|---|---|")
    differ = []
    for case in idle["cases"]:
        other = by_id.get(case["nodeid"])
        ranges = case.get("ranges") or {}
        plan = ranges.get("plan") or {}
        wall_busy = ((other or {}).get("ranges") or {}).get("plan", {}).get("wall_s")
        ratio = plan["predicted_s"] / plan["wall_s"] if plan.get("wall_s") else float("nan")
        reach = ", ".join(f"{r['dim']} {r['numeric_max']} of {r['declared'][1]}" for r in ranges.get("dims", []))
        probes = ranges.get("probes") or {}
        budget = "no limit" if ranges.get("budget") is None else f"{ranges['budget']:.3g}"
        print(f"| {case['nodeid'].split('::')[-1]} | {case['outcome']} | {reach} | {probes.get('numeric')} / "
              f"{probes.get('fake')} | {budget} | {plan.get('predicted_s')} | {plan.get('wall_s')} | "
              f"{wall_busy} | {ratio:.2f} |")
        if other is None or plan_of(case) != plan_of(other):
            differ.append(case["nodeid"])
    print(f"\nplans that differ idle and under load: {', '.join(differ) or 'none'}")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
