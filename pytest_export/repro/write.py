"""``--export-repro DIR``: a standalone repro script for every failing case, to attach to a torch bug report; its
header names exactly the packages and the user's files it imports (``source.imported_by``).

For a case with a ``failed`` or ``xfailed`` stage (a known, baselined or ``xfail=`` failure included; ``error`` is
the harness's own and gets none), the first such stage the script can check (``script.SCRIPTED``) is the one
it checks. ``DIR/<nodeid, sanitized>.pt`` holds the module (pickled without its weights: ``source.meta_weights``;
beside it, ``.weights.pt`` where the check compares numbers), its example inputs and, for ``guards``,
``fuzz`` and ``retrace`` at other sizes, the failing probe's inputs as the harness built them (its sizes, its
seed); ``DIR/<name>.py`` holds the check. The module's classes are copied into the script where they are
self-contained (only torch, the standard library, literal constants and each other); else the script imports
the file that defines them. The report's case gets ``repro`` (the script's path); a case that passes removes
the script an earlier run wrote for it; a case that gets no script says why in a warning. Writing never changes
a case's verdict.
"""

from __future__ import annotations

import dataclasses
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

from ..declare.options import CaseOptions
from ..results import FAILED, XFAILED, CaseResult
from ..memory.cost import format_bytes
from ..util import describe_exception, plural
from .checks import CHECKS
from .script import SCRIPTED, assemble, comment
from .source import NotScriptable, imported_by, meta_weights, model_block, render_dynamic_shapes

MARK = "# pytest-export repro script"
MAX_SAVED_BYTES = 256 * 2**20  # a probe's inputs above this are saved as shapes and run with fake tensors
_OUT_OF_RANGE = ("max", "min", "relation", "static")


def script_name(nodeid: str) -> str:
    """``tests/test_models.py::test_mlp[a-1]`` -> ``repro_tests__test_models__test_mlp_a-1``: a name pytest's
    default ``python_files`` (``test_*.py``, ``*_test.py``) never collects, where DIR lies under the tests."""
    text = re.sub(r"::|[/\\]", "__", nodeid.replace(".py::", "::"))
    text = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "case"
    if len(text) > 120:
        import hashlib

        text = f"{text[:100]}_{hashlib.sha1(nodeid.encode()).hexdigest()[:10]}"
    return f"repro_{text}" + ("_" if text.endswith("_test") else "")


def write_repro(directory: str | None, case: Any, options: CaseOptions, result: CaseResult,
                ran: Any = None) -> CaseResult:
    """With a ``directory`` (``--export-repro``), write the case's script there, or, for a passing case, remove the
    one an earlier run wrote; ``result`` is returned as it was, a problem added as a warning (never raises).
    ``ran`` is the run's context: its exported program builds a failing probe's inputs (no second export)."""
    if directory:
        _write_or_remove(Path(directory), case, options, result, ran)
    return result


def _write_or_remove(folder: Path, case: Any, options: CaseOptions, result: CaseResult, ran: Any = None) -> None:
    name = script_name(result.nodeid)
    failing = [(n, s) for n, s in result.stages.items() if s.status in (FAILED, XFAILED)]
    try:
        why = []
        for stage_name, stage in failing:
            try:
                check, probe, extra = _plan(stage_name, stage.data, stage.message, case, options, result.nodeid, ran)
            except NotScriptable as exc:
                why.append(f"{stage_name}: {exc}")
                continue
            others = [n for n, _ in failing if n != stage_name]
            result.info["repro"] = str(_write(folder, name, case, options, result, stage_name, check, probe, extra,
                                              others))
            return
        _remove_stale(folder, name)
        if why:
            result.warnings.append("--export-repro: no repro script: " + "; ".join(why))
    except NotScriptable as exc:
        result.warnings.append(f"--export-repro: no repro script: {exc}")
    except Exception as exc:  # noqa: BLE001 - the repro is extra: it never changes the case's verdict
        result.warnings.append(f"--export-repro: could not write a repro script: {describe_exception(exc, 400)}")


