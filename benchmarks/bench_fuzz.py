"""Fuzz throughput: the `fuzz` stage's examples per second against the bare work of one example.

The bare work is what each example must do at the least: one eager forward and one forward of the exported
program on the same drawn inputs. Both are measured in this process, side by side, on the same sizes.
"""

from __future__ import annotations

import statistics
import time


def _case():
    import torch
    from torch.export import Dim

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))

        def forward(self, x):
            return self.net(x).softmax(-1)

    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(8, 32),), {"x": {0: Dim("batch", min=2, max=64)}}


def measure(repeats: int = 3, examples: int = 50) -> dict:
    import torch

    import pytest_export
    from pytest_export.audit import audit
    from pytest_export.declare.shapes import parse
    from pytest_export.probes.strategies import build_inputs
    from pytest_export.stages.fuzz import value_seed

    module, args, ds = _case()
    fuzz_rates, bare_rates = [], []
    ep = torch.export.export(module, args, dynamic_shapes=ds)
    model = audit(parse("bench", ds, module, args, {}), ep).model
    (var,) = model.vars
    sizes = [var.lo + (i * 7) % (var.hi - var.lo + 1) for i in range(examples)]
    prog = ep.module()
    for r in range(repeats):
        res = pytest_export.check(module, args, name=f"bench-fuzz-{r}-{time.time()}", dynamic_shapes=ds,
                                  examples=examples, seed=r)
        fuzz = res.stages["fuzz"]
        assert fuzz.status == "passed", res.failure_text()
        fuzz_rates.append(fuzz.data["examples"] / fuzz.duration)
        t0 = time.perf_counter()
        for s in sizes:
            a, _ = build_inputs(model, {var.symbol: s}, args, {}, value_seed({var.symbol: s}))
            module(*a)
            prog(*a)
        bare_rates.append(examples / (time.perf_counter() - t0))
    f, b = statistics.median(fuzz_rates), statistics.median(bare_rates)
    return {"name": "fuzz", "a": f, "b": b, "ratio": b / f,
            "text": f"fuzz {f:.0f} examples/s vs bare eager+exported forward {b:.0f}/s on the same sizes: "
                    f"{b / f:.2f}x the bare cost per example"}


if __name__ == "__main__":
    print(measure()["text"])
