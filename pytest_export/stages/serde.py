"""Stage ``serde``: ``torch.export.save`` and ``load``, in memory and through a file; the loaded programs compute
what eager computes (``guards`` later checks they accept and refuse the same sizes).
"""

from __future__ import annotations

import io
from typing import Any

import torch

from ..context import Context, Stage, StageFailure, failing_as
from ..frames import class_hint
from ..torchlog import repaired_torch_logs


def run(ctx: Context) -> dict[str, Any]:
    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    """One save and one load (issue #16): save to memory, write those bytes to a file, load the file."""
    buf = io.BytesIO()
    try:
        with failing_as("torch.export.save", kind="save"):
            torch.export.save(ctx.ep, buf)
    except StageFailure as failure:  # a class registered without the serialized_type_name save needs: named (#26)
        hint = class_hint(failure.__cause__) if failure.__cause__ is not None else ""
        if not hint:
            raise
        raise StageFailure(f"{failure}{hint}", kind=failure.kind, **failure.data) from failure.__cause__
    data = buf.getvalue()
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    with failing_as(f"torch.export.load from {path.name}", kind="load"):
        ctx.loaded["file"] = torch.export.load(path)
    worst = ctx.check_program(ctx.loaded["file"], "reloaded")
    return {"bytes": len(data), **worst}


STAGE = Stage("serde", run, needs=("eager", "export"))
