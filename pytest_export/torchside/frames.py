"""Where in the user's code a failure lies (issue #26): the model's own frames of an exception that eager forward
or ``torch.export`` raised, shown as pytest shows a test's (file, line, source line), with the harness's frames
cut and torch's (and other installed packages') folded into one line; and the user's class that a pytree failure
names, with the registration that fixes it.

The model's frames are those whose file lies outside this package, torch, the standard library and
site-packages. Strict export (Dynamo) does not run the model's frames: their stack is on the exception
(``real_stack``); a message that names them (``File "...", line N``) is read as a last resort. Where the model
itself lives in site-packages (a ``transformers`` model), that package's frames stand in.

Plain Python; imports nothing from this package, and torch only inside ``class_hint``.
"""

from __future__ import annotations

import os
import re
import site
import sys
import sysconfig
import traceback
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

HARNESS, TORCH, STDLIB, USER = "harness", "torch", "stdlib", "user"
_IN_MESSAGE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_SHOWN = 12  # frames shown at most (the innermost ones)


@lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, str], ...]:
    """(directory, kind) pairs, the most specific first (site-packages lies inside a venv's platstdlib)."""
    here = str(Path(__file__).resolve().parents[1])  # the package's folder (this module is in torchside/)
    torch_mod = sys.modules.get("torch")
    torch_dir = str(Path(torch_mod.__file__).resolve().parent) if getattr(torch_mod, "__file__", None) else None
    sites = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib")}
    try:
        sites.update(site.getsitepackages())
        sites.add(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    stdlib = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib")}
    out = [(here, HARNESS)] + ([(torch_dir, TORCH)] if torch_dir else [])
    out += [(str(Path(p).resolve()), "site") for p in sites if p]
    out += [(str(Path(p).resolve()), STDLIB) for p in stdlib if p]
    return tuple(sorted(out, key=lambda r: -len(r[0])))


@lru_cache(maxsize=4096)
def kind_of(filename: str) -> str:
    """``harness``, ``torch``, ``stdlib``, ``user``, or the top-level name of the installed package the file is in."""
    if not filename or filename.startswith("<"):  # <string>, <frozen ...>: generated code, never the user's
        return STDLIB
    path = os.path.realpath(filename)
    for root, kind in _roots():
        if path == root or path.startswith(root + os.sep):
            if kind != "site":
                return kind
            top = Path(path[len(root) + 1:]).parts[0] if len(path) > len(root) else "site-packages"
            top = top.split("-")[0].removesuffix(".py")
            return TORCH if top in ("torch", "functorch") else top
    return USER


def _stacks(exc: BaseException) -> Iterable[tuple[list[traceback.FrameSummary], bool]]:
    """The stacks an exception and its causes carry, in the order to trust them, each with whether all its frames
    are the traced code (Dynamo's stack, frames a message names) rather than a run's whole traceback."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(seen) < 8:
        seen.add(id(e))
        real = getattr(e, "real_stack", None)  # Dynamo: the traced (not run) user stack
        if real:
            yield list(real), True
        if e.__traceback__ is not None:
            yield list(traceback.extract_tb(e.__traceback__)), False
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    seen.clear()
    e = exc
    while e is not None and id(e) not in seen and len(seen) < 8:
        seen.add(id(e))
        yield [traceback.FrameSummary(f, int(n), name) for f, n, name in _IN_MESSAGE.findall(str(e))], True
        e = e.__cause__ or e.__context__


def _is_model(kind: str) -> bool:
    return kind not in (HARNESS, TORCH, STDLIB)


def _called_as_module(stack: list[traceback.FrameSummary], i: int) -> bool:
    """Whether frame ``i`` is a forward that ``torch.nn.Module.__call__`` called (an installed model's code, not
    a library that torch itself calls, such as sympy)."""
    return i > 0 and kind_of(stack[i - 1].filename) == TORCH and stack[i - 1].name in ("_call_impl",
                                                                                          "_wrapped_call_impl")


def stack_of(exc: BaseException) -> list[traceback.FrameSummary]:
    """The stack that reaches the model's code: its first frame is the outermost model frame (what led there,
    torch's and the harness's calls, is cut); empty where no frame of the model is known."""
    fallback: list[traceback.FrameSummary] = []
    for stack, traced in _stacks(exc):
        kinds = [kind_of(f.filename) for f in stack]
        for i, k in enumerate(kinds):
            if k == USER:
                return stack[i:]
        if not fallback:  # a model that lives in site-packages: its package's frames stand in
            first = next((i for i, k in enumerate(kinds) if _is_model(k) and (traced or _called_as_module(stack, i))),
                         None)
            if first is not None:
                fallback = stack[first:]
    return fallback


def model_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    """The model's own frames of ``exc``, outermost first (the user's files; an installed model's package where
    the user's files do not appear)."""
    return _model_of(stack_of(exc))


