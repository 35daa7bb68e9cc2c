"""Memory and time predictions against what each numeric probe took: the zoo, per probe (issues #43, #50).

The harness runs a probe with real tensors only where its predicted memory fits the cap, so a prediction that
misses low runs the machine out of memory, and one that misses high gives up numerics the machine could afford.
This runs ``pytest <paths> --export-check`` in a fresh process with the ``prediction_probe`` plugin, which
measures every numeric probe's resident growth beside its prediction, and prints per case the ratio
predicted / measured over its judged probes (min, median, max) and how many are within 2x both ways. Judged: the
in-range probes predicted from their own fake count. A probe past a max runs eager alone where the program refuses
it; one no larger in any dim than a probe already counted is planned from that one's prediction, a bound rather
than a prediction (``sizing._bounded``); and where both the prediction and the measurement are under ``--floor``
MB, the allocator's reuse of freed memory and page granularity, not the prediction, decide the ratio.

Time (issue #50): the plan charges a numeric probe its predicted seconds for eager's forward and the program's
(``Plan.seconds``, at the nominal rates). Per case, the predicted seconds of every numeric forward of its in-range
probes (half a probe's ``Plan.seconds`` per call) are added up beside the wall seconds of the same calls, and the
ratio predicted / wall printed, with the median and the worst case over the cases; the goal is 0.67x-1.5x.

    python benchmarks/bench_prediction.py                                  # the zoo's CI slice
    python benchmarks/bench_prediction.py corpus/zoo/test_zoo_width.py     # real widths (minutes each)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def measure(paths: list[str], extra: list[str], calls: bool = False) -> list[dict]:
    """Every numeric probe's last line (its high-water mark over all its calls); ``calls``: every call's line."""
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "probes.jsonl"
        env = {**os.environ, "PREDICTION_LOG": str(log),
               "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        argv = [sys.executable, "-m", "pytest", *paths, "--export-check", "-p", "no:xdist", "-p", "no:cacheprovider",
                "-p", "prediction_probe", "-q", *extra]
        out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        if out.returncode not in (0, 1):
            raise SystemExit(f"pytest failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if calls:
        return rows
    last: dict[tuple, dict] = {}
    for row in rows:  # a probe's last line holds its high-water mark over all its calls
        last[(row["case"], row["probe"])] = row
    return list(last.values())


def table(probes: list[dict], floor: float) -> tuple[list[str], dict]:
    by_case: dict[str, list[dict]] = {}
    for p in probes:
        by_case.setdefault(p["case"].split("::")[-1], []).append(p)
    lines = ["| case | numeric probes | judged | ratio min | median | max | within 2x |", "|---|---|---|---|---|---|---|"]
    total = {"probes": 0, "judged": 0, "within": 0, "low": [], "high": [], "judged_rows": []}
    for case, rows in sorted(by_case.items()):
        judged = [r for r in rows if r["counted"] and r["in_range"] and max(r["predicted"], r["measured"]) >= floor * 1e6]
        ratios = [r["predicted"] / max(r["measured"], 1) for r in judged]
        within = sum(0.5 <= x <= 2 for x in ratios)
        total["probes"] += len(rows)
        total["judged"] += len(judged)
        total["within"] += within
        total["low"] += [(case, r) for r, x in zip(judged, ratios) if x < 0.5]
        total["high"] += [(case, r) for r, x in zip(judged, ratios) if x > 2]
        total["judged_rows"] += [(case, r) for r in judged]
        if ratios:
            lines.append(f"| {case} | {len(rows)} | {len(judged)} | {min(ratios):.2f} | "
                         f"{statistics.median(ratios):.2f} | {max(ratios):.2f} | {within} of {len(judged)} |")
        else:
            lines.append(f"| {case} | {len(rows)} | 0 | - | - | - | - |")
    return lines, total


def time_table(calls: list[dict]) -> tuple[list[str], list[float]]:
    """Per case, predicted vs wall seconds of the numeric forwards of its in-range probes (see the module's doc)."""
    by_case: dict[str, list[float]] = {}
    for c in calls:
        if c["in_range"] and c.get("seconds"):
            row = by_case.setdefault(c["case"].split("::")[-1], [0.0, 0.0, 0])
            row[0] += c["predicted_s"] / 2
            row[1] += c["seconds"]
            row[2] += 1
    lines = ["| case | numeric forwards | predicted s | wall s | predicted / wall |", "|---|---|---|---|---|"]
    ratios = []
    for case, (predicted, wall, n) in sorted(by_case.items()):
        ratios.append(predicted / wall)
        lines.append(f"| {case} | {n} | {predicted:.2f} | {wall:.2f} | {predicted / wall:.2f} |")
    return lines, ratios


def time_summary(ratios: list[float]) -> str:
    worst = max(ratios, key=lambda r: max(r, 1 / r))
    inside = sum(0.67 <= r <= 1.5 for r in ratios)
    return (f"predicted / wall per case: median {statistics.median(ratios):.2f}, worst {worst:.2f}, "
            f"{inside} of {len(ratios)} within 0.67x-1.5x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["corpus/zoo"])
    parser.add_argument("--tags", default="zoo-ci", help="--export-tags of the run ('' for all)")
    parser.add_argument("--floor", type=float, default=16.0, help="MB under which a probe is not judged")
    parser.add_argument("--each", action="store_true", help="every judged probe, not only those outside 2x")
    args = parser.parse_args()
    calls = measure(args.paths, ["--export-tags", args.tags] if args.tags else [], calls=True)
    last: dict[tuple, dict] = {(c["case"], c["probe"]): c for c in calls}
    probes = list(last.values())
    lines, total = table(probes, args.floor)
    print("\n".join(lines))
    print(f"\n{total['probes']} numeric probes, {total['judged']} counted and at or above {args.floor:g} MB: "
          f"{total['within']} within 2x both ways")
    sides = [("predicted under half", total["low"]), ("predicted over twice", total["high"])]
    for side, rows in sides + ([("judged", total["judged_rows"])] if args.each else []):
        for case, r in rows:
            print(f"  {side}: {case} at {r['sizes']}: predicted {r['predicted'] / 1e6:.0f} MB, "
                  f"measured {r['measured'] / 1e6:.0f} MB")
    lines, ratios = time_table(calls)
    print("\n" + "\n".join(lines))
    if ratios:
        print("\n" + time_summary(ratios))


if __name__ == "__main__":
    main()
