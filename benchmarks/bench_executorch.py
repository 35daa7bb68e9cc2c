"""The `executorch` stage's cost beside `export`'s: both stages' durations from the same `pytest_export.check` run.

The five models of the onnx benchmark (an MLP, a CNN, attention, a transformer block, an LSTM head), each with a
dynamic batch in [2, 32], run with ``executorch=True`` (the XNNPACK partitioner); `export` (one
``torch.export.export``) and `executorch` (lowering that program with ``to_edge_transform_and_lower`` and
``to_executorch``, loading it in ExecuTorch's runtime, the example and the sizes `guards` and `fuzz` ran numeric)
are timed by the runner in one run, side by side. A first run, not counted, pays executorch's imports and XNNPACK's
set-up (reported apart). Needs executorch (the ``[executorch]`` extra).
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
    return {"name": "executorch", "a": stage_s, "b": export_s, "ratio": stage_s / export_s,
            "text": f"executorch stage {stage_s:.2f} s vs export {export_s:.2f} s over {len(med)} models: "
                    f"{stage_s / export_s:.2f}x (per model {ratios[lo]:.2f}x ({lo}) to {ratios[hi]:.2f}x ({hi}); "
                    f"lowering {lower_s:.2f} s, runtime {run_s:.2f} s; median of {repeats}; "
                    f"the first lowering of a process costs {first_s - med[cases[0][0]][1]:.1f} s more: imports, "
                    "XNNPACK's set-up)" + "".join(f"; {n} {v}" for n, v in odd.items())}
