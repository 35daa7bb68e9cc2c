"""Memory at real width: the harness's peak resident memory beside the least any export check can use (issue #31).

For real-width models of the zoo (``corpus/zoo/test_zoo_width.py``: BERT-base, TinyLlama's width at 2 layers,
ResNet-50), side by side in one run, each in a fresh interpreter of its own:

- the floor: the case's test function builds the model and its example inputs; ``torch.export.export`` with the
  marker's ``dynamic_shapes``; one eager forward and one ``ep.module()`` forward at the example inputs under
  ``torch.no_grad()``. Nothing less checks an export;
- the harness: ``pytest <the case> --export-check`` with default settings (``-p no:cacheprovider``, the JSON
  report to read the case's verdict and its ``ranges``).

- the edges floor: the floor, then eager and ``ep.module()`` at each edge, one at a time under ``torch.no_grad()``:
  each declared dim at its max with the others at their min. The harness must run these with real tensors (issue
  #31, "numerics where defects live"), so no check that keeps that promise uses less;
- the same-work floor: the floor, then eager and ``ep.module()`` at the two largest in-range probes the harness
  ran with real tensors (from ``guards``' ``probe_list`` and the report's ``ranges.largest``, which covers
  ``fuzz`` too), one at a time under ``torch.no_grad()``:
  raw torch doing the harness's largest numeric work. A probe larger than the example needs more memory than the
  example in any check; the harness's peak beside this floor is its own overhead.

Printed per model: the peak resident memory of each process (its ``ru_maxrss``, read with ``wait4``: the child's
own, not the largest of the run's children), their ratio, the wall time of each process (interpreter start and
imports included on both sides), the case's verdict, and per declared dim how far the harness checked it.
Goal: the harness's peak <= 1.3x the same-work floor's, and <= 1.3x the example's floor wherever raw torch at the
edges stays within that (where the edges alone need more, no check that runs them numeric can meet it).

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


# The same numeric work in raw torch: the floor, then eager and the program at the two largest probes the
# harness ran with real tensors (by the elements of their inputs), one at a time. A probe larger than
# the example needs more memory than the example does, in any check: this floor is what that costs.
SAME_WORK = FLOOR + r'''
import inspect, json
from torch.export.dynamic_shapes import _DerivedDim

probes = json.loads(sys.argv[3])  # each: root dim name -> size, as the report's probe_list names them
inputs = {**dict(enumerate(args)), **kwargs}
params = list(inspect.signature(model.forward).parameters)
spec = mark.kwargs.get("dynamic_shapes") or {}
declared = {(params.index(k) if k in params and k not in kwargs else k): v for k, v in spec.items()}

def size(dim, values):
    return dim.fn(size(dim.root, values)) if isinstance(dim, _DerivedDim) else values[dim.__name__]

def resized(values):
    out = dict(inputs)
    for key, axes in declared.items():
        for axis, dim in (axes or {}).items():
            x = out[key]
            out[key] = torch.index_select(x, axis, torch.arange(size(dim, values)) % x.shape[axis])  # ids stay valid
    return [out[i] for i in range(len(args))], {k: out[k] for k in kwargs}

def elements(values):
    a, k = resized(values)
    return sum(t.numel() for t in [*a, *k.values()] if isinstance(t, torch.Tensor))

program = ep.module()
for values in sorted(probes, key=elements)[-int(sys.argv[4]):]:
    a, k = resized(values)
    with torch.no_grad():
        out = model(*a, **k)
        del out
        out = program(*a, **k)
        del out, a, k
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


def floor(test: str, probes: list[dict[str, int]] | None = None, top: int = 2) -> dict:
    """The example's floor, or (``probes``) the floor then raw torch at the ``top`` largest of ``probes``."""
    if probes is None:
        return run_measured([sys.executable, "-c", FLOOR, str(ROOT / "corpus" / "zoo"), test])
    return run_measured([sys.executable, "-c", SAME_WORK, str(ROOT / "corpus" / "zoo"), test, json.dumps(probes),
                         str(top)])


def edges(ranges: list[dict]) -> list[dict[str, int]]:
    """The edges the harness must run numeric (issue #31): each declared dim at its max, the others at their min."""
    low = {d["dim"]: d["declared"][0] for d in ranges}
    return [{**low, d["dim"]: d["declared"][1]} for d in ranges if d["declared"][1] is not None]


