"""Memory predictions against what each numeric probe took: the zoo, per probe (issue #43).

The harness runs a probe with real tensors only where its predicted memory fits the cap, so a prediction that
misses low runs the machine out of memory, and one that misses high gives up numerics the machine could afford.
This runs ``pytest <paths> --export-check`` in a fresh process with the ``prediction_probe`` plugin, which
measures every numeric probe's resident growth beside its prediction, and prints per case the ratio
predicted / measured over its judged probes (min, median, max) and how many are within 2x both ways. Judged: the
in-range probes predicted from their own fake count. A probe past a max runs eager alone where the program refuses
it; one no larger in any dim than a probe already counted is planned from that one's prediction, a bound rather
than a prediction (``sizing._bounded``); and where both the prediction and the measurement are under ``--floor``
MB, the allocator's reuse of freed memory and page granularity, not the prediction, decide the ratio.

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


def measure(paths: list[str], extra: list[str]) -> list[dict]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["corpus/zoo"])
    parser.add_argument("--tags", default="zoo-ci", help="--export-tags of the run ('' for all)")
    parser.add_argument("--floor", type=float, default=16.0, help="MB under which a probe is not judged")
    parser.add_argument("--each", action="store_true", help="every judged probe, not only those outside 2x")
    args = parser.parse_args()
    probes = measure(args.paths, ["--export-tags", args.tags] if args.tags else [])
    lines, total = table(probes, args.floor)
    print("\n".join(lines))
    print(f"\n{total['probes']} numeric probes, {total['judged']} counted and at or above {args.floor:g} MB: "
          f"{total['within']} within 2x both ways")
    sides = [("predicted under half", total["low"]), ("predicted over twice", total["high"])]
    for side, rows in sides + ([("judged", total["judged_rows"])] if args.each else []):
        for case, r in rows:
            print(f"  {side}: {case} at {r['sizes']}: predicted {r['predicted'] / 1e6:.0f} MB, "
                  f"measured {r['measured'] / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
