"""Long declared ranges: what checking a real promise costs, and how far it gets (issue #23).

Each case runs ``pytest_export.check`` in a fresh interpreter (so its peak resident memory is its own) with the
ranges deployments ship: an attention block with sequences to 131,072 and batches to 64, a Llama-style decoder
declared to its ``max_position_embeddings`` (4,096, as Llama 2 ships), and a ConvNeXt at 224 to 1,024 px.
Printed per case: wall time, peak resident memory, the outcome, and per declared dim the largest size checked by
shape (fake tensors) and by numerics (real tensors), beside the declared max.

Goal on 2 cores: a declared ``seq`` max of 131,072 checked by shape to its max in <= 60 s per case, with
<= 2 GB peak resident memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, resource, sys, time
import torch
from torch.export import Dim
import pytest_export

torch.manual_seed(0)
torch.set_num_threads(1)
name = sys.argv[1]
kw = {}
if name == "attention":
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(32, 2, batch_first=True)
        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]
    model, args = Attention().eval(), (torch.randn(2, 16, 32),)
    kw["dynamic_shapes"] = {"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=131072)}}
elif name == "llama":
    import transformers
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                      use_cache=False)
    model, args = transformers.LlamaForCausalLM(config).eval(), (torch.randint(0, 1000, (2, 16)),)
    def build(sizes, a, k):
        return (torch.randint(0, 1000, (sizes["batch"], sizes["seq"])),)
    kw["dynamic_shapes"] = {"input_ids": {0: Dim("batch", min=1, max=32), 1: Dim("seq", min=1, max=4096)}}
    kw["input_builder"] = build
elif name == "convnext":
    import transformers
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32, 32, 64], depths=[1, 1, 1, 1], num_labels=10)
    model, args = transformers.ConvNextForImageClassification(config).eval(), (torch.randn(2, 3, 224, 224),)
    side = Dim("side", min=7, max=32)  # 224 to 1,024 px in the backbone's stride of 32
    kw["dynamic_shapes"] = {"pixel_values": {0: Dim("batch", min=1, max=64), 2: 32 * side, 3: 32 * side}}
t0 = time.perf_counter()
res = pytest_export.check(model, args, name=name, **kw)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall": wall, "peak": peak, "outcome": res.outcome, "ranges": res.info.get("ranges"),
                  "stages": {n: s.status for n, s in res.stages.items()}}))
'''

CASES = ("attention", "llama", "convnext")


def run_case(name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, name], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        return {"name": name, "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return {"name": name, **json.loads(out.stdout.strip().splitlines()[-1])}


def measure(cases: tuple[str, ...] = CASES) -> dict:
    rows = []
    for name in cases:
        if name != "attention":
            try:
                import transformers  # noqa: F401
            except ImportError:
                continue
        t0 = time.perf_counter()
        rows.append(run_case(name))
        rows[-1].setdefault("wall", time.perf_counter() - t0)
    lines = ["", f"  {'case':10s} {'wall':>7s} {'peak RSS':>9s}  {'outcome':8s} dims (declared max: shape / numerics)"]
    for r in rows:
        if "error" in r:
            lines.append(f"  {r['name']:10s} error: {r['error']}")
            continue
        dims = ", ".join(f"{d['dim']} {d['declared'][1]}: {d['shape_max']} / {d['numeric_max']}"
                         for d in (r.get("ranges") or {}).get("dims", []))
        lines.append(f"  {r['name']:10s} {r['wall']:6.1f}s {r['peak'] / 2**30:7.2f}GB  {r['outcome']:8s} {dims}")
    return {"rows": rows, "text": "\n".join(lines)}


if __name__ == "__main__":
    print(measure(tuple(sys.argv[1:]) or CASES)["text"])
