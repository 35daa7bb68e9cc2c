"""The checks a repro script (``--export-repro``) runs, one per failed stage it can check, as script text: each
defines ``check()``, which returns ``(reproduced, what)``. ``script`` holds the helpers they call
(``load``, ``export``, ``disagreement``, the probe's ``in_range`` / ``out_of_range``); no imports here.
"""

from __future__ import annotations

CHECKS: dict[str, str] = {
    "eager": '''

def check():
    """Eager forward on the example inputs: it raised, or two runs (same inputs, same seed) disagree."""
    model, args, kwargs, data = load()
    try:
        first = call(copy.deepcopy(model), args, kwargs)
    except Exception as exc:
        traceback.print_exc()
        return True, f"eager forward raised on the example inputs: {first_line(exc)}"
    lines = differences(call(copy.deepcopy(model), args, kwargs)[0], first[0])
    if lines:
        return True, "eager forward is nondeterministic: two runs (same inputs, same seed) disagree:\\n  " + "\\n  ".join(lines)
    return False, "eager forward runs and gives the same result twice"
''',
    "export": '''

def check():
    """torch.export.export on the example inputs."""
    model, args, kwargs, data = load()
    try:
        export(model, args, kwargs)
    except Exception as exc:
        traceback.print_exc()
        return True, f"torch.export.export raised {first_line(exc)}"
    return False, "torch.export.export succeeded"
''',
    "compare": '''

def check():
    """The exported program against eager on the example inputs."""
    model, args, kwargs, data = load()
    problem = disagreement(export(model, args, kwargs).module(), model, args, kwargs, "exported program")
    return (True, problem) if problem else (False, "the exported program agrees with eager (two calls)")
''',
    "serde": '''

def check():
    """torch.export.save, then torch.export.load: the loaded program against eager."""
    model, args, kwargs, data = load()
    ep = export(model, args, kwargs)
    buffer = io.BytesIO()
    try:
        torch.export.save(ep, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer)
    except Exception as exc:
        traceback.print_exc()
        return True, f"torch.export.save/load raised {first_line(exc)}"
    problem = disagreement(loaded.module(), model, args, kwargs, "reloaded program")
    return (True, problem) if problem else (False, "the reloaded program agrees with eager (two calls)")
''',
    "decomp": '''

def check():
    """ep.run_decompositions(): the decomposed program against eager (and, with CORE_ATEN, only Core ATen ops)."""
    model, args, kwargs, data = load()
    ep = export(model, args, kwargs)
    try:
        decomposed = ep.run_decompositions()
    except Exception as exc:
        traceback.print_exc()
        return True, f"run_decompositions() raised {first_line(exc)}"
    problem = disagreement(decomposed.module(), model, args, kwargs, "decomposed program")
    if problem:
        return True, problem
    left = sorted({str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"
                   and isinstance(n.target, torch._ops.OpOverload) and torch.Tag.core not in n.target.tags
                   and not str(n.target).startswith(("aten.sym_", "aten._assert"))})
    if CORE_ATEN and left:
        return True, f"ops outside Core ATen survive run_decompositions(): {', '.join(left)}"
    return False, "the decomposed program agrees with eager"
''',
    "retrace": '''

def check():
    """ep.module() exported again with the same inputs and dynamic_shapes: it must export, keep the inputs'
    axes and agree with eager (and, at the probe's sizes, with the first program)."""
    model, args, kwargs, data = load()
    ep = export(model, args, kwargs)
    try:
        again = torch.export.export(ep.module(), *pytree.tree_map_only(torch.Tensor, torch.clone, (args, kwargs)),
                                    dynamic_shapes=DYNAMIC_SHAPES, strict=STRICT)
    except Exception as exc:
        traceback.print_exc()
        return True, f"exporting ep.module() again raised {first_line(exc)}"
    if input_axes(again) != input_axes(ep):
        return True, f"the re-exported program's inputs {input_axes(again)} differ from the first's {input_axes(ep)}"
    problem = disagreement(again.module(), model, args, kwargs, "re-exported program")
    if problem:
        return True, problem
    if data.get("probe"):
        return in_range(again.module(), ep.module(), data, "re-exported program (against the first program)")
    return False, "the re-exported program keeps the inputs' axes and agrees with eager"
''',
    "unflatten": '''

def check():
    """torch.export.unflatten(ep) against eager; then each preserved submodule swapped for its eager original."""
    model, args, kwargs, data = load()
    ep = export(model, args, kwargs)
    try:
        unflat = torch.export.unflatten(ep)
    except Exception as exc:
        traceback.print_exc()
        return True, f"torch.export.unflatten raised {first_line(exc)}"
    problem = disagreement(unflat, model, args, kwargs, "unflattened module")
    if problem:
        return True, problem
    eager = copy.deepcopy(model)
    for fqn in PRESERVE:
        exported = unflat.get_submodule(fqn)
        unflat.set_submodule(fqn, eager.get_submodule(fqn))
        problem = disagreement(unflat, model, args, kwargs, f"unflattened module with the eager `{fqn}` swapped in")
        unflat.set_submodule(fqn, exported)
        if problem:
            return True, problem
    return False, "the unflattened module agrees with eager, with and without the eager submodules swapped in"
''',
    "python-state": '''

def check():
    """Forward's changes to the module's plain Python attributes, which the exported program freezes at their traced
    values: a change that consecutive calls repeat is per call (one the next call does not repeat is a lazy
    initialization, no finding). Then the program against eager over two calls, where the outputs show it."""
    model, args, kwargs, data = load()
    changes = per_call_changes(model, args, kwargs)
    if not changes:
        return False, "forward changes no plain Python attribute on every call (three calls)"
    problem = disagreement(export(model, args, kwargs).module(), model, args, kwargs, "exported program")
    text = (f"forward changes Python attribute {'; '.join(changes)} on every call; the exported program freezes it "
            "at its traced value")
    return True, text + (f"\\n{problem}" if problem else " (its outputs agree with eager's on the first two calls)")
''',
    "probe": '''

def check():
    """The exported program on the failing probe's inputs (saved at the harness's sizes and seed) against eager."""
    model, args, kwargs, data = load()
    return probe_check(export(model, args, kwargs), model, data)
''',
    "axes": '''

def check():
    """The declared dynamic axes (AXES) in the exported program: export kept each, or specialized or narrowed it."""
    model, args, kwargs, data = load()
    ep = export(model, args, kwargs)
    shapes, problems = input_shapes(ep), []
    for path, label, axis, (lo, hi) in AXES:
        size = shapes[path][axis]
        expr = size if isinstance(size, int) else size.node.expr
        if isinstance(expr, int) or expr.is_number:
            problems.append(f"{label}.shape[{axis}]: declared dynamic in [{lo}, {hi}], export specialized it to {expr}")
            continue
        vr = ep.range_constraints[expr]
        upper = None if str(vr.upper) in ("oo", "int_oo") else int(vr.upper)
        if int(vr.lower) > lo or (hi is not None and upper is not None and upper < hi):
            problems.append(f"{label}.shape[{axis}]: declared [{lo}, {hi}], export kept [{int(vr.lower)}, {upper}]")
    if problems:
        return True, "; ".join(problems)
    return False, "export kept every declared dynamic axis and its range"
''',
}


__all__ = ["CHECKS"]
