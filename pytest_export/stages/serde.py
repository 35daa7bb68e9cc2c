"""Stage ``serde``: ``torch.export.save`` to a file and ``torch.export.load`` from it; the loaded program's weights
are the exported program's bit for bit (and then share their storage: one copy of the weights stays alive), and
it computes what eager computes (``guards`` later checks it accepts and refuses the same sizes).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator

import torch

from ..context import Context, Stage, StageFailure, failing_as
from ..memory.calibration import resident_peak
from ..memory.cost import format_bytes
from ..results import HarnessError
from ..torchside.frames import class_hint
from ..torchside.modstate import same_tensor, storage_of
from ..torchside.torchlog import repaired_torch_logs

# What a save and a load add to the weights the process already holds, measured 2026-12-06 on torch 2.13.0 in
# fresh processes (VmHWM over VmRSS), for a 403 MB stack of six 4096x4096 Linear (67 MB each) and BERT-base's
# 438 MB (its largest, the word embeddings, 94 MB):
# - torch's save to a file path copies each storage twice while it writes it (``bytes`` of the storage, then
#   the binding's copy of those bytes): 2x the largest storage, +135 MB and +188 MB; to a BytesIO the whole
#   archive stays in memory on top (+538 MB, +456 MB): never used here.
# - this stage's save writes each storage straight from its memory (``direct_save``): +6.5 MB and +20 MB, the
#   program's text and the modules the first save imports (the file is the same, record for record).
# - torch's load reads every weight before it builds the program: a second copy of them all (+404 MB, +445 MB).
# - this stage's load reads one weight at a time (``streamed_weights``): the largest, +71 MB and +98 MB (4 MB of
#   each the program and imported modules). Tensor constants are read whole by
#   torch (``_load_constants``), then replaced by the exported program's.
# A tensor subclass is pickled whole (into a buffer, its value, the binding's copy): 3x it on save, 2x on load.
# In the stage, with those modules imported first: a 201 MB stack of three 67 MB weights grew 68.3 MB against
# 70.7 MB predicted, BERT-base 100-111 MB against 116 MB (tests/test_serde_memory.py holds the first).

# the program's text and the graph the load builds from it: BERT-base's 513 nodes ~13 MB measured beside its
# largest weight
PROGRAM_BYTES_PER_NODE = 32 * 1024

# the rest, and the first save's one-off allocations (+1 MB over the terms above for the first program a process
# saves, measured on both models)
MARGIN = 1.05

# what torch's first save in a process imports (+3-4 MB, once): imported before the save is measured, like torch
# itself a cost of the process, not of the case (a second save adds 0.1 MB for a small program)
_IMPORTED_BY_SAVE = ("torch.export.pt2_archive._package", "torch._export.serde.serialize", "torch._inductor.ir",
                     "torch.utils.serialization.config")


def run(ctx: Context) -> dict[str, Any]:
    for name in _IMPORTED_BY_SAVE:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with repaired_torch_logs(ctx.result.warnings):
        return _save_load_compare(ctx)


def _save_load_compare(ctx: Context) -> dict[str, Any]:
    """One save and one load (issue #16), through a file: saved straight to it, not through a buffer in memory
    (a buffer, and the bytes read out of it, were two more copies of the weights; issue #31). What they will add
    to the memory is predicted first and held to ``max_memory`` (issue #43): past it the stage does not run."""
    path = ctx.workdir / "program.pt2"
    path.parent.mkdir(parents=True, exist_ok=True)
    cap = ctx.calibration.costs().max_memory
    memory = {**planned_memory(ctx.ep), "max_memory": cap}
    if memory["predicted"] > cap:  # the harness cannot decide: not the model's fault, and not a skip
        raise HarnessError(f"not saved: torch.export.save and load would need ~{format_bytes(memory['predicted'])} "
                           f"> max_memory {format_bytes(cap)} beside the weights ({memory['rule']}); raise "
                           "--export-max-memory (max_memory=) to check the round trip")
    box: dict[str, Any] = {}
    memory["measured"], why = resident_peak(lambda: box.update(_round_trip(ctx, path)))
    if why:
        memory["measured"], memory["unmeasured"] = None, why
    loaded, stream, direct = box["loaded"], box["stream"], box["direct"]
    changed = list(dict.fromkeys(stream.changed + share_weights(ctx.ep, loaded)))
    if changed:
        raise StageFailure(f"save/load changed the program's weights: {', '.join(changed[:5])}"
                           + (f" and {len(changed) - 5} more" if len(changed) > 5 else ""), kind="weights-changed")
    ctx.loaded["file"] = loaded
    worst = ctx.check_program(loaded, "reloaded")
    return {"bytes": path.stat().st_size, "weights_streamed": stream.used, "weights_written_direct": direct.used,
            "memory": memory, **worst}


def _kind_hint(ep: Any) -> str:
    """Where the program holds tensors ``torch.export.save`` cannot write (sparse, quantized): said in the user's
    terms, with what to do instead (issue #58)."""
    held = [(n, t) for table in ("state_dict", "constants") for n, t in getattr(ep, table).items()
            if isinstance(t, torch.Tensor)]
    sparse = [n for n, t in held if t.layout != torch.strided]
    quantized = [n for n, t in held if t.layout == torch.strided and t.is_quantized]
    lines = []
    if sparse:
        lines.append(f"torch.export.save cannot write sparse tensors ({', '.join(sparse[:3])}): keep them dense, or "
                     "keep their indices and values as dense tensors and rebuild the sparse tensor in forward")
    if quantized:
        lines.append(f"torch.export.save cannot write quantized tensors ({', '.join(quantized[:3])}): keep the "
                     "integer values and their scale as plain tensors and dequantize in forward")
    return "".join(f"\nhint: {line}" for line in lines)


def _round_trip(ctx: Context, path: Any) -> dict[str, Any]:
    try:
        with failing_as("torch.export.save", kind="save"), direct_save() as direct:
            torch.export.save(ctx.ep, path)
    except StageFailure as failure:  # a class registered without the serialized_type_name save needs: named (#26)
        hint = (class_hint(failure.__cause__) if failure.__cause__ is not None else "") or _kind_hint(ctx.ep)
        if not hint:
            raise
        raise StageFailure(f"{failure}{hint}", kind=failure.kind, **failure.data) from failure.__cause__
    with failing_as(f"torch.export.load from {path.name}", kind="load"), streamed_weights(ctx.ep) as stream:
        loaded = torch.export.load(path)
    return {"loaded": loaded, "stream": stream, "direct": direct}


def planned_memory(ep: Any) -> dict[str, Any]:
    """What the save and the load add to the memory beside the weights already held (the rule and the numbers it
    rests on: the comment at the top): ``predicted`` (bytes, the larger of ``save`` and ``load``) and ``rule``."""
    raw: dict[int, int] = {}  # storage -> bytes: torch writes each storage once, however many tensors view it
    pickled = constants = 0
    for table in ("state_dict", "constants"):
        for t in getattr(ep, table).values():
            if not isinstance(t, torch.Tensor) or isinstance(t, torch._subclasses.FakeTensor):
                continue
            if type(t.data) is not torch.Tensor:  # a subclass: torch pickles it whole
                pickled = max(pickled, _nbytes(t))
                continue
            key, n = storage_of(t)
            if table == "constants":
                constants += n
            else:
                raw[key] = n
    largest, weights = max(raw.values(), default=0), sum(raw.values())
    direct, streamed = _direct_save_available(), _streamed_load_available()
    program = PROGRAM_BYTES_PER_NODE * len(ep.graph.nodes)
    save = max(0 if direct else 2 * largest, 3 * pickled) + program
    load = (largest if streamed else weights) + constants + 2 * pickled + program
    rule = (f"save {'~0, each weight written from its own memory' if direct else '2x the largest weight'}; load "
            f"{'the largest weight' if streamed else 'every weight'}" + (" and the tensor constants" if constants else ""))
    return {"predicted": int(max(save, load) * MARGIN), "save": save, "load": load, "largest": largest, "weights": weights,
            "constants": constants, "program": program, "rule": rule + " and the program"}


def _nbytes(t: Any) -> int:
    try:
        return t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - a subclass without one storage (a wrapper): its elements
        return t.numel() * t.element_size()


class _Direct:
    def __init__(self) -> None:
        self.used = False  # whether a weight was written from its own memory (else: torch's copies of it)


class _StorageBytes(bytes):
    """Where torch's save expects a storage's bytes: empty, the storage carried beside them to ``write_bytes``."""

    storage: Any


def _direct_internals() -> Any:
    try:
        from torch.export.pt2_archive import _package as package

        package._get_raw_tensor_bytes, package.PT2ArchiveWriter.write_bytes  # noqa: B018 - both are patched
        return package
    except (ImportError, AttributeError):
        return None


def _direct_save_available() -> bool:
    return _direct_internals() is not None


@contextlib.contextmanager
def direct_save() -> Iterator[_Direct]:
    """While ``torch.export.save`` runs, each weight's storage is written to the archive from its own memory
    (torch's ``PyTorchFileWriter.write_record`` takes a storage), where torch's save makes ``bytes`` of it and
    its binding copies those again: 2x the largest weight at once (issue #43; the numbers at the top). The file
    is the same. Where torch's archive internals are not as expected (another torch), torch's own save runs."""
    direct, package = _Direct(), _direct_internals()
    if package is None:
        yield direct
        return
    original_bytes, writer = package._get_raw_tensor_bytes, package.PT2ArchiveWriter
    original_write = writer.write_bytes

    def raw_bytes(value: Any) -> Any:
        if (isinstance(value, torch._subclasses.FakeTensor) or value.device.type != "cpu"
                or value.layout != torch.strided or value.is_quantized or not value.data_ptr()
                or type(value.data) is not torch.Tensor):  # torch's own bytes for what is not one plain storage
            return original_bytes(value)
        marker = _StorageBytes()
        marker.storage = value.untyped_storage()
        return marker

    def write_bytes(self: Any, name: str, data: Any) -> None:
        if not isinstance(data, _StorageBytes):
            return original_write(self, name, data)
        self.archive_file.write_record(name, data.storage, data.storage.nbytes())
        direct.used = True
        return None

    package._get_raw_tensor_bytes, writer.write_bytes = raw_bytes, write_bytes
    try:
        yield direct
    finally:
        package._get_raw_tensor_bytes, writer.write_bytes = original_bytes, original_write


def _streamed_load_available() -> bool:
    try:
        from torch.export.pt2_archive import _package as package
        from torch._export.serde import schema

        return all(hasattr(package, n) for n in ("_load_state_dict", "_load_payload_config",
                                                  "WEIGHTS_CONFIG_FILENAME_FORMAT")) and hasattr(schema, "PayloadConfig")
    except ImportError:
        return False


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