def _model_of(stack: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    users = [f for f in stack if kind_of(f.filename) == USER]
    if users or not stack:
        return users
    package = kind_of(stack[0].filename)  # an installed model: its own package's frames
    return [f for f in stack if kind_of(f.filename) == package]


def shown_path(filename: str) -> str:
    """A path as pytest shows it: relative to the working directory where it lies below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if rel.startswith("..") else rel


def frame_text(f: traceback.FrameSummary) -> str:
    """``models.py:42 in forward``."""
    return f"{shown_path(f.filename)}:{f.lineno} in {f.name}"


def where(exc: BaseException) -> str | None:
    """The innermost model frame, ``path/to/model.py:42 in forward``; None where none is known."""
    frames = model_frames(exc)
    return frame_text(frames[-1]) if frames else None


def frames_text(exc: BaseException, indent: str = "  ") -> str:
    """The model's frames of ``exc`` as lines (most recent call last): each frame's place and its source line;
    torch's and other packages' frames between and after them folded into one line, the harness's cut; "" where
    none is known. A deep recursion shows its innermost frames."""
    stack = stack_of(exc)
    model = {id(f) for f in _model_of(stack)}
    entries: list[list[str]] = []  # one per model frame, or one folded line
    folded: list[str] = []

    def fold() -> None:
        if folded:
            names = ", ".join(dict.fromkeys(folded))
            entries.append([f"{indent}... {len(folded)} frame{'s' if len(folded) > 1 else ''} in {names}"])
            folded.clear()

    for f in stack:
        if id(f) in model:
            fold()
            entries.append([f"{indent}{frame_text(f)}"] + ([f"{indent}    {f.line.strip()}"] if f.line else []))
            continue
        k = kind_of(f.filename)
        if k != HARNESS:
            folded.append("torch" if k == TORCH else "Python" if k == STDLIB else k)
    fold()
    if len(model) > _SHOWN:
        frames = [i for i, e in enumerate(entries) if not e[0].startswith(indent + "...")]
        entries = [[f"{indent}... {len(model) - _SHOWN} outer frames of the model"]] + entries[frames[-_SHOWN]:]
    return "\n".join(line for e in entries for line in e)


def frames_data(exc: BaseException) -> dict[str, Any]:
    """For a stage's report data: ``where`` (the innermost model frame) and ``frames`` (all of them, short)."""
    frames = model_frames(exc)
    if not frames:
        return {}
    return {"where": frame_text(frames[-1]), "frames": [frame_text(f) for f in frames][-_SHOWN:]}


def located(message: str, exc: BaseException) -> str:
    """``message`` followed by the model's frames of ``exc`` (under a heading), unless the message already shows
    the innermost one (torch's "from user code:" and "The following call raised this error:" sections)."""
    frames = model_frames(exc)
    if not frames:
        return message
    last = frames[-1]
    if f'"{last.filename}", line {last.lineno}' in message or f"{last.filename}:{last.lineno}" in message:
        return message
    return f"{message}\nin the model (most recent call last):\n{frames_text(exc)}"


def at_text(exc: BaseException) -> str:
    """`` (at models.py:42 in forward)``, or "" where no model frame is known: for one-line messages."""
    w = where(exc)
    return f" (at {w})" if w else ""


# ---- the user's class that a pytree failure names --------------------------------------------------------
_SERIAL = re.compile(r"No registered serialization name for <class '([\w.<>]+)'>")
_NAMED = re.compile(r"(?:Found|Unsupported input type|inputs with type `?) ?<class '([\w.<>]+)'>")
_PLAIN = (int, float, bool, complex, str, bytes, type(None), type(Ellipsis))


def class_hint(exc: BaseException, *trees: Any) -> str:
    """A hint naming the registration that fixes a pytree failure, or "": a class in ``trees`` (the eager
    outputs and the inputs) that torch's pytree does not know and the message names, or a registered class
    without the ``serialized_type_name`` that ``torch.export.save`` needs."""
    text = str(exc)
    m = _SERIAL.search(text)
    if m:
        name = m.group(1)
        short = name.rsplit(".", 1)[-1]
        return (f"\nhint: {short} is registered with torch's pytree without a serialized_type_name, which "
                f"torch.export.save needs: register it as torch.export.register_dataclass({short}, "
                f'serialized_type_name="{name}")')
    classes = _unknown_classes(text, trees)
    if not classes:
        m = _NAMED.search(text)
        if not m:
            return ""
        name = m.group(1)
        short = name.rsplit(".", 1)[-1]
        return (f"\nhint: {short} is a class torch's pytree does not know; if it is a dataclass, register it once, "
                f'where it is defined: torch.export.register_dataclass({short}, serialized_type_name="{name}")')
    return "".join(_register_text(cls, leaf) for cls, leaf in classes)


def _unknown_classes(text: str, trees: Iterable[Any]) -> list[tuple[type, Any]]:
    import torch
    import torch.utils._pytree as pytree  # private module, but torch's only pytree API (export itself uses it)

    found: dict[type, Any] = {}
    for tree in trees:
        try:
            leaves = pytree.tree_leaves(tree)
        except Exception:  # noqa: BLE001 - a tree torch cannot flatten: nothing to name from it
            continue
        for leaf in leaves:
            cls = type(leaf)
            if isinstance(leaf, (torch.Tensor, *_PLAIN)) or cls in found:
                continue
            if (cls.__module__ or "").split(".")[0] in ("torch", "builtins"):
                continue
            if re.search(rf"\b{re.escape(cls.__name__)}\b", text) or \
                    f"{cls.__module__}.{cls.__qualname__}" in text:
                found[cls] = leaf
    return list(found.items())


def _register_text(cls: type, leaf: Any) -> str:
    import dataclasses

    name, full = cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}"
    if dataclasses.is_dataclass(cls):
        return (f"\nhint: {name} ({full}) is a dataclass torch's pytree does not know: register it once, where "
                f'it is defined: torch.export.register_dataclass({name}, serialized_type_name="{full}")')
    fields = list(vars(leaf)) if hasattr(leaf, "__dict__") else []
    return (f"\nhint: {name} ({full}) is a class torch's pytree does not know: make it a @dataclass and register "
            f'it: torch.export.register_dataclass({name}, serialized_type_name="{full}"); or register its '
            f"fields: torch.utils._pytree.register_dataclass({name}, field_names={fields!r}, "
            f'serialized_type_name="{full}")')


__all__ = ["model_frames", "frames_text", "frames_data", "where", "located", "at_text", "kind_of", "stack_of",
           "frame_text", "shown_path", "class_hint"]