def harness(test: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        res = run_measured([sys.executable, "-m", "pytest", f"{CASE_FILE}::{test}", "--export-check", "-q",
                            "-p", "no:cacheprovider", "--export-report", str(report)])
        cases = json.loads(report.read_text())["cases"] if report.exists() else []
    case = cases[0] if cases else {}
    probes = ((case.get("stages") or {}).get("guards") or {}).get("probe_list") or []
    numeric = [dict((k.strip(), int(v)) for k, v in (part.split("=") for part in p["probe"].split(",")))
               for p in probes if p.get("mode") == "numeric" and p.get("kind") == "in-range"]
    largest = ((case.get("ranges") or {}).get("largest") or {}).get("sizes")
    numeric += [largest] if largest else []  # fuzz's too: the probe predicted to need the most memory
    return {**res, "verdict": case.get("verdict") or case.get("outcome") or "no report",
            "ranges": (case.get("ranges") or {}).get("dims", []), "numeric": numeric}


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB"


def measure(models: tuple[str, ...] = tuple(MODELS)) -> dict | None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    from pytest_export.memory.cost import coverage_line

    rows = []
    for name in models:
        test = MODELS[name]
        f, h = floor(test), harness(test)
        none = {"rc": 1, "peak": 0, "wall": 0.0, "tail": "no numeric probe"}
        e = floor(test, h["numeric"]) if h["numeric"] and f["rc"] == 0 else none
        g = floor(test, edges(h["ranges"]), top=len(h["ranges"])) if h["ranges"] and f["rc"] == 0 else none
        row = {"name": name, "floor": f, "harness": h, "same": e, "edges": g,
               "ratio": h["peak"] / f["peak"] if f["peak"] else None,
               "same_ratio": h["peak"] / e["peak"] if e["peak"] else None,
               "edges_over_floor": g["peak"] / f["peak"] if g["peak"] and f["peak"] else None}
        if f["rc"] != 0 or e["rc"] != 0 or g["rc"] != 0:
            bad = next(x for x in (f, e, g) if x["rc"])
            row["error"] = "floor failed: " + (bad["tail"].strip().splitlines() or ["?"])[-1]
        elif h["verdict"] == "no report":
            row["error"] = f"harness wrote no report (exit {h['rc']}): " + (h["tail"].strip().splitlines() or ["?"])[-1]
        rows.append(row)
    head = ("model", "floor peak", "edges floor", "same-work floor", "harness peak", "ratio", "same-work ratio",
            "floor wall", "harness wall", "verdict")
    body = []

    def x(v: float | None) -> str:
        return f"{v:.2f}x" if v else "-"

    for r in rows:
        f, g, e, h = r["floor"], r["edges"], r["same"], r["harness"]
        body.append((r["name"], _gb(f["peak"]), f"{_gb(g['peak'])} ({x(r['edges_over_floor'])})", _gb(e["peak"]),
                     _gb(h["peak"]), x(r["ratio"]), x(r["same_ratio"]), f"{f['wall']:.1f} s", f"{h['wall']:.1f} s",
                     r.get("error") or h["verdict"]))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt = "  " + "  ".join(f"{{:{'<' if i in (0, 9) else '>'}{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*row).rstrip() for row in (head, *body)]
    for r in rows:
        for d in r["harness"]["ranges"]:
            lines.append(f"  {r['name']}: {coverage_line(d)}")
    ok = [r for r in rows if r["ratio"] and "error" not in r]
    worst = max((r["ratio"] for r in ok), default=None)
    worst_same = max((r["same_ratio"] for r in ok if r["same_ratio"]), default=None)
    summary = ("harness peak / floor peak: " + ", ".join(f"{r['name']} {r['ratio']:.2f}x" for r in ok)
               + (f"; worst {worst:.2f}x" if worst else "") + f" (goal <= {GOAL}x where the edges allow it)"
               + "\n          raw torch at the example and the edges (each dim at its max, the others at their min) / "
               "floor peak: " + ", ".join(f"{r['name']} {x(r['edges_over_floor'])}" for r in ok)
               + "\n          harness peak / same-work floor (raw torch running its two largest numeric probes): "
               + ", ".join(f"{r['name']} {r['same_ratio']:.2f}x" for r in ok if r["same_ratio"])
               + (f"; worst {worst_same:.2f}x" if worst_same else "") + f" (goal <= {GOAL}x)")
    return {"name": "memory", "rows": rows, "worst": worst, "text": "\n".join([summary, *lines])}


if __name__ == "__main__":
    res = measure(tuple(sys.argv[1:]) or tuple(MODELS))
    print("(not available: the [zoo] extra is not installed)" if res is None else res["text"])