def _remove_stale(folder: Path, name: str) -> None:
    script = folder / f"{name}.py"
    if script.is_file() and MARK in script.read_text(errors="replace")[:300]:
        script.unlink()
        (folder / f"{name}.pt").unlink(missing_ok=True)
        (folder / f"{name}.weights.pt").unlink(missing_ok=True)


# ---- what the script checks ----------------------------------------------------------------------------------


def _plan(stage: str, data: dict[str, Any], message: str, case: Any, options: CaseOptions,
          nodeid: str, ran: Any = None) -> tuple[str, dict[str, Any] | None, dict[str, Any]]:
    """(the key of ``checks.CHECKS``, the probe to save or None, extra constants) for one failed stage."""
    if stage not in SCRIPTED:
        raise NotScriptable(f"the {stage} stage is not scripted")
    if stage == "export" and (data.get("exception") == "UsageError" or data.get("signature") == "state-changed"):
        raise NotScriptable("the harness's own finding (the declaration or the module's state), not torch's")
    if stage == "compare" and data.get("signature") == "python-state":
        return "python-state", None, {}  # forward's per-call changes to its Python state, checked as such (#32)
    if stage == "decomp":
        return stage, None, {"CORE_ATEN": bool(options.core_aten)}
    if stage not in ("guards", "fuzz", "retrace"):
        return stage, None, {}
    sizes = re.search(r"(?:in-range sizes|at sizes) ([^:\n]+)", message) if stage == "retrace" else None
    if stage == "retrace" and not sizes:
        return stage, None, {}
    ctx, au = _context(case, options, nodeid, ran)
    from ..probes.choose import PROBE_SEED, Probe, sized

    if stage == "retrace":
        values = _values(au.model, _named(sizes.group(1)))
        probe = Probe(sizes.group(1), values, {}, "in-range")
        return stage, _saved(sized(ctx, au.model, values, probe, record=False), probe.description, True, None,
                             PROBE_SEED), {}
    if stage == "fuzz":
        found = data.get("counterexample") or {}
        if not found.get("sizes"):
            raise NotScriptable("fuzz recorded no failing sizes")
        values = _values(au.model, found["sizes"])
        text = ", ".join(f"{k}={v}" for k, v in found["sizes"].items())
        seed = found.get("seed") or PROBE_SEED
        return "probe", _saved(sized(ctx, au.model, values, seed=seed), text, True, found.get("mode"), seed), {}
    probe = _guards_probe(ctx, au, data)
    if probe is not None:
        return "probe", probe, {}
    axes = [(ctx.declaration.keys[flat], ctx.declaration.paths[flat], dim, tuple(row["declared_range"]))
            for row, (flat, dim) in zip(au.rows, au.row_axes)
            if row["status"] in ("narrowed", "specialized") and dim is not None and row.get("declared_range")]
    if axes:
        return "axes", None, {"AXES": axes}
    raise NotScriptable("no failing probe or declared axis to check")


def _context(case: Any, options: CaseOptions, nodeid: str, ran: Any = None) -> tuple[Any, Any]:
    """A context on cpu with its program and audit: the harness's own machinery builds the probe's inputs. The
    run's own where it ran on cpu; a case checked on another device is exported once more, on cpu."""
    if ran is not None and ran.ep is not None and options.device == "cpu":
        au = ran.audit()
        if au is not None and not au.errors:
            return ran, au
    import torch

    from ..context import Context
    from ..torchside.observe import clone_inputs, preserved_python_state
    from ..torchside.torchlog import quiet_trace_logs

    opts = dataclasses.replace(options, device="cpu")
    ctx = Context(case, opts, nodeid, Path(tempfile.gettempdir()))
    ctx.read_declaration()
    if ctx.declaration is None:
        raise NotScriptable(ctx.audit_problem or "the declaration could not be read")
    args, kwargs = clone_inputs((case.args, case.kwargs))
    extra = {"preserve_module_call_signature": tuple(opts.preserve_module_call_signature)} \
        if opts.preserve_module_call_signature else {}
    try:
        with quiet_trace_logs(), preserved_python_state(case.module):
            ctx.ep = torch.export.export(case.module, args, kwargs, dynamic_shapes=ctx.export_dynamic_shapes(),
                                         strict=opts.strict, **extra)
    except Exception as exc:  # noqa: BLE001
        raise NotScriptable(f"exporting again on cpu to rebuild the probe's inputs raised {describe_exception(exc, 200)}")
    au = ctx.audit()
    if au is None or au.errors:
        raise NotScriptable(ctx.audit_problem or "; ".join(au.errors if au else []) or "no dynamic-shapes model")
    return ctx, au


