"""The text of a repro script (``--export-repro``): a standalone Python file that loads a failing case's module and
inputs from the ``.pt`` file beside it (its weights from a second file where the check compares numbers), runs
the one check that failed, as the harness ran it, and prints ``REPRODUCED: ...`` (exit 1) or ``NOT REPRODUCED:
...`` (exit 0); ``COULD NOT CHECK`` (exit 2) where the script itself raised. ``write`` decides what goes in; this module only assembles the text (no torch, no package
imports).
"""

from __future__ import annotations

from typing import Any

SCRIPTED = ("eager", "export", "compare", "serde", "decomp", "guards", "fuzz", "retrace", "unflatten")
"""The stages a script can check (``cuda``, ``aoti`` and others get none)."""

_IMPORTS = '''\
import contextlib
import copy
import importlib
import importlib.util
import io
import os
import sys
import traceback
import types

import torch
import torch.utils._pytree as pytree
from torch.export import Dim

HERE = os.path.dirname(os.path.abspath(__file__))
'''

_IMPORT_MODULES = '''

def import_model_classes():
    """The files that define the module's classes, imported under the names pickle knows them by."""
    for path in reversed(SEARCH_PATH):
        if path not in sys.path:
            sys.path.insert(0, path)
    for name, file in MODULES:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        for i in range(1, name.count(".") + 1):  # parent packages that cannot be imported: empty stand-ins
            sys.modules.setdefault(name.rsplit(".", i)[0], types.ModuleType(name.rsplit(".", i)[0]))
        spec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
'''

_STAND_IN = '''

def import_model_classes():
    """The classes above, in a stand-in module of the name pickle knows them by."""
    for path in reversed(SEARCH_PATH):
        if path not in sys.path:
            sys.path.insert(0, path)
    for i in range(MODEL_MODULE.count("."), -1, -1):
        name = MODEL_MODULE.rsplit(".", i)[0] if i else MODEL_MODULE
        sys.modules.setdefault(name, types.ModuleType(name))
    for cls in INLINED:
        setattr(sys.modules[MODEL_MODULE], cls.__name__, cls)
'''

