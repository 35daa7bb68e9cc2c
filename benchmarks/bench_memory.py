"""Memory at real width: the harness's peak resident memory beside the least any export check can use (issue #31).

For real-width models of the zoo (``corpus/zoo/test_zoo_width.py``: BERT-base, TinyLlama's width at 2 layers,
ResNet-50), side by side in one run, each in a fresh interpreter of its own:

- the floor: the case's test function builds the model and its example inputs; ``torch.export.export`` with the
  marker's ``dynamic_shapes``; one eager forward and one ``ep.module()`` forward at the example inputs under
  ``torch.no_grad()``. Nothing less checks an export;
- the harness: ``pytest <the case> --export-check`` with default settings (``-p no:cacheprovider``, the JSON
  report to read the case's verdict and its ``ranges``).

Printed per model: the peak resident memory of each process (its ``ru_maxrss``, read with ``wait4``: the child's
own, not the largest of the run's children), their ratio, the wall time of each process (interpreter start and
imports included on both sides), the case's verdict, and per declared dim how far the harness checked it.
Goal: the harness's peak <= 1.3x the floor's.

    python benchmarks/bench_memory.py              # the three models
    python benchmarks/bench_memory.py bert-base    # some of them
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE_FILE = "corpus/zoo/test_zoo_width.py"
GOAL = 1.3

# name -> the test function in CASE_FILE
MODELS = {"bert-base": "test_bert_base", "tinyllama-2l": "test_tinyllama_width_2_layers",
          "resnet-50": "test_resnet50"}
QUICK = ("bert-base",)

FLOOR = r'''
import os, sys
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, sys.argv[1])
import torch
import test_zoo_width as width

fn = getattr(width, sys.argv[2])
mark = next(m for m in fn.pytestmark if m.name == "exportable")
model, args, kwargs = fn()
ep = torch.export.export(model, args, kwargs, dynamic_shapes=mark.kwargs.get("dynamic_shapes"),
                         strict=mark.kwargs.get("strict", False))
with torch.no_grad():
    model(*args, **kwargs)
    ep.module()(*args, **kwargs)
'''


def run_measured(cmd: list[str], timeout: float = 1800) -> dict:
    """Run ``cmd`` from the repository root: its exit status, wall time, peak RSS (bytes) and output's tail."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (and its waited-for children's)
        finally:
            killer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        tail = out.read()[-3000:]
    return {"rc": proc.returncode, "wall": wall, "peak": usage.ru_maxrss * 1024, "tail": tail}


def floor(test: str) -> dict:
    return run_measured([sys.executable, "-c", FLOOR, str(ROOT / "corpus" / "zoo"), test])


def harness(test: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        res = run_measured([sys.executable, "-m", "pytest", f"{CASE_FILE}::{test}", "--export-check", "-q",
                            "-p", "no:cacheprovider", "--export-report", str(report)])
        cases = json.loads(report.read_text())["cases"] if report.exists() else []
    case = cases[0] if cases else {}
    return {**res, "verdict": case.get("verdict") or case.get("outcome") or "no report",
            "ranges": (case.get("ranges") or {}).get("dims", [])}


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB"


def measure(models: tuple[str, ...] = tuple(MODELS)) -> dict | None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    from pytest_export.cost import coverage_line

    rows = []
    for name in models:
        test = MODELS[name]
        f, h = floor(test), harness(test)
        row = {"name": name, "floor": f, "harness": h, "ratio": h["peak"] / f["peak"] if f["peak"] else None}
        if f["rc"] != 0:
            row["error"] = "floor failed: " + (f["tail"].strip().splitlines() or ["?"])[-1]
        elif h["verdict"] == "no report":
            row["error"] = f"harness wrote no report (exit {h['rc']}): " + (h["tail"].strip().splitlines() or ["?"])[-1]
        rows.append(row)
    head = ("model", "floor peak", "harness peak", "ratio", "floor wall", "harness wall", "verdict")
    body = []
    for r in rows:
        f, h = r["floor"], r["harness"]
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        body.append((r["name"], _gb(f["peak"]), _gb(h["peak"]), ratio, f"{f['wall']:.1f} s", f"{h['wall']:.1f} s",
                     r.get("error") or h["verdict"]))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  " + "  ".join(f"{{:{'<' if i in (0, 6) else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*row).rstrip() for row in (head, *body)]
    for r in rows:
        for d in r["harness"]["ranges"]:
            lines.append(f"  {r['name']}: {coverage_line(d)}")
    ok = [r for r in rows if r["ratio"] and "error" not in r]
    worst = max((r["ratio"] for r in ok), default=None)
    summary = ("harness peak / floor peak: " + ", ".join(f"{r['name']} {r['ratio']:.2f}x" for r in ok)
               + (f"; worst {worst:.2f}x" if worst else "") + f" (goal <= {GOAL}x)")
    return {"name": "memory", "rows": rows, "worst": worst, "text": "\n".join([summary, *lines])}


if __name__ == "__main__":
    res = measure(tuple(sys.argv[1:]) or tuple(MODELS))
    print("(not available: the [zoo] extra is not installed)" if res is None else res["text"])