def _named(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"([^\s,=()]+)=(-?\d+)", text)}


def _values(model: Any, named: dict[str, int]) -> dict[str, int]:
    """Symbol values from sizes by name (the others at the example's)."""
    values = model.example_values()
    for v in model.vars:
        given = [named[n] for n in v.names if n in named]
        if given:
            values[v.symbol] = given[0]
    return values


def _guards_probe(ctx: Any, au: Any, data: dict[str, Any]) -> dict[str, Any] | None:
    """The first probe guards failed on (in range: refused or wrong; out of range: accepted and wrong)."""
    from ..probes.choose import PROBE_SEED, Probe, out_of_range_probes, sized

    additional = 0
    for rec in data.get("probe_list") or []:
        kind = rec.get("kind")
        additional += kind == "additional"
        if "finding" not in rec or not (kind in ("in-range", "additional") or (
                kind in _OUT_OF_RANGE and rec.get("program") == "accepted")):
            continue
        if kind == "in-range":
            probe = Probe(rec["probe"], _values(au.model, _named(rec["probe"])), {}, kind)
        elif kind == "additional":
            a, k = ctx.declaration.additional[additional - 1]
            probe = Probe(rec["probe"], {}, {}, kind, (tuple(a), dict(k)))
        else:
            probe = next((p for p in out_of_range_probes(ctx, au.model) if p.description == rec["probe"]), None)
            if probe is None:
                continue
        return _saved(sized(ctx, au.model, probe.values, probe), rec["probe"], probe.in_range, rec.get("mode"),
                      PROBE_SEED)
    return None


def _saved(sized: Any, sizes: str, in_range: bool, mode: str | None, seed: int) -> dict[str, Any]:
    """A probe for the ``.pt`` file: its real inputs, or (run fake by the harness, or too large to save) meta tensors
    of their shapes, which the script runs as fake tensors."""
    import torch
    import torch.utils._pytree as pytree

    from ..memory.cost import input_bytes

    out = {"sizes": sizes, "in_range": in_range, "seed": seed, "fake": True}
    if mode != "fake":
        try:
            small = input_bytes(sized.fake()) <= MAX_SAVED_BYTES
        except Exception:  # noqa: BLE001 - fake tensors cannot build them: the harness ran them for real
            small = True
        if small:
            args, kwargs = sized.real()
            return {**out, "fake": False, "args": tuple(args), "kwargs": dict(kwargs)}
    args, kwargs = pytree.tree_map_only(
        torch.Tensor, lambda t: torch.empty(tuple(int(d) for d in t.shape), dtype=t.dtype, device="meta"),
        sized.fake())
    return {**out, "args": tuple(args), "kwargs": dict(kwargs)}


# ---- writing -------------------------------------------------------------------------------------------------


