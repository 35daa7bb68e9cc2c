"""Stage ``serde``: ``torch.export.save`` to a file and ``torch.export.load`` from it; the loaded program's weights
are the exported program's bit for bit (and then share their storage: one copy of the weights stays alive), and
it computes what eager computes (``guards`` later checks it accepts and refuses the same sizes).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from ..context import Context, Stage, StageFailure, failing_as
from ..explain.frames import class_hint
from ..modstate import same_tensor
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
    with failing_as(f"torch.export.load from {path.name}", kind="load"), streamed_weights(ctx.ep) as stream:
        loaded = torch.export.load(path)
    changed = list(dict.fromkeys(stream.changed + share_weights(ctx.ep, loaded)))
    if changed:
        raise StageFailure(f"save/load changed the program's weights: {', '.join(changed[:5])}"
                           + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""), kind="weights-changed")
    ctx.loaded["file"] = loaded
    worst = ctx.check_program(loaded, "reloaded")
    return {"bytes": path.stat().st_size, "weights_streamed": stream.used, **worst}


class _Stream:
    def __init__(self) -> None:
        self.used = False  # whether the load went through it (else: torch's own whole-dict load)
        self.changed: list[str] = []  # weights that differ from the exported program's (they keep the loaded values)


@contextlib.contextmanager
def streamed_weights(ep: Any) -> Iterator[_Stream]:
    """While ``torch.export.load`` runs, its weights are read one tensor at a time, each by torch's own
    ``_load_state_dict`` given a one-entry payload config, compared bit for bit with the exported program's and
    replaced by it: a second copy of the weights never exists, not even for a moment (issue #31; torch reads the
    whole dict at once). Where torch's archive internals are not as expected (another torch version), torch's own
    load runs unchanged and ``share_weights`` makes the one copy afterwards."""
    stream = _Stream()
    try:
        from torch.export.pt2_archive import _package as package
        from torch._export.serde import schema

        original, read_config = package._load_state_dict, package._load_payload_config
        config_name = package.WEIGHTS_CONFIG_FILENAME_FORMAT
    except (ImportError, AttributeError):
        yield stream
        return
    mine = {**ep.state_dict}

    def load_state_dict(archive_reader: Any, model_name: str) -> Any:
        try:
            return streamed(archive_reader, model_name)
        except Exception:  # noqa: BLE001 - torch's own load decides: a real load failure raises there again
            stream.used, stream.changed = False, []
            return original(archive_reader, model_name)

    def streamed(archive_reader: Any, model_name: str) -> Any:
        config_file = config_name.format(model_name)
        if config_file not in archive_reader.get_file_names():
            return original(archive_reader, model_name)  # a legacy archive: torch's path
        config = read_config(archive_reader, config_file)
        out: dict[str, Any] = {}
        for fqn, meta in config.config.items():
            one = schema.PayloadConfig(config={fqn: meta})
            package._load_payload_config = lambda reader, name: one if name == config_file else read_config(reader, name)
            try:
                loaded = original(archive_reader, model_name)[fqn]
            finally:
                package._load_payload_config = read_config
            orig = mine.get(fqn)
            if (isinstance(orig, torch.Tensor) and isinstance(loaded, torch.Tensor)
                    and same_tensor(loaded.detach(), orig.detach()) and loaded.requires_grad == orig.requires_grad):
                out[fqn] = orig
            else:
                out[fqn] = loaded
                stream.changed.append(fqn)
            del loaded
        stream.used = True
        return out

    package._load_state_dict = load_state_dict
    try:
        yield stream
    finally:
        package._load_state_dict = original


def share_weights(ep: Any, loaded: Any) -> list[str]:
    """Point the loaded program's parameters, buffers and tensor constants at the exported program's, where they
    are equal bit for bit, so that one copy of the weights stays alive (issue #31); the names of those that
    differ (a save/load defect), which keep their loaded values."""
    changed: list[str] = []
    for table in ("state_dict", "constants"):
        mine, theirs = getattr(ep, table), getattr(loaded, table)
        for name, t in list(theirs.items()):
            orig = mine.get(name)
            if not isinstance(t, torch.Tensor) or not isinstance(orig, torch.Tensor):
                continue
            if t is orig:
                continue
            if same_tensor(t.detach(), orig.detach()) and t.requires_grad == orig.requires_grad:
                theirs[name] = orig
            else:
                changed.append(name)
    return changed


STAGE = Stage("serde", run, needs=("eager", "export"))