_COMMON = '''

def first_line(exc):
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def on_device(tree):
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(DEVICE), tree)


def load():
    """The module and its example inputs as the harness had them (and the failing probe's, under "probe")."""
    import_model_classes()
    data = torch.load(os.path.join(HERE, INPUTS), weights_only=False)
    model = materialize(data["module"], data["kept"])
    return model.to(DEVICE), tuple(on_device(data["args"])), dict(on_device(data["kwargs"])), data


def materialize(model, kept):
    """The module was saved with meta tensors for weights: each gets its values from WEIGHTS (and the integer
    buffers from `kept`), else seeded random ones; a tensor in two places (tied weights) stays one tensor."""
    saved = {**(torch.load(os.path.join(HERE, WEIGHTS), weights_only=True) if WEIGHTS else {}), **kept}
    made, generator = {}, torch.Generator().manual_seed(SEED)
    for prefix, sub in model.named_modules(remove_duplicate=False):
        for store in (sub._parameters, sub._buffers):
            for key, t in list(store.items()):
                if t is None or not t.is_meta:
                    continue
                if id(t) not in made:
                    name = f"{prefix}.{key}" if prefix else key
                    value = saved.get(name)
                    if value is None:
                        value = (torch.rand(t.shape, dtype=t.dtype, generator=generator) if t.is_floating_point()
                                 else torch.zeros(t.shape, dtype=t.dtype))
                    made[id(t)] = (t, torch.nn.Parameter(value, t.requires_grad) if isinstance(t, torch.nn.Parameter)
                                   else value)
                store[key] = made[id(t)][1]
    return model


def call(fn, args, kwargs):
    """One forward on copies of the inputs after torch.manual_seed(SEED): (outputs, the inputs afterwards)."""
    args, kwargs = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
    torch.manual_seed(SEED)
    return fn(*args, **kwargs), (args, kwargs)


def export(model, args, kwargs):
    """torch.export.export as the harness called it, on a copy (tracing runs forward: the module stays as it was)."""
    extra = {"preserve_module_call_signature": PRESERVE} if PRESERVE else {}
    args, kwargs = pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs))
    return torch.export.export(copy.deepcopy(model), args, kwargs, dynamic_shapes=DYNAMIC_SHAPES, strict=STRICT,
                               **extra)


def tolerances(expected):
    if RTOL is None and ATOL is None:
        return {}
    from torch.testing._comparison import default_tolerances  # torch's default for the one not given

    rtol, atol = default_tolerances(expected.dtype)
    return {"rtol": rtol if RTOL is None else RTOL, "atol": atol if ATOL is None else ATOL}


def differences(got, want, root="output", shapes_only=False):
    """Where two results differ, a line each ([] where they agree): tensors by torch.testing.assert_close (shapes
    and dtypes only for fake tensors), other values by ==."""
    g, g_spec = pytree.tree_flatten_with_path(got)
    w, w_spec = pytree.tree_flatten_with_path(want)
    if str(g_spec).replace("Size", "tuple") != str(w_spec).replace("Size", "tuple"):
        return [f"{root}: the structure differs: {g_spec} vs {w_spec}"]
    out = []
    for (path, a), (_, e) in zip(g, w):
        try:
            if shapes_only and isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
                if (a.shape, a.dtype) != (e.shape, e.dtype):
                    raise AssertionError(f"{tuple(a.shape)} {a.dtype} vs {tuple(e.shape)} {e.dtype}")
            elif isinstance(a, torch.Tensor) or isinstance(e, torch.Tensor):
                torch.testing.assert_close(a, e, equal_nan=True, **tolerances(torch.as_tensor(e)))
            elif a != e:
                raise AssertionError(f"{a!r} != {e!r}")
        except AssertionError as exc:
            out.append(f"{root}{pytree.keystr(path)}: " + str(exc).strip().replace("\\n", "\\n    "))
    return out


def disagreement(program, model, args, kwargs, label):
    """How `program` differs from eager `model` on these inputs (outputs, inputs forward mutated, buffers) over two
    calls: a forward that changes its own Python state diverges from the second call on. None where they agree."""
    model = copy.deepcopy(model)
    for n in (1, 2):
        try:
            got = call(program, args, kwargs)
        except Exception as exc:
            traceback.print_exc()
            return f"the {label} raised on the example inputs (call {n}): {first_line(exc)}"
        want = call(model, args, kwargs)
        lines = differences(got[0], want[0]) + differences(got[1], want[1], "input (after forward)")
        mine, theirs = dict(program.named_buffers()), dict(model.named_buffers())
        common = sorted(set(mine) & set(theirs))
        lines += differences([mine[k] for k in common], [theirs[k] for k in common], "buffer (after forward)")
        if lines:
            return f"the {label} disagrees with eager (call {n}):\\n  " + "\\n  ".join(lines)
    return None
'''

