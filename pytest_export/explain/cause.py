"""Why export made a declared dim one size (issue #54): the model's line that specialized it, found in
draft_export's record of the guard (not guessed), and, where that line calls a submodule, the module whose kernel
does it (``nn.LSTM`` splits its sequence into one step per element). Plain data in, text out: no package imports.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
from typing import Any

_CALL = re.compile(r"\bself\.([A-Za-z_][\w.]*)\s*\(")
_BRANCH = re.compile(r"^\s*(if|elif|while|assert)\b|\bint\(|\bbool\(|\bfloat\(|\.item\(\)|\.tolist\(\)")


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's folder: this is explain/


# the call path from the runner into draft_export: frames after the last of these are the user's
_OWN_FRAMES = {"draft_findings", "diagnose", "stage_export", "_run_stage", "run_case"}


def user_frame(stack: Any, filenames: Any) -> dict:
    """The innermost user frame (``loc``: its source line; ``file``, ``line``); where the stack ends in this
    package (a guard added while solving constraints, not by a line of the model), none."""
    if not isinstance(stack, list):
        return {}
    frames = [f for f in stack if isinstance(f, dict)]

    def own(frame: dict) -> bool:
        name = filenames.get(frame.get("filename"), "") if isinstance(filenames, dict) else ""
        mine = isinstance(name, str) and bool(name) and os.path.abspath(name).startswith(_OWN_DIR + os.sep)
        return mine or frame.get("name") in _OWN_FRAMES

    last_own = max((i for i, f in enumerate(frames) if own(f)), default=-1)
    user = frames[last_own + 1:]
    if not user:
        return {}
    name = filenames.get(user[-1].get("filename"), "") if isinstance(filenames, dict) else ""
    return {"loc": str(user[-1].get("loc") or ""), "file": os.path.basename(str(name or "")),
            "line": user[-1].get("line")}


def _is_guard_on(expr: str, size: int) -> bool:
    """A guard that pins a symbol to ``size``: ``Eq(s27, 20)``, ``Eq(20, s27)``, ``s27 == 20``."""
    return bool(re.search(rf"Eq\(\s*s\d+\s*,\s*{size}\s*\)|Eq\(\s*{size}\s*,\s*s\d+\s*\)|\bs\d+ == {size}\b", expr))


def _module_named(module: Any, attr: str) -> tuple[str, str] | None:
    """The submodule a line's ``self.<attr>(...)`` calls: (its path in the model, its class as the user writes
    it: ``nn.LSTM`` for torch's own); None where no submodule, or several of different classes, end in that name."""
    named = getattr(module, "named_modules", None)
    if named is None:
        return None
    found = [(path, type(m)) for path, m in named() if path == attr or path.endswith("." + attr)]
    classes = {cls for _, cls in found}
    if len(classes) != 1:
        return None
    cls = classes.pop()
    where = cls.__module__
    text = f"nn.{cls.__qualname__}" if where.startswith("torch.nn.modules") else f"{where}.{cls.__qualname__}"
    return found[0][0], text


def _file_of(module: Any, line: Any, loc: str) -> str:
    """The file of the model's class whose source has ``loc`` at ``line``: draft_export's trace names each file
    once per process, so a file traced before (by the failed export itself) comes back unnamed."""
    modules = getattr(module, "modules", None)
    for cls in dict.fromkeys(type(m) for m in (modules() if modules is not None else [module])):
        try:
            path = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            continue
        if path and isinstance(line, int) and linecache.getline(path, line).strip() == loc:
            return os.path.basename(path)
    return ""


def specialization(failures: list[dict[str, Any]], module: Any, size: int) -> dict[str, str] | None:
    """Where the model makes a declared dim ``size``, from draft_export's failures: ``line`` (``file:line `text```),
    and where the line calls a submodule rather than branching on the size, ``module`` (its path and class) and
    ``op`` (torch's function that added the guard); None where draft_export recorded no such guard with a line of
    the model."""
    for f in failures:
        if f.get("type") != "GUARD_ADDED" or not f.get("where") or not _is_guard_on(str(f.get("expr", "")), size):
            continue
        loc = str(f["where"]).strip()
        file = f.get("file") or _file_of(module, f.get("line"), loc) or "the model"
        out = {"line": f"{file}:{f.get('line')} `{loc}`", "text": loc}
        call = _CALL.search(loc)
        if call and not _BRANCH.search(loc):
            found = _module_named(module, call.group(1))
            if found is not None:
                out.update(module=f"`{found[0]}` ({found[1]})", op=str(f.get("op") or ""))
        return out
    return None


def cause_text(cause: dict[str, str], size: int) -> str:
    """The found cause, for the line that says why a fix is a constant."""
    if cause.get("module"):
        inside = f" (torch's `{cause['op']}` adds the guard)" if cause.get("op") else ""
        return (f"export specializes it to {size} inside {cause['module']}, called at {cause['line']}{inside}: the "
                f"module traces at the example's size only, no branch of the model does it; declare the axis static "
                f"yourself, or replace the module with one export traces at any size")
    return (f"the model needs that size exactly at {cause['line']}: make the model take every declared size, or "
            f"declare it static yourself")


__all__ = ["specialization", "cause_text", "user_frame"]
