"""What a repro script (``--export-repro``) writes as Python source: the ``dynamic_shapes`` declaration (a variable
per ``Dim``, derived dims as ``2 * d``, hints as ``Dim.AUTO``), and the module's classes: copied where they are
self-contained (defined at the top of their file, needing only torch, the standard library, literal constants and
each other), else imported from the files that define them under the names pickle knows them by.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import os
import pickle
import re
import symtable
import sys
import types
from pathlib import Path
from typing import Any, Iterator

from .script import RESERVED


class NotScriptable(Exception):
    """Why a failing stage gets no script."""


def render_dynamic_shapes(spec: Any, taken: set[str]) -> tuple[str, str | None]:
    """``spec`` as Python source: a variable per root ``Dim``, then ``DYNAMIC_SHAPES = ...``; a spec that cannot be
    written becomes ``None``, with the reason (the returned note)."""
    import torch.export.dynamic_shapes as ds

    lines: list[str] = []
    names: dict[tuple, str] = {}

    def var(d: Any) -> str:
        key = (d.__name__, d.min, d.max)
        if key not in names:
            base = re.sub(r"\W", "_", d.__name__) or "dim"
            base = base if base.isidentifier() and not base[0].isdigit() else f"dim_{base}"
            name = base
            while name in taken or name in RESERVED or name in names.values() or name in dir(builtins):
                name += "_"
            names[key] = name
            bounds = "".join(f", {k}={getattr(d, k)}" for k in ("min", "max")
                             if str(getattr(d, k, None)) not in ("None", "int_oo", "oo"))
            lines.append(f"{name} = Dim({d.__name__!r}{bounds})")
        return names[key]

    def walk(v: Any) -> str:
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, ds._DimHint):
            kind = str(getattr(v.type, "name", v.type)).upper()
            bounds = ", ".join(f"{k}={getattr(v, k)}" for k in ("min", "max") if getattr(v, k, None) is not None)
            return f"Dim.{kind}" + (f"({bounds})" if bounds else "")
        if isinstance(v, ds._DerivedDim):
            b = int(v.fn(0))
            a = int(v.fn(1)) - b
            term = var(v.root) if a == 1 else f"{a} * {var(v.root)}"
            return term if b == 0 else f"{term} {'+' if b > 0 else '-'} {abs(b)}"
        if isinstance(v, ds.Dim):
            return var(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {walk(x)}" for k, x in v.items()) + "}"
        if isinstance(v, (tuple, list)):
            inner = ", ".join(walk(x) for x in v)
            return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
        raise NotScriptable(f"{type(v).__module__}.{type(v).__qualname__}")

    try:
        text = walk(spec)
    except NotScriptable as exc:
        note = f"dynamic_shapes could not be written as source ({exc}): the script exports with static shapes"
        return f"DYNAMIC_SHAPES = None  # {note}\n", note
    return "\n".join([*lines, f"DYNAMIC_SHAPES = {text}"]) + "\n", None


# ---- the module's classes: copied into the script, or imported from their file -------------------------------


class _References(pickle._Pickler):  # the pure-Python pickler: its save_global sees every class pickle names
    def __init__(self) -> None:
        super().__init__(_Sink(), protocol=2)
        self.found: list[Any] = []

    def persistent_id(self, obj: Any) -> Any:
        import torch

        plain = isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter)
        return "tensor" if plain or isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)) else None

    def save_global(self, obj: Any, name: str | None = None) -> None:
        self.found.append(obj)
        super().save_global(obj, name)


class _Sink:
    def write(self, data: bytes) -> int:
        return len(data)


def _user_module(name: str | None) -> types.ModuleType | None:
    """The module by that name where it is the user's own (not the standard library's, torch's or installed)."""
    if not name or name.split(".")[0] in sys.stdlib_module_names or name.split(".")[0] in ("torch", "builtins"):
        return None
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if not file or {"site-packages", "dist-packages"} & set(Path(file).parts):
        return None
    return module