_PROBE = '''

def probe_inputs(data):
    """The failing probe's inputs: the saved tensors, or (a probe the harness ran with fake tensors, at sizes too
    large to allocate) fake tensors of the saved shapes, made and run inside the returned mode."""
    probe = data["probe"]
    if not probe["fake"]:
        return tuple(on_device(probe["args"])), dict(on_device(probe["kwargs"])), contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode  # shapes, guards and dtypes only

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:  # the saved tensors are meta tensors: shapes and dtypes, no data
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: torch.empty(t.shape, dtype=t.dtype, device=DEVICE),
                                            (probe["args"], probe["kwargs"]))
    return tuple(args), dict(kwargs), mode


def at_probe(program, model, data):
    """(eager's outputs or the exception it raised, the program's), both on the probe's inputs."""
    args, kwargs, mode = probe_inputs(data)
    runs = []
    for fn in (copy.deepcopy(model), program):
        with mode:
            try:
                runs.append(call(fn, args, kwargs))
            except Exception as exc:
                runs.append(exc)
    return runs


def probe_differences(want, got, data):
    fake = data["probe"]["fake"]
    return differences(got[0], want[0], shapes_only=fake) + differences(got[1], want[1], "input (after forward)", fake)


def in_range(program, model, data, label="exported program"):
    """An in-range probe: the program must accept it and agree with eager."""
    sizes = data["probe"]["sizes"]
    want, got = at_probe(program, model, data)
    if isinstance(want, Exception):
        return True, f"eager raised at in-range sizes {sizes} (the declared range is wider than the model supports): {first_line(want)}"
    if isinstance(got, Exception):
        return True, f"the {label} refused or raised at in-range sizes {sizes}, where eager runs: {first_line(got)}"
    lines = probe_differences(want, got, data)
    if lines:
        return True, f"the {label} accepts in-range sizes {sizes} but disagrees with eager:\\n  " + "\\n  ".join(lines)
    return False, f"the {label} accepts in-range sizes {sizes} and agrees with eager"


def out_of_range(program, model, data, label="exported program"):
    """An out-of-range probe: the program must refuse it, or agree with eager."""
    sizes = data["probe"]["sizes"]
    want, got = at_probe(program, model, data)
    if isinstance(got, Exception):
        return False, f"the {label} refuses out-of-range sizes {sizes}: {first_line(got)}"
    if isinstance(want, Exception):
        return True, f"the {label} accepts out-of-range sizes {sizes}, which eager rejects ({first_line(want)}): no guard checks them"
    lines = probe_differences(want, got, data)
    if lines:
        return True, f"the {label} accepts out-of-range sizes {sizes} and disagrees with eager:\\n  " + "\\n  ".join(lines)
    return False, f"the {label} accepts out-of-range sizes {sizes} and agrees with eager"


def probe_check(ep, model, data):
    check_probe = in_range if data["probe"]["in_range"] else out_of_range
    return check_probe(ep.module(), model, data)
'''

_STATE = '''

def plain(value, depth=0):
    """A copy of a plain Python value (numbers, strings, small containers of them); TypeError for anything else."""
    if isinstance(value, (int, float, complex, bool, str, bytes, type(None))):
        return value
    if depth < 3 and isinstance(value, (list, tuple, set, frozenset)) and len(value) <= 256:
        return type(value)(plain(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict) and len(value) <= 256:
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"not a plain value: {type(value).__name__}")


def python_state(model):
    """The plain Python attributes of every submodule (not nn.Module's own bookkeeping), copied, by path."""
    internals, out = set(vars(torch.nn.Module())) | {"training"}, {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            if name not in internals and not name.startswith("__"):
                try:
                    out[f"{prefix}.{name}" if prefix else name] = plain(value)
                except TypeError:
                    pass
    return out


def per_call_changes(model, args, kwargs, calls=3):
    """Each plain attribute that two consecutive eager calls both change: `path` (its values, call by call)."""
    model, absent = copy.deepcopy(model), "<absent>"
    states = [python_state(model)]
    for _ in range(calls):
        call(model, args, kwargs)
        states.append(python_state(model))
    same = lambda a, b: a == b or (a != a and b != b)  # NaN stays NaN
    changed = [{p for p in set(a) | set(b) if not same(a.get(p, absent), b.get(p, absent))}
               for a, b in zip(states, states[1:])]
    paths = sorted(set().union(*(x & y for x, y in zip(changed, changed[1:]))))
    return [f"`{p}` (" + ", then ".join(repr(s.get(p, absent))[:60] for s in states) + ")" for p in paths]
'''

_AXES = '''

def input_axes(ep):
    """Per user input tensor, each axis as its size or its [min, max] range in the program."""
    user = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"}
    return [[int(d) if isinstance(d, int) else str(ep.range_constraints.get(d.node.expr)) for d in n.meta["val"].shape]
            for n in ep.graph.nodes if n.op == "placeholder" and n.name in user
            and isinstance(n.meta.get("val"), torch.Tensor)]


def input_shapes(ep):
    """The program's user inputs by their path in (args, kwargs): their shapes (ints, or SymInts for dynamic axes)."""
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [getattr(nodes.get(getattr(s.arg, "name", None)), "meta", {}).get("val")
            for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    flat, _ = pytree.tree_flatten_with_path(pytree.tree_unflatten(vals, ep.call_spec.in_spec))
    return {pytree.keystr(k): getattr(v, "shape", None) for k, v in flat}
'''

