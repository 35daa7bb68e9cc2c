"""Stage ``serde``: ``torch.export.save`` to a file and ``torch.export.load`` from it; the loaded program's weights
are the exported program's bit for bit (and then share their storage: one copy of the weights stays alive), and
it computes what eager computes (``guards`` later checks it accepts and refuses the same sizes).
"""

from __future__ import annotations

from typing import Any

import torch

from ..context import Context, Stage, StageFailure, failing_as
from ..frames import class_hint
from ..torchlog import repaired_torch_logs


def run(ctx: Context) -> dict[str, Any]:
    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    """One save and one load (issue #16), through a file: saved straight to it, not through a buffer in memory
    (a buffer, and the bytes read out of it, were two more copies of the weights; issue #31)."""
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with failing_as("torch.export.save", kind="save"):
            torch.export.save(ctx.ep, path)
    except StageFailure as failure:  # a class registered without the serialized_type_name save needs: named (#26)
        hint = class_hint(failure.__cause__) if failure.__cause__ is not None else ""
        if not hint:
            raise
        raise StageFailure(f"{failure}{hint}", kind=failure.kind, **failure.data) from failure.__cause__
    with failing_as(f"torch.export.load from {path.name}", kind="load"):
        loaded = torch.export.load(path)
    changed = share_weights(ctx.ep, loaded)
    if changed:
        raise StageFailure(f"save/load changed the program's weights: {', '.join(changed[:5])}"
                           + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""), kind="weights-changed")
    ctx.loaded["file"] = loaded
    worst = ctx.check_program(loaded, "reloaded")
    return {"bytes": path.stat().st_size, **worst}


def share_weights(ep: Any, loaded: Any) -> list[str]:
    """Point the loaded program's parameters, buffers and tensor constants at the exported program's, where they
    are equal bit for bit, so that one copy of the weights stays alive (issue #31); the names of those that
    differ (a save/load defect), which keep their loaded values."""
    from ..modstate import same_tensor

    changed: list[str] = []
    for table in ("state_dict", "constants"):
        mine, theirs = getattr(ep, table), getattr(loaded, table)
        for name, t in list(theirs.items()):
            orig = mine.get(name)
            if not isinstance(t, torch.Tensor) or not isinstance(orig, torch.Tensor):
                continue
            if same_tensor(t.detach(), orig.detach()) and t.requires_grad == orig.requires_grad:
                theirs[name] = orig
            else:
                changed.append(name)
    return changed


STAGE = Stage("serde", run, needs=("eager", "export"))
