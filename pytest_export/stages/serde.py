"""Stage ``serde``: ``torch.export.save`` and ``load``, in memory and through a file; the loaded programs compute
what eager computes (``guards`` later checks they accept and refuse the same sizes).
"""

from __future__ import annotations

import io
from typing import Any

import torch

from ..context import Context, Stage, failing_as
from ..torchlog import repaired_torch_logs


def run(ctx: Context) -> dict[str, Any]:
    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    buf = io.BytesIO()
    with failing_as("torch.export.save", kind="save"):
        torch.export.save(ctx.ep, buf)
    size = len(buf.getvalue())
    buf.seek(0)
    with failing_as("torch.export.load", kind="load"):
        ctx.loaded["memory"] = torch.export.load(buf)
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    with failing_as(f"torch.export.save to {path.name}", kind="save"):
        torch.export.save(ctx.ep, path)
    with failing_as(f"torch.export.load from {path.name}", kind="load"):
        ctx.loaded["file"] = torch.export.load(path)
    worst: dict[str, float] = {}
    for label, ep in ctx.loaded.items():
        errs = ctx.check_program(ep, f"reloaded ({label})")
        worst = {k: max(worst.get(k, 0.0), v) for k, v in errs.items()}
    return {"bytes": size, **worst}


STAGE = Stage("serde", run, needs=("eager", "export"))