def model_block(module: Any) -> tuple[str, dict[str, Any], bool, bool, set[str], str]:
    """(the script's model section, its constants, whether the classes are copied, whether the file uses
    ``from __future__ import annotations``, the names it defines, a note for the header)."""
    refs = _References()
    refs.dump(module)
    users: dict[str, types.ModuleType] = {}
    for obj in refs.found:
        m = _user_module(getattr(obj, "__module__", None))
        if m is not None:
            users[m.__name__] = m
    if len(users) == 1:
        (m,) = users.values()
        copied = _copy_classes(m, [o for o in refs.found if getattr(o, "__module__", None) == m.__name__])
        if copied is not None:
            lines, sources, classes, bound = copied
            future = getattr(m, "annotations", None) is getattr(__import__("__future__"), "annotations")
            block = (f"\n# ---- the model's classes, copied from {m.__file__} ----\n" + "".join(
                f"{ln}\n" for ln in lines) + "\n\n" + "\n\n".join(s.rstrip() + "\n" for s in sources))
            consts = {"MODEL_MODULE": m.__name__, "SEARCH_PATH": []}
            block += f"\n\nINLINED = ({', '.join(classes)},)\n"
            which = f"the class {classes[0]} is" if len(classes) == 1 else f"the classes {', '.join(classes)} are"
            return block, consts, True, future, set(classes) | bound, f"{which} copied from {m.__file__}"
    if "__main__" in users:
        raise NotScriptable("the module's classes live in __main__ and cannot be copied alone")
    paths: list[str] = []
    for m in users.values():
        paths += [_import_root(m), str(Path(m.__file__).resolve().parent)]
    paths.append(os.getcwd())
    consts = {"MODULES": [(n, str(Path(m.__file__).resolve())) for n, m in sorted(users.items())],
              "SEARCH_PATH": list(dict.fromkeys(paths))}
    files = ", ".join(str(Path(m.__file__).resolve()) for m in users.values())
    return "", consts, False, False, set(), (f"the module's classes come from importing {files}" if files else
                                             f"the module ({type(module).__qualname__}) needs no file of yours")