_MAIN = '''

def main():
    try:
        reproduced, text = check()
    except Exception:
        traceback.print_exc()
        print("COULD NOT CHECK: the script itself raised (above)")
        return 2
    print(f"REPRODUCED: {text}" if reproduced else f"NOT REPRODUCED: {text}")
    return 1 if reproduced else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def comment(text: str, limit: int = 40, width: int = 200) -> str:
    """``text`` as comment lines (at most ``limit`` lines, each cut at ``width``)."""
    lines = text.rstrip().splitlines() or [""]
    out = [ln if len(ln) <= width else ln[: width - 3] + "..." for ln in lines[:limit]]
    if len(lines) > limit:
        out.append(f"... ({len(lines) - limit} more lines in the report)")
    return "\n".join(f"#   {ln}".rstrip() for ln in out)


_NOTES = {
    "INPUTS": "beside this script: torch.save of the module (its weights as meta tensors), the example inputs and "
              "the failing probe's",
    "WEIGHTS": "beside this script: the module's floating-point weights (None: not saved, see the header)",
    "STRICT": "torch.export.export(strict=...)",
    "RTOL": "the case's tolerances (None: torch.testing.assert_close's defaults)",
    "DEVICE": "where the harness exported and compared the case",
    "SEED": "every forward runs after torch.manual_seed(SEED), as the harness ran it",
    "PRESERVE": "preserve_module_call_signature",
    "CORE_ATEN": "the case asked for a Core ATen graph after run_decompositions()",
    "MODULES": "(module name, file): imported before torch.load, which unpickles the module by class reference",
    "SEARCH_PATH": "put on sys.path first: where the test run imported them from",
    "MODEL_MODULE": "the name pickle knows the classes below by",
    "AXES": "(input's path in (args, kwargs), its name, axis, declared [min, max]) export specialized or narrowed",
    "PROBE_SIZES": "the failing probe's sizes; its inputs are saved (built with PROBE_SEED): no generator needed",
}


def constants(values: dict[str, Any]) -> str:
    lines = []
    for name, value in values.items():
        text = "0x5EED" if name == "SEED" and value == 0x5EED else repr(value)
        note = _NOTES.get(name)
        lines.append(f"{name} = {text}" + (f"  # {note}" if note else ""))
    return "\n".join(lines) + "\n"


def assemble(*, header: str, future: bool, consts: dict[str, Any], model: str, inlined: bool, dims: str,
             check: str, check_text: str) -> str:
    """The whole script: header, imports, constants, the model's classes, the dynamic_shapes, the helpers, the check
    (``check_text``, ``checks.CHECKS[check]``) and ``main``."""
    parts = [header.rstrip() + "\n\n", "from __future__ import annotations\n\n" if future else "", _IMPORTS,
             constants(consts), model, _STAND_IN if inlined else _IMPORT_MODULES, "\n\n", dims, _COMMON]
    if check in ("probe", "retrace"):
        parts.append(_PROBE)
    if check in ("retrace", "axes"):
        parts.append(_AXES)
    if check == "python-state":
        parts.append(_STATE)
    parts += [check_text, _MAIN]
    return "".join(parts)


RESERVED = frozenset(
    "contextlib copy importlib io os sys traceback types torch pytree Dim HERE INPUTS WEIGHTS STAGE STRICT RTOL ATOL DEVICE "
    "SEED PRESERVE CORE_ATEN DYNAMIC_SHAPES SEARCH_PATH MODULES MODEL_MODULE INLINED AXES PROBE_SIZES PROBE_SEED "
    "import_model_classes first_line on_device load materialize call export tolerances differences disagreement probe_inputs "
    "at_probe probe_differences in_range out_of_range probe_check input_axes input_shapes plain python_state "
    "per_call_changes check main".split())
"""Names the script defines: an inlined class or a Dim's variable must not take one."""


__all__ = ["SCRIPTED", "RESERVED", "assemble", "comment", "constants"]
