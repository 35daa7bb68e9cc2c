"""Where the guards behind a refused or narrowed size came from, as torch recorded them.

Export's shape environment keeps every guard it added with the frame that added it (``ShapeGuard.sloc``): the
model's own line for a branch or ``torch._check`` on a size, a frame inside torch for a guard an operator added
(a ``reshape`` that needs divisibility), where strict mode also records the model's line that called it. The
exported program keeps the environment alive through the symbolic sizes of its placeholders.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import weakref
from typing import Any, Iterator

INSIDE_TORCH = "inside torch"
NO_SOURCE = "(no source recorded)"


@functools.cache
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


@functools.cache
def _own_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package's folder, above proof/


class _TorchFiles(set):
    """torch's own "uninteresting files", and every other file of torch: a guard's recorded frame is then the
    innermost one outside torch (the model's, or a library's, line), also for an operator's guard in non-strict
    export, where torch records the operator's frame."""

    def __contains__(self, filename: object) -> bool:
        return (isinstance(filename, str) and filename.startswith(_torch_dir())) or set.__contains__(self, filename)


@contextlib.contextmanager
def model_frames() -> Iterator[None]:
    """While export runs, torch records each guard's frame outside torch (issue #33); elsewhere unchanged. Where
    torch lacks the hook it patches (another version), export runs as it is."""
    try:
        import torch.fx.experimental.symbolic_shapes as shapes

        original = shapes.uninteresting_files
    except (ImportError, AttributeError):
        yield
        return
    files = _TorchFiles(original())  # one set: torch asks for it at every frame of every guard and graph node
    shapes.uninteresting_files = lambda: files
    try:
        yield
    finally:
        shapes.uninteresting_files = original


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
    """A path as a message shows it: inside torch from ``torch/``, an installed library's from its package
    (``transformers/models/vit/modeling_vit.py``), else relative to the working directory where it lies under it."""
    path = os.path.abspath(path)
    if path.startswith(_torch_dir()):
        return "torch" + os.sep + path[len(_torch_dir()):]
    for root in sys.path:
        if root.endswith(("site-packages", "dist-packages")) and path.startswith(os.path.join(root, "")):
            return path[len(os.path.join(root, "")):]
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
    if frame is not None and not os.path.abspath(frame.filename).startswith((_torch_dir(), _own_dir())):
        line = (frame.line or "").strip()
        return f"{_shown(frame.filename)}:{frame.lineno} in {frame.name}" + (f": `{line}`" if line else "")
    if user:  # "code  # file:line in name"
        code, _, where = user.partition("  # ")
        if where:
            file, _, rest = where.strip().partition(":")
            return f"{_shown(_full_path(file))}:{rest}: `{code.strip()}`"
        return user
    if frame is not None and not os.path.abspath(frame.filename).startswith(_own_dir()):  # an operator's, in torch
        return f"{INSIDE_TORCH} ({_shown(frame.filename)}:{frame.lineno} in {frame.name})"
    return NO_SOURCE


@dataclasses.dataclass
class Recorded:
    """export's guards as torch recorded them: ``(expr, source)`` in the order added, the substitutions export made
    for derived dims (``s0 -> 16*s78``: their ``Eq`` guards hold at every declared size and are dropped), and the
    example's value of every symbol."""

    guards: list[tuple[Any, str]]
    replacements: dict[Any, Any]
    hints: dict[Any, Any]


_RECORDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def record_of(ep: Any) -> Recorded | None:
    """export's guards of ``ep``, read the first time (the export stage asks right after export); None where torch
    kept no shape environment. Never raises: a pointer for a message, never a verdict."""
    try:
        if ep not in _RECORDS:
            env = shape_env_of(ep)
            _RECORDS[ep] = None if env is None else _recorded(env)
        return _RECORDS[ep]
    except Exception:  # noqa: BLE001 - torch-internal records
        return None


def _recorded(env: Any) -> Recorded:
    """The guards of a shape environment, as ``Recorded`` holds them."""
    import sympy

    hints = _hints(env)
    replacements = dict(getattr(env, "replacements", {}))
    guards = []
    for guard in list(getattr(env, "guards", [])):
        expr = guard.expr
        if isinstance(expr, sympy.Eq) and replacements.get(expr.lhs) == expr.rhs:
            continue  # export's own substitution for a derived dim
        guards.append((expr, source_of(guard)))
    return Recorded(guards, replacements, hints)


