"""The `onnx` stage's cost beside `export`'s: both stages' durations from the same `pytest_export.check` run.

Five of the harness benchmark's models (an MLP, a CNN, attention, a transformer block, an LSTM head), each with a
dynamic batch in [2, 32], run with ``onnx=True``; `export` (one ``torch.export.export``) and `onnx` (conversion
of that program with ``torch.onnx.export``, an ONNX Runtime session, the example and the sizes `guards` and `fuzz`
ran numeric) are timed by the runner in one run, side by side. A first run, not counted, pays the imports of onnx,
onnxscript and onnxruntime (reported apart). Needs the ``[onnx]`` extra.
"""

from __future__ import annotations

import statistics
import time

NAMES = ("mlp32", "cnn8", "attn32", "block32", "lstm16")


def measure(repeats: int = 3) -> dict | None:
    import importlib.util

    if not all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime")):
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
        res = pytest_export.check(module, args, name=f"bench-onnx-{name}-{r}-{time.time()}", dynamic_shapes=ds,
                                  onnx=True, session=session)
        st = res.stages["onnx"]
        assert st.status == "passed", res.failure_text()
        return res.stages["export"].duration, st.duration, st.data

    _, first_s, _ = one(*cases[0], "warm-up")  # the first conversion of a process imports onnx and onnxscript
    per: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n, _, _ in cases}
    for r in range(repeats):
        for name, module, args in cases:
            export_s, onnx_s, data = one(name, module, args, r)
            per[name].append((export_s, onnx_s, data["convert_s"], data["ort_s"]))
    med = {n: [statistics.median(x[i] for x in v) for i in range(4)] for n, v in per.items()}
    export_s, onnx_s = sum(m[0] for m in med.values()), sum(m[1] for m in med.values())
    convert_s, ort_s = sum(m[2] for m in med.values()), sum(m[3] for m in med.values())
    ratios = {n: m[1] / m[0] for n, m in med.items()}
    lo, hi = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
    return {"name": "onnx", "a": onnx_s, "b": export_s, "ratio": onnx_s / export_s,
            "text": f"onnx stage {onnx_s:.2f} s vs export {export_s:.2f} s over {len(med)} models: "
                    f"{onnx_s / export_s:.2f}x (per model {ratios[lo]:.2f}x ({lo}) to {ratios[hi]:.2f}x ({hi}); "
                    f"conversion {convert_s:.2f} s, ONNX Runtime {ort_s:.2f} s; median of {repeats}; "
                    f"the first conversion of a process costs {first_s - med[cases[0][0]][1]:.1f} s more: imports)"}