def _write(folder: Path, name: str, case: Any, options: CaseOptions, result: CaseResult, stage: str, check: str,
           probe: dict[str, Any] | None, extra: dict[str, Any], others: list[str]) -> Path:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    weights_path = folder / f"{name}.weights.pt"
    weights_path.unlink(missing_ok=True)  # an earlier run's, for another failure
    numeric = _needs_values(check, result.stages[stage].data)
    try:
        with meta_weights(case.module) as tensors:
            kept = {n: t for n, t in tensors.items() if not (t.is_floating_point() or t.is_complex())}
            floating = {n: t for n, t in tensors.items() if n not in kept}
            saved = floating if numeric else {}
            torch.save({"module": case.module, "args": tuple(case.args), "kwargs": dict(case.kwargs), "probe": probe,
                        "kept": kept}, folder / f"{name}.pt")
        if saved:
            torch.save(saved, weights_path)  # plain tensors: the script loads them with weights_only=True
    except Exception as exc:  # noqa: BLE001 - a class defined inside a function, a lambda attribute
        (folder / f"{name}.pt").unlink(missing_ok=True)
        weights_path.unlink(missing_ok=True)
        raise NotScriptable(f"torch.save cannot save the module or its inputs: {describe_exception(exc, 300)}")
    model, consts, inlined, future, taken, model_note = model_block(case.module)
    packages, files, search = imported_by(case.module, consts)
    dims, dims_note = render_dynamic_shapes(_declared(options.dynamic_shapes, case), taken)
    s = result.stages[stage]
    notes = [n for n in (model_note, dims_note) if n]
    header = "\n".join([
        "#!/usr/bin/env python3",
        f"{MARK}: standalone, needs {', '.join(packages)}" + (f" and {plural(len(files), 'file')} of yours"
                                                               if files else " only") + ";",
        f"# attach it and {name}.pt{f' and {weights_path.name}' if saved else ''} to a torch bug report.",
        "#",
        f"# case:    {result.nodeid}",
        f"# stage:   {stage} ({s.status})" + (f"; also failing: {', '.join(others)}" if others else ""),
        *([f"# probe:   {probe['sizes']} ({'in' if probe['in_range'] else 'out of'} range; inputs built by the harness "
           f"with seed {probe['seed']}{', run with fake tensors' if probe['fake'] else ''})"] if probe else []),
        f"# torch:   {torch.__version__} when written (python {platform.python_version()})",
        f"# written: by pytest-export {_version()} (pytest --export-check --export-repro)",
        f"# needs:   {', '.join(packages)} (as installed when written; the script imports nothing else"
        + (", but the files below import what they import)" if files else ")"),
        *(f"# imports: {f}" for f in files),
        *(f"# imports: {p} (put on sys.path)" for p in search),
        f"# inputs:  {name}.pt beside this script: the module (pickled, its weights left out), its example inputs"
        + (" and the probe's" if probe else ""),
        (f"# weights: {weights_path.name} beside it ({format_bytes(weights_path.stat().st_size)}, loaded with "
         "weights_only=True): the check compares numbers" if saved else
         "# weights: not saved: this check's failure does not depend on their values; the script fills them with "
         "seeded random values (integer buffers are saved)" if floating else
         "# weights: none (the module has no floating-point parameters or buffers)"),
        *(f"# note:    {n}" for n in notes),
        "#",
        "# what the harness reported:",
        comment(s.message),
        "#",
        f"# run:     python {name}.py   (from any directory)",
        "#          prints REPRODUCED: ... and exits 1 where the failure reproduces, NOT REPRODUCED: ... and 0 where not",
    ])
    consts = {"INPUTS": f"{name}.pt", "WEIGHTS": weights_path.name if saved else None, "STAGE": stage, "STRICT": bool(options.strict), "RTOL": options.rtol,
              "ATOL": options.atol, "DEVICE": options.device, "SEED": 0x5EED,
              "PRESERVE": tuple(options.preserve_module_call_signature), **extra, **consts}
    if probe:
        consts["PROBE_SIZES"], consts["PROBE_SEED"] = probe["sizes"], probe["seed"]
    text = assemble(header=header, future=future, consts=consts, model=model, inlined=inlined, dims=dims,
                    check=check, check_text=CHECKS[check])
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


def _needs_values(check: str, data: dict[str, Any]) -> bool:
    """Whether a check's failure can depend on the weights' values: not where only export runs (``export``,
    ``axes``), nor where ``torch.export.save``/``load`` or ``run_decompositions()`` raised or left non-core ops."""
    return not (check in ("export", "axes") or (check == "serde" and data.get("signature") in ("save", "load"))
                or (check == "decomp" and data.get("signature") in ("decompose", "non-core")))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-export")
    except Exception:  # noqa: BLE001 - a checkout that is not installed
        return "(unknown version)"


def _declared(dynamic_shapes: Any, case: Any) -> Any:
    """ShapesCollection and AdditionalInputs as the plain form torch resolves them to."""
    if dynamic_shapes is None or isinstance(dynamic_shapes, (dict, list, tuple)):
        return dynamic_shapes
    from ..declare.shapes import resolve

    return resolve(dynamic_shapes, case.module, case.args, case.kwargs)[0]


__all__ = ["write_repro", "script_name", "MARK"]
