"""Where the guards behind a refused or narrowed size came from, as torch recorded them.

Export's shape environment keeps every guard it added with the frame that added it (``ShapeGuard.sloc``): the
model's own line for a branch or ``torch._check`` on a size, a frame inside torch for a guard an operator added
(a ``reshape`` that needs divisibility), where strict mode also records the model's line that called it. The
exported program keeps the environment alive through the symbolic sizes of its placeholders.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

INSIDE_TORCH = "inside torch"


@functools.cache
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def shape_env_of(ep: Any) -> Any:
    """The shape environment export traced ``ep`` in, or None (a loaded program has none)."""
    import torch

    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        sizes = list(val.shape) if isinstance(val, torch.Tensor) else [val]
        for s in sizes:
            if isinstance(s, torch.SymInt):
                return s.node.shape_env
    return None


def _shown(path: str) -> str:
    """A path as a message shows it: inside torch from ``torch/``, else relative to the working directory
    where it lies under it."""
    path = os.path.abspath(path)
    if path.startswith(_torch_dir()):
        return "torch" + os.sep + path[len(_torch_dir()):]
    try:
        shown = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if shown.startswith(".." + os.sep) else shown


def _full_path(short: str) -> str:
    """Strict mode records a shortened file name; the loaded module's file that ends with it, if just one does."""
    if os.path.isabs(short) and os.path.exists(short):
        return short
    hits = {os.path.abspath(f) for f in (getattr(m, "__file__", None) for m in list(sys.modules.values()))
            if isinstance(f, str) and f.endswith(short)}
    return hits.pop() if len(hits) == 1 else short


def source_of(guard: Any) -> str:
    """``"model.py:12 in forward: `if x.shape[0] >= 3:`"``, or the frame inside torch that added the guard."""
    frame = getattr(guard.sloc, "framework_loc", None)
    user = (getattr(guard.sloc, "maybe_user_loc", None) or "").strip()
    if frame is not None and not os.path.abspath(frame.filename).startswith(_torch_dir()):
        line = (frame.line or "").strip()
        return f"{_shown(frame.filename)}:{frame.lineno} in {frame.name}" + (f": `{line}`" if line else "")
    if user:  # "code  # file:line in name"
        code, _, where = user.partition("  # ")
        if where:
            file, _, rest = where.strip().partition(":")
            return f"{_shown(_full_path(file))}:{rest}: `{code.strip()}`"
        return user
    if frame is not None:  # non-strict export records no frame of the model for an operator's guard
        return f"{INSIDE_TORCH} ({_shown(frame.filename)}:{frame.lineno} in {frame.name})"
    return "(no source recorded)"


def refusing_guards(ep: Any, symbol: str, value: int, limit: int = 3) -> list[str]:
    """The guards of ``ep``'s export that fail when ``symbol`` takes ``value`` (the other symbols at their
    example values), each as ``"`guard` from SOURCE"``; at most ``limit``. Empty where torch kept no record.
    A pointer for a message, never a verdict: whatever torch's internals hold, this does not raise."""
    try:
        return _refusing_guards(ep, symbol, value, limit)
    except Exception:  # noqa: BLE001 - torch-internal records; a message without the pointer is still right
        return []


def _refusing_guards(ep: Any, symbol: str, value: int, limit: int) -> list[str]:
    env = shape_env_of(ep)
    if env is None:
        return []
    import sympy

    values = getattr(env, "backed_var_to_val", None)  # torch 2.13's name; var_to_val before it (deprecated)
    if values is None:
        values = getattr(env, "var_to_val", {})
    hints = {s: sympy.Integer(int(v)) for s, v in values.items() if getattr(v, "is_number", False)}
    target = next((s for s in hints if str(s) == symbol), None)
    if target is None:
        return []
    subs = {**hints, target: sympy.Integer(value)}
    out: list[str] = []
    seen: set[str] = set()
    for guard in getattr(env, "guards", []):
        expr = guard.expr
        if target not in getattr(expr, "free_symbols", ()):
            continue
        try:
            holds = bool(expr.xreplace(subs))
        except (TypeError, ValueError, ZeroDivisionError):
            continue
        text = str(expr)
        if holds or text in seen:
            continue
        seen.add(text)
        out.append(f"`{text}` from {source_of(guard)}")
        if len(out) == limit:
            break
    if out and all(INSIDE_TORCH in o for o in out):
        out[-1] += " (an operator's guards: export with strict=True to see the model's line)"
    return out


__all__ = ["INSIDE_TORCH", "shape_env_of", "source_of", "refusing_guards"]
