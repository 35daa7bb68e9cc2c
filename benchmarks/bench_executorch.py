"""The `executorch` stage's cost beside `export`'s: both stages' durations from the same `pytest_export.check` run.

The five models of the onnx benchmark (an MLP, a CNN, attention, a transformer block, an LSTM head), each with a
dynamic batch in [2, 32], run with ``executorch=True`` (the XNNPACK partitioner); `export` (one
``torch.export.export``) and `executorch` (lowering that program with ``to_edge_transform_and_lower`` and
``to_executorch``, loading it in ExecuTorch's runtime, the example and the sizes `guards` and `fuzz` ran numeric)
are timed by the runner in one run, side by side. A first run, not counted, pays executorch's imports and XNNPACK's
set-up (reported apart). Needs executorch (the ``[executorch]`` extra).

Memory, side by side in one run, each in a fresh interpreter (its peak resident memory read with ``wait4``): an
attention case declared to t=16384 (its ExecuTorch plan at that max: ~2.1 GB) checked with
``--export-max-memory 256MB``, with the stage (``portable``) and without it. The stage's peak beside the case's
without it is what the runtime adds; it must stay under the cap.
"""

from __future__ import annotations

import statistics
import time

NAMES = ("mlp32", "cnn8", "attn32", "block32", "lstm16")


def measure(repeats: int = 3) -> dict | None:
    import importlib.util

    if importlib.util.find_spec("executorch") is None:
        return None  # not imported here: the warm-up run pays the imports, and says what they cost
    from torch.export import Dim

    import pytest_export
    from cases import make_cases
    from pytest_export.declare.options import SessionOptions

    import warnings

    warnings.filterwarnings("ignore")
    cases = [c for c in make_cases() if c[0] in NAMES]
    session = SessionOptions(check=True, examples=10, skip_stages=("serde", "decomp", "retrace"))
    ds = {"x": {0: Dim("batch", min=2, max=32)}}

    def one(name, module, args, r):
        res = pytest_export.check(module, args, name=f"bench-executorch-{name}-{r}-{time.time()}", dynamic_shapes=ds,
                                  executorch=True, session=session)
        st = res.stages["executorch"]
        verdict = st.status + (f" ({st.data['signature']}: {st.message.split(': ')[0]})" if st.status == "failed" else "")
        return res.stages["export"].duration, st.duration, st.data, verdict

    _, first_s, _, _ = one(*cases[0], "warm-up")  # the first lowering of a process imports executorch
    per: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n, _, _ in cases}
    status: dict[str, str] = {}
    for r in range(repeats):
        for name, module, args in cases:
            export_s, stage_s, data, status[name] = one(name, module, args, r)
            per[name].append((export_s, stage_s, data.get("lower_s", 0.0), data.get("run_s", 0.0)))
    med = {n: [statistics.median(x[i] for x in v) for i in range(4)] for n, v in per.items()}
    export_s, stage_s = sum(m[0] for m in med.values()), sum(m[1] for m in med.values())
    lower_s, run_s = sum(m[2] for m in med.values()), sum(m[3] for m in med.values())
    ratios = {n: m[1] / m[0] for n, m in med.items()}
    lo, hi = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
    odd = {n: s for n, s in status.items() if s != "passed"}
    mem = peak_memory()
    return {"name": "executorch", "a": stage_s, "b": export_s, "ratio": stage_s / export_s,
            "text": f"executorch stage {stage_s:.2f} s vs export {export_s:.2f} s over {len(med)} models: "
                    f"{stage_s / export_s:.2f}x (per model {ratios[lo]:.2f}x ({lo}) to {ratios[hi]:.2f}x ({hi}); "
                    f"lowering {lower_s:.2f} s, runtime {run_s:.2f} s; median of {repeats}; "
                    f"the first lowering of a process costs {first_s - med[cases[0][0]][1]:.1f} s more: imports, "
                    "XNNPACK's set-up)" + "".join(f"; {n} {v}" for n, v in odd.items()) + f"; {mem}"}


ATTENTION = """
import os, sys, torch, warnings
warnings.filterwarnings("ignore")
from torch.export import Dim
import pytest_export
from pytest_export.declare.options import SessionOptions

class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(16, 16) for _ in range(3))

    def forward(self, x):
        return (self.q(x) @ self.k(x).transpose(-1, -2)).softmax(-1) @ self.v(x)

torch.manual_seed(0)
session = SessionOptions(check=True, examples=10, skip_stages=("serde", "decomp", "retrace"))
res = pytest_export.check(Attention().eval(), (torch.randn(1, 32, 16),), dynamic_shapes={"x": {1: Dim("t", min=2, max=16384)}},
                          executorch="portable" if sys.argv[1] == "stage" else False, max_memory="256MB", session=session)
st = res.stages.get("executorch")
print((st.status + " " + str(st.data.get("memory"))) if st else res.verdict)
"""


def peak_memory() -> str:
    """The attention case's peak resident memory with the executorch stage and without it, each in its own process."""
    import os
    import subprocess
    import sys

    peaks, said = {}, {}
    for side in ("stage", "none"):
        proc = subprocess.Popen([sys.executable, "-c", ATTENTION, side], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        said[side] = (proc.stdout.read().strip().splitlines() or ["?"])[-1]
        peaks[side] = os.wait4(proc.pid, 0)[2].ru_maxrss * 1024
    return (f"attention to t=16384 under --export-max-memory 256MB: peak RSS {peaks['stage'] / 1e9:.2f} GB with the stage, "
            f"{peaks['none'] / 1e9:.2f} GB without (+{(peaks['stage'] - peaks['none']) / 1e6:.0f} MB; {said['stage']})")