def imported_by(module: Any, consts: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """What the script imports, computed: (the packages, as ``name version``, torch first: those pickle names a
    class or function of, and, where the script imports the user's files, those the files import at their top;
    the user's files it imports by path, and the folders it puts on ``sys.path``)."""
    refs = _References()
    refs.dump(module)
    owners = [getattr(o, "__module__", None) for o in refs.found]
    roots = {"torch"} | {_root(o) for o in owners if isinstance(o, str) and _user_module(o) is None}
    files = [file for _, file in consts.get("MODULES", [])]
    for name, _ in consts.get("MODULES", []):
        for value in vars(sys.modules[name]).values():
            owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if isinstance(owner, str) and _user_module(owner) is None:
                roots.add(_root(owner))
    roots -= {None, "builtins", "__future__", "__main__", *sys.stdlib_module_names,
              *(_root(n) for n, _ in consts.get("MODULES", []))}
    packages = [_versioned(r) for r in sorted(roots, key=lambda r: (r != "torch", r))]
    return packages, files, list(consts.get("SEARCH_PATH", []))


def _root(name: str | None) -> str | None:
    return name.split(".")[0] if isinstance(name, str) and name else None


def _versioned(root: str) -> str:
    """``transformers 4.46.0``: the installed distribution that provides an import name, with its version."""
    from importlib import metadata

    try:
        dists = metadata.packages_distributions().get(root) or [root]
        return f"{dists[0]} {metadata.version(dists[0])}"
    except Exception:  # noqa: BLE001 - a package that is no installed distribution (a checkout on sys.path)
        version = getattr(sys.modules.get(root), "__version__", None)
        return f"{root} {version}" if version else root


@contextlib.contextmanager
def meta_weights(module: Any) -> Iterator[dict[str, Any]]:
    """The module's parameters and buffers swapped for meta tensors of their shapes while it is pickled, so that
    its pickle holds no weights; yields them by the name of their first slot (``named_modules`` order, as the
    script walks them back in); a tensor in two slots (tied weights) is one meta tensor in both. Put back after.
    A tensor subclass other than a parameter stays as it is (pickled whole)."""
    import torch

    slots: list[tuple[dict[str, Any], str, Any]] = []
    made: dict[int, tuple[str, Any, Any]] = {}
    try:
        for prefix, sub in module.named_modules(remove_duplicate=False):
            for store in (sub._parameters, sub._buffers):
                for key, t in list(store.items()):
                    if t is None or type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_meta:
                        continue
                    if id(t) not in made:
                        meta = torch.empty_like(t, device="meta")
                        if isinstance(t, torch.nn.Parameter):
                            meta = torch.nn.Parameter(meta, requires_grad=t.requires_grad)
                        made[id(t)] = (f"{prefix}.{key}" if prefix else key, t, meta)
                    slots.append((store, key, t))
                    store[key] = made[id(t)][2]
        yield {name: t.detach() for name, t, _ in made.values()}
    finally:
        for store, key, t in reversed(slots):
            store[key] = t


def _import_root(m: types.ModuleType) -> str:
    """The folder ``m``'s dotted name is relative to."""
    path = Path(m.__file__).resolve()
    parts = m.__name__.split(".")
    root = path.parent.parent if path.name == "__init__.py" else path.parent
    for _ in parts[:-1]:
        root = root.parent
    return str(root)


def _copy_classes(m: types.ModuleType, wanted: list[Any]) -> tuple[list[str], list[str], list[str], set[str]] | None:
    """(import and constant lines, class sources in file order, class names, the names the lines bind) where every class is defined at the
    top of ``m`` and needs only torch, the standard library, literal constants and other such classes; else None."""
    lines: dict[str, str] = {}
    done: dict[str, tuple[int, str]] = {}
    pending = list(wanted)
    while pending:
        cls = pending.pop()
        if not isinstance(cls, type) or cls.__qualname__ != cls.__name__ or getattr(m, cls.__name__, None) is not cls:
            return None
        if cls.__name__ in done:
            continue
        if cls.__name__ in RESERVED:
            return None
        try:
            source, line = inspect.getsourcelines(cls)
        except (OSError, TypeError):
            return None
        text = "".join(source)
        if text[:1].isspace():
            return None
        done[cls.__name__] = (line, text)
        for name in _free_names(text):
            if name in done or name in lines or name in ("__class__",):
                continue
            if name not in vars(m):
                if hasattr(builtins, name):
                    continue
                return None
            value = vars(m)[name]
            if isinstance(value, type) and value.__module__ == m.__name__:
                pending.append(value)
                continue
            line_ = _import_line(name, value)
            if line_ is None:
                return None
            lines[name] = line_
    return ([ln for ln in lines.values() if ln], [t for _, t in sorted(done.values())],
            [n for n, _ in sorted(done.items(), key=lambda kv: kv[1][0])], set(lines))


def _free_names(source: str) -> set[str]:
    """The global names a top-level class statement reads."""
    out: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for s in table.get_symbols():
            top = table.get_type() == "module" and not s.is_assigned() and not s.is_imported()
            if s.is_referenced() and (s.is_global() or top):
                out.add(s.get_name())
        for child in table.get_children():
            walk(child)

    walk(symtable.symtable(source, "<class>", "exec"))
    return out


_SCRIPT_BINDS = {"torch": "torch", "pytree": "torch.utils._pytree", "contextlib": "contextlib", "copy": "copy",
                 "importlib": "importlib", "io": "io", "os": "os", "sys": "sys", "traceback": "traceback",
                 "types": "types"}


def _import_line(name: str, value: Any) -> str | None:
    """How the script binds ``name`` to ``value`` ("" where the script binds it so already); None if it cannot."""
    if isinstance(value, types.ModuleType):
        if _SCRIPT_BINDS.get(name) == value.__name__:
            return ""
        root = value.__name__.split(".")[0]
        if name in RESERVED or (root != "torch" and root not in sys.stdlib_module_names):
            return None
        return f"import {value.__name__}" if name == value.__name__ else f"import {value.__name__} as {name}"
    if isinstance(value, (bool, int, float, str, bytes, type(None))):
        try:
            ok = ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):
            ok = False
        return f"{name} = {value!r}" if ok and name not in RESERVED else None
    owner, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not owner or not qual or "." in qual or not (owner.split(".")[0] == "torch" or owner.split(".")[0] in
                                                     sys.stdlib_module_names):
        return None
    try:
        if getattr(importlib.import_module(owner), qual) is not value:
            return None
    except Exception:  # noqa: BLE001
        return None
    if name == "Dim" and qual == "Dim" and owner.startswith("torch.export"):
        return ""
    return None if name in RESERVED else f"from {owner} import {qual}" + ("" if qual == name else f" as {name}")


__all__ = ["NotScriptable", "render_dynamic_shapes", "model_block", "imported_by", "meta_weights"]
