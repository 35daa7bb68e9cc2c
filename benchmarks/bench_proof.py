"""What proving the program's guards costs (issue #41): the solver's time per case beside the case's own.

For each model of the zoo's CI slice (real transformers models, the ``[zoo]`` extra) and for the planted refusals
of ``tests/test_guard_proof.py``'s kind (a branch on one size, a relation of two), ``pytest_export.check`` runs the
case while every call of ``proof.prove.prove`` (the guards stage's proof, and the proof of a fix on the program
exported with it) is timed. Printed per case: the case's wall time, the proofs' time and their share, the number
of declared sizes and guards decided. Goal: the proof under 5% of a case's time on the zoo.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any


def _planted() -> list[tuple[str, Any, dict[str, Any]]]:
    import torch
    from torch.export import Dim

    class Branch(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[0] == 37 else x + 1

    class Pair(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[2] * x.shape[3] == 64 else x + 1

    return [
        ("branch37", lambda: (Branch(), (torch.randn(4, 3),)), {"dynamic_shapes": {"x": {0: Dim.AUTO(min=2, max=64)}}}),
        ("pair-h*w", lambda: (Pair(), (torch.randn(1, 2, 5, 6),)),
         {"dynamic_shapes": {"x": {2: Dim.AUTO(min=4, max=512), 3: Dim.AUTO(min=4, max=512)}}}),
    ]


def measure() -> dict:
    import torch

    import pytest_export
    from pytest_export.explain import fixes
    from pytest_export.stages import guards

    torch.set_num_threads(1)
    cases = _planted()
    try:
        from bench_zoo import _split, zoo_cases

        cases += [(name, fn, {k: v for k, v in kw.items()}) for name, fn, kw in zoo_cases()]
    except ImportError:  # no transformers: the planted cases alone
        _split = None  # type: ignore[assignment]
    spent: list[float] = []
    real = guards.prove

    def timed(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spent.append(time.perf_counter() - t0)

    guards.prove = fixes.prove = timed
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))  # torch._dynamo's import, before any clock
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, fn, keywords in cases:
                value = fn()
                module, args = value[0], tuple(value[1])
                kwargs = dict(value[2]) if len(value) == 3 else {}
                spent.clear()
                t0 = time.perf_counter()
                res = pytest_export.check(module, args, kwargs, name=name, workdir=Path(tmp) / name, **keywords)
                wall = time.perf_counter() - t0
                proof = (res.stages.get("guards").data.get("proof") if res.stages.get("guards") else None) or {}
                rows.append((name, wall, sum(spent), proof.get("sizes"), proof.get("guards"), res.outcome))
    finally:
        guards.prove = fixes.prove = real
    lines = [f"{n}: case {w:.2f} s, proofs {p * 1000:.1f} ms ({100 * p / w:.2f}%), {s} sizes, {g} guards, {o}"
             for n, w, p, s, g, o in rows]
    total_w, total_p = sum(r[1] for r in rows), sum(r[2] for r in rows)
    zoo = [r for r in rows if r[0] not in ("branch37", "pair-h*w")]
    worst = max((100 * r[2] / r[1] for r in zoo), default=0.0)
    text = (f"the proof of the guards took {total_p * 1000:.0f} ms of {total_w:.1f} s over {len(rows)} cases "
            f"({100 * total_p / total_w:.2f}%); worst zoo case {worst:.2f}% (goal < 5%)\n          "
            + "\n          ".join(lines))
    return {"name": "proof", "a": total_p, "b": total_w, "ratio": total_p / total_w, "text": text}


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    print(measure()["text"])