def _hints(env: Any) -> dict[Any, Any]:
    """The example's value of every symbol of ``env``."""
    import sympy

    values = getattr(env, "backed_var_to_val", None)  # torch 2.13's name; var_to_val before it (deprecated)
    if values is None:
        values = getattr(env, "var_to_val", {})
    return {s: sympy.Integer(int(v)) for s, v in values.items() if getattr(v, "is_number", False)}


def substituted(rec: Recorded, expr: Any) -> Any:
    for _ in range(8):  # replacements chain (s0 -> 16*s78); a few rounds reach the roots
        nxt = expr.xreplace(rec.replacements)
        if nxt == expr:
            break
        expr = nxt
    return expr


def holds(rec: Recorded, expr: Any, point: dict[Any, Any]) -> bool | None:
    """Whether ``expr`` holds with the roots at ``point`` (the others at the example's values); None where it
    cannot be decided (a symbol the declaration does not vary: unbacked, data-dependent)."""

    try:
        value = substituted(rec, expr).xreplace({**rec.hints, **point})
        if value.free_symbols:
            return None
        return bool(value)
    except (TypeError, ValueError, ZeroDivisionError):
        return None


_VIOLATION = re.compile(r"Not all values of (\w+) = (.+?) in the specified range (.+?) satisfy the generated guard")


def violation_sources(exc: BaseException, limit: int = 4) -> list[str]:
    """For a constraint violation: the lines that added the guards torch could not prove over a declared range,
    each with one such guard in the dim's name (``models/cnn.py:7 in forward: `...` (Eq(128*h, 256*(h//2)))``).
    Read from the shape environment export failed in (a local of the frames the exception passed through).
    Empty where torch kept no record. Never raises."""
    try:
        return _violation_sources(exc, limit)
    except Exception:  # noqa: BLE001 - torch-internal records; the message without them is still right
        return []


def _env_in(exc: BaseException) -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    seen: list[BaseException] = []
    x: BaseException | None = exc
    while x is not None and x not in seen:
        seen.append(x)
        tb = x.__traceback__
        while tb is not None:
            for v in list(tb.tb_frame.f_locals.values()):
                env = v if isinstance(v, ShapeEnv) else getattr(v, "shape_env", None)
                if isinstance(env, ShapeEnv):
                    return env
            tb = tb.tb_next
        x = x.__cause__ or x.__context__
    return None


def axis_label(source: Any) -> str | None:
    """A symbol's source as the input axis it is (``L['x'].size()[3]`` -> ``x.shape[3]``); None for another kind."""
    m = re.fullmatch(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", source if isinstance(source, str) else _source_name(source))
    return f"{m.group(1)}.shape[{m.group(2)}]" if m else None


def symbol_labels(exc: BaseException) -> dict[str, str]:
    """Each of torch's symbols in the shape environment a failed export left (``s77``) -> the input axis it
    stands for (``x.shape[0]``), for messages in the user's words (#54). Empty where torch kept no record."""
    try:
        env = _env_in(exc)
        out = {}
        for sym, srcs in (getattr(env, "var_to_sources", {}) if env is not None else {}).items():
            for label in filter(None, map(axis_label, srcs)):
                out.setdefault(str(sym), label)
        return out
    except Exception:  # noqa: BLE001 - torch-internal records; the message is right without them
        return {}


def _source_name(source: Any) -> str:
    name = getattr(source, "name", "")
    return name() if callable(name) else str(name)  # a property in torch 2.13, a method before


def _violation_sources(exc: BaseException, limit: int) -> list[str]:
    import sympy

    found = _VIOLATION.findall(str(exc))
    env = _env_in(exc) if found else None
    if env is None:
        return []
    by_source = {_source_name(src): sym for sym, srcs in getattr(env, "var_to_sources", {}).items() for src in srcs}
    rec = _recorded(env)
    out: dict[str, str] = {}
    # every symbol a guard shows, in the user's words: a violated dim by its name, another axis by its label (#54)
    shown_as = {sym: sympy.Symbol(axis_label(src), integer=True) for src, sym in by_source.items() if axis_label(src)}
    shown_as.update({by_source[src.strip()]: sympy.Symbol(n, integer=True) for n, src, _ in found
                     if src.strip() in by_source})
    for name, source, text in dict.fromkeys(found):
        sym = by_source.get(source.strip())
        if sym is None:  # strict export names the inputs L['flat_args'][i]: the one symbol of that axis, if one
            axis = source.strip()[source.strip().rfind(".size()"):]
            hits = {v for k, v in by_source.items() if k.endswith(axis)}
            sym = hits.pop() if len(hits) == 1 else None
        bounds = [int(b) for b in re.findall(r"-?\d+", text)]
        if sym is None or not bounds:
            continue
        lo, hi = (bounds[0], bounds[-1]) if len(bounds) > 1 else (2, bounds[0])
        sizes = sorted({lo, hi, *range(lo, min(hi, lo + 64) + 1), *range(max(lo, hi - 8), hi + 1)})
        for expr, where in rec.guards:
            if where in out or sym not in substituted(rec, expr).free_symbols:
                continue
            if any(holds(rec, expr, {sym: sympy.Integer(x)}) is False for x in sizes):
                shown = substituted(rec, expr).xreplace({**shown_as, sym: sympy.Symbol(name, integer=True)})
                out[where] = f"{where} (`{shown}`)"
        if len(out) >= limit:
            break
    return list(out.values())[:limit]


ACCEPTED_CAP = 4096  # sizes of one dim decided one by one at most, for a fix torch did not suggest


def accepted_sizes(exc: BaseException) -> dict[str, dict[str, Any]]:
    """For a constraint violation torch suggested no fix for: each violated dim whose guards involve it alone, the
    sizes of its declared range they accept (``accepted``: ``(lo, hi)`` where one interval, else None) and, for a
    refused size, a guard that refuses it in the dim's name (``refused``: ``(size, guard)``); decided over every
    size (at most ``ACCEPTED_CAP`` per dim). Empty where torch kept no record. Never raises."""
    try:
        import sympy

        found = _VIOLATION.findall(str(exc))
        env = _env_in(exc) if found else None
        if env is None:
            return {}
        by_source = {_source_name(src): sym for sym, srcs in getattr(env, "var_to_sources", {}).items() for src in srcs}
        rec, out = _recorded(env), {}
        for name, source, text in dict.fromkeys(found):
            sym, bounds = by_source.get(source.strip()), [int(b) for b in re.findall(r"-?\d+", text)]
            if sym is None or len(bounds) != 2 or bounds[1] - bounds[0] > ACCEPTED_CAP:
                continue
            own = [e for e, _ in rec.guards if substituted(rec, e).free_symbols == {sym}]
            ok, refused = [], None
            for x in range(bounds[0], bounds[1] + 1):
                bad = next((e for e in own if holds(rec, e, {sym: sympy.Integer(x)}) is False), None)
                if bad is None:
                    ok.append(x)
                elif refused is None:
                    refused = (x, str(substituted(rec, bad).xreplace({sym: sympy.Symbol(name, integer=True)})))
            whole = bool(ok) and ok == list(range(ok[0], ok[-1] + 1))
            out[name] = {"declared": tuple(bounds), "accepted": (ok[0], ok[-1]) if whole else None,
                         "refused": refused}
        return out
    except Exception:  # noqa: BLE001 - torch-internal records; no fix is offered without them
        return {}


def refusing_guards(ep: Any, symbol: str, value: int, limit: int = 3) -> list[str]:
    """The guards of ``ep``'s export that fail when ``symbol`` takes ``value`` (the other symbols at their
    example values), each as ``"`guard` from SOURCE"``; at most ``limit``. Empty where torch kept no record.
    A pointer for a message, never a verdict: whatever torch's internals hold, this does not raise."""
    try:
        return _refusing_guards(ep, symbol, value, limit)
    except Exception:  # noqa: BLE001 - torch-internal records; a message without the pointer is still right
        return []


def _refusing_guards(ep: Any, symbol: str, value: int, limit: int) -> list[str]:
    import sympy

    rec = record_of(ep)
    if rec is None:
        return []
    target = next((s for s in rec.hints if str(s) == symbol), None)
    if target is None:
        return []
    out: list[str] = []
    for expr, source in rec.guards:
        if target not in substituted(rec, expr).free_symbols or holds(rec, expr, {target: sympy.Integer(value)}) is not False:
            continue
        text = str(expr)
        if any(o.startswith(f"`{text}`") for o in out):
            continue
        out.append(f"`{text}` from {source}")
        if len(out) == limit:
            break
    if out and all(INSIDE_TORCH in o for o in out):
        out[-1] += " (an operator's guards: export with strict=True to see the model's line)"
    return out


__all__ = ["INSIDE_TORCH", "NO_SOURCE", "Recorded", "model_frames", "violation_sources", "symbol_labels", "axis_label", "accepted_sizes", "record_of", "holds", "substituted",
           "shape_env_of", "source_of", "refusing_guards"]
