"""Diagnosis of a failed export: a constraint violation whose message carries torch's fix gets the corrected
``dynamic_shapes`` from ``refine_dynamic_shapes_from_suggested_fixes``, checked and printed as Python to paste back,
without ``draft_export`` (#31); any other failure is rerun with ``torch.export.draft_export``.

Called by the ``export`` stage only after export raised (the runner has imported torch already). The diagnosis
runs under its own time limit (``limit_for``): what it found before a limit cut it is kept, and it says so.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from typing import Any

import torch

from ..proof.guardsource import accepted_sizes
from ..proof.prove import prove_program
from ..torchside.timeout import CaseTimeout, Expired, time_limit
from .cause import cause_text, specialization, user_frame
from .promise import constant_problem, constants, declared_box, dim_call, finite, refused_sizes
from ..util import environment

# The diagnosis' own time limit (issue #23): on timm's tf_efficientnet_b0 with dynamic height and width, export
# raised after about 70 s and draft_export then ran for more than 12 minutes. draft_export traces the model
# again (twice for a constraint violation), so twice export's own time is room enough; the floor covers exports
# that fail in well under a second and a first trace that pays for importing torch._dynamo.
LIMIT_FLOOR_S = 30.0
LIMIT_FACTOR = 2.0


def limit_for(export_s: float) -> float:
    """Seconds (CPU time, as every limit counts: ``timeout``) the diagnosis of an export that failed after
    ``export_s`` CPU seconds may run: ``max(30, 2 x export_s)``.
    Inside the case's ``--export-timeout`` the case's limit stays in charge when it ends first."""
    return max(LIMIT_FLOOR_S, LIMIT_FACTOR * export_s)


@contextlib.contextmanager
def _quiet(name: str):
    """draft_export logs a banner of its findings at WARNING; the diagnosis carries them instead."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _trace_env(workdir: Any):
    """draft_export writes its structured trace under the system temp dir unless told where: keep it in the
    case's own temp dir."""
    # private: torch names the variable only in its internal logging module
    return environment(**{torch._logging._internal.DTRACE_ENV_VAR: str(workdir)} if workdir is not None else {})


def draft_findings(module: Any, args: tuple, kwargs: dict, dynamic_shapes: Any, strict: bool,
                   workdir: Any = None) -> dict[str, Any]:
    """``{"failure_types": [...], "guards": [...], "failures": [{type, expr, where}]}`` from draft_export."""
    with _quiet("torch.export._draft_export"), _quiet("torch.export"), _trace_env(workdir):
        ep = torch.export.draft_export(module, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    report = getattr(ep, "_report", None)
    failures = []
    filenames = getattr(report, "str_to_filename", None) or {}
    for f in getattr(report, "failures", []) or []:
        data = getattr(f, "data", {}) or {}
        expr = str(data["expr"]) if data.get("expr") is not None else ""
        sources = data.get("symbol_to_sources") or {}
        named = [f"{s} = {src}" for s, src in sorted(sources.items()) if re.search(rf"\b{re.escape(s)}\b", expr)] \
            if isinstance(sources, dict) else []
        if named:
            expr += " where " + ", ".join(named)
        user = user_frame(data.get("user_stack"), filenames)
        stack = [x for x in data.get("stack") or [] if isinstance(x, dict)]  # torch's frames, innermost first
        failures.append({"type": f.failure_type.name, "expr": expr, "where": user.get("loc", ""),
                         "file": user.get("file", ""), "line": user.get("line"),
                         "op": str(stack[0].get("name") or "") if stack else ""})
    return {
        "failure_types": sorted({f["type"] for f in failures}),
        "guards": [f["expr"] for f in failures if f["type"] == "GUARD_ADDED" and f["expr"]],
        "failures": failures,
    }


def suggested_fixes_message(exc: BaseException) -> str | None:
    """A constraint violation's ``exc.msg`` with torch's "Suggested fixes", cut before torch's trailing paragraph."""
    msg = getattr(exc, "msg", None) or str(exc)
    msg = re.split(r"\n\s*The error above occurred when calling torch\.export", msg, maxsplit=1)[0].rstrip()
    return msg if "Suggested fixes:" in msg else None


def refined_dynamic_shapes(exc: BaseException, dynamic_shapes: Any) -> Any | None:
    """The corrected spec for a constraint violation, by torch's own refiner (derived fixes such as ``4*_h``)."""
    msg = suggested_fixes_message(exc)
    if dynamic_shapes is None or msg is None:
        return None
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    return refine_dynamic_shapes_from_suggested_fixes(msg, dynamic_shapes)


def keep_bounds(fixed: Any, declared: Any) -> tuple[Any, list[str]]:
    """torch's corrected spec with every bound the user wrote kept where torch's suggestion dropped it (issue #54:
    ``Dim('seq', max=2048)`` for a declared ``Dim('seq', min=2, max=4096)`` silently widened the promise to 0):
    each named ``Dim`` of the fix keeps the larger min and the smaller max of the two. The check that follows holds
    the result to the program. Returns the spec and a line per bound kept (``seq: min=2``)."""
    from torch.export.dynamic_shapes import Dim, _DerivedDim, _DimHint

    def named(v: Any) -> bool:
        return (not isinstance(v, (_DerivedDim, _DimHint)) and hasattr(v, "__name__") and hasattr(v, "min")
                and hasattr(v, "max"))

    wrote: dict[str, Any] = {}

    def collect(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                collect(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                collect(x)
        elif named(v):
            wrote.setdefault(v.__name__, v)

    collect(declared)
    made: dict[int, Any] = {}
    notes: list[str] = []

    def rebuilt(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: rebuilt(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(rebuilt(x) for x in v)
        if not named(v) or v.__name__ not in wrote:
            return v
        if id(v) not in made:
            old = wrote[v.__name__]
            lo, hi = max(v.min, old.min), min(v.max, old.max)
            made[id(v)] = v if (lo, hi) == (v.min, v.max) or lo > hi else Dim(v.__name__, min=lo, max=hi)
            if made[id(v)] is not v:
                notes.append(f"{v.__name__}: " + ", ".join(
                    [f"min={lo}"] * (lo != v.min) + [f"max={hi}"] * (hi != v.max)))
        return made[id(v)]

    return (rebuilt(fixed), notes) if fixed is not None and declared is not None else (fixed, [])


MAX_REFINE = 3  # rounds of pasting torch's suggestion back and refining it again
FIX_FROM_MESSAGE = "torch's error carries the fix: built and checked without draft_export"


def checked_fix(fixed: Any, module: Any, args: tuple, kwargs: dict, strict: bool,
                declared: Any = None, cause: str | None = None) -> dict[str, Any]:
    """torch's corrected spec used as a user would (issue #24: torch's own suggestion for torchvision's ``r3d_18``
    fails when pasted back): exported again, refined again while export answers with new suggested fixes (at most
    ``MAX_REFINE`` rounds), and the program it gives probed at the bounds of every range it keeps. Only a spec
    that passes all that is ``dynamic_shapes_fix``; otherwise ``dynamic_shapes_fix_problem`` says why, beside
    torch's own suggestion (``dynamic_shapes_fix_torch``)."""
    from ..torchside.modstate import python_state, restore_python_state

    torch_text = to_python(fixed)
    constant = constant_problem(declared, fixed, cause)
    if constant:  # never offered ready: the promise would become a constant with a green pass (issue #41)
        return {"dynamic_shapes_fix_torch": torch_text, "dynamic_shapes_fix_problem": constant}
    spec, rounds = fixed, 0
    while True:
        before = python_state(module)
        try:
            a, k = _copies(args, kwargs)
            ep = torch.export.export(module, a, k, dynamic_shapes=spec, strict=strict)
            break
        except Exception as err:  # noqa: BLE001 - a suggestion that does not export is not offered
            again = refined_dynamic_shapes(err, spec) if rounds < MAX_REFINE else None
            if again is None:
                first = describe(err).rstrip(".")
                return {"dynamic_shapes_fix_torch": torch_text, "dynamic_shapes_fix_problem":
                        f"torch's suggested fix fails when pasted back: export raises {first}"}
            spec, rounds = again, rounds + 1
        finally:
            restore_python_state(module, before)  # tracing runs forward: the attributes it set are put back
    text = torch_text if rounds == 0 else to_python(spec)
    box, hints, names = declared_box(spec, ep)
    proof = prove_program(ep, box, names)  # the program's guards over every size the fix declares (issue #41)
    if proof is not None and proof.refusals():
        d = proof.refusals()[0]
        return {"dynamic_shapes_fix_torch": text, "dynamic_shapes_fix_problem":
                "pasted back, torch's suggested fix exports, but its program refuses sizes inside its own ranges: "
                + proof.refused_text(d) + "".join(f"; {h}" for h in hints)}
    refused = refused_sizes(ep, args, kwargs, module)
    if refused:
        return {"dynamic_shapes_fix_torch": text, "dynamic_shapes_fix_problem":
                "pasted back, torch's suggested fix exports, but its program refuses sizes inside its own ranges: "
                + ", ".join(refused[:6]) + " (no single Dim expresses what the program accepts there)"}
    if proof is None or not proof.proved:
        why = "torch kept no record of its guards" if proof is None else proof.line()
        return {"dynamic_shapes_fix_torch": text, "dynamic_shapes_fix_problem":
                f"pasted back, torch's suggested fix exports, but its guards could not be proved over its ranges ({why})"}
    out: dict[str, Any] = {"dynamic_shapes_fix": text, "dynamic_shapes_fix_checked": True,
                           "dynamic_shapes_fix_proof": proof.line()}
    if rounds:
        out["dynamic_shapes_fix_torch"] = torch_text
        out["dynamic_shapes_fix_note"] = (f"torch's own suggestion failed when pasted back; refined {rounds} more "
                                          f"time{'s' if rounds > 1 else ''} until it exported")
    return out


def describe(err: BaseException) -> str:
    from ..util import describe_exception

    return describe_exception(err, 300).splitlines()[0]


def _copies(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    import torch.utils._pytree as pytree

    return pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), (tuple(args), dict(kwargs)))


def to_python(spec: Any) -> str:
    """Python source that rebuilds ``spec``: ``name = Dim(...)`` lines, then ``dynamic_shapes = ...``.

    Run it with ``from torch.export import Dim`` in scope (the first line imports it).
    """
    from torch.export.dynamic_shapes import Dim, _DerivedDim, _DimHint

    roots: dict[str, str] = {}

    def root(d: Any) -> str:
        name = d.__name__
        if name.isidentifier():
            roots.setdefault(name, f"{name} = {dim_call(name, d.min, d.max)}")
            return name
        return dim_call(name, d.min, d.max)

    def render(v: Any) -> str:
        if isinstance(v, _DerivedDim):
            root(v.root)
            return str(v.__name__)
        if isinstance(v, _DimHint):
            base = f"Dim.{v.type.name}"
            bounds = [f"{k}={finite(b)}" for k, b in (("min", v.min), ("max", v.max)) if finite(b) is not None]
            return f"{base}({', '.join(bounds)})" if bounds else base
        if isinstance(v, Dim) or type(v).__name__ == "Dim" or (hasattr(v, "__name__") and hasattr(v, "min") and hasattr(v, "max")):
            return root(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{render(k)}: {render(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(render(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + ", ".join(render(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if v is None or isinstance(v, (int, str, bool)):
            return repr(v)
        raise TypeError(f"cannot print {type(v).__name__} in a dynamic_shapes spec")

    body = render(spec)
    return "\n".join(["from torch.export import Dim", *roots.values(), f"dynamic_shapes = {body}"])


def diagnose(exc: BaseException, module: Any, args: tuple, kwargs: dict, dynamic_shapes: Any, strict: bool,
             workdir: Any = None, limit: float | None = None) -> dict[str, Any]:
    """Everything known about a failed export, as JSON-able data; never raises.

    A fix torch's refiner builds from its message is checked (``checked_fix``) and draft_export does not run
    (``draft_export_skipped``); any other failure, or a fix it cannot build, gets ``draft_findings``.
    Runs for at most ``limit`` seconds (``limit_for``; None: no limit of its own). When a limit cuts it, its own
    or the case's (``CaseTimeout``, which this catches: the export's verdict is reached, the caller keeps it), what
    was found before is kept and ``cut`` is True, with ``cut_by`` (``"limit"`` or ``"case timeout"``) and
    ``cut_after_s``."""
    from ..util import describe_exception

    out: dict[str, Any] = {}
    if limit:
        out["limit_s"] = round(limit, 3)
    t0 = time.monotonic()
    torch_text = ""
    try:
        with time_limit(limit, error=Expired):
            try:
                fixed = refined_dynamic_shapes(exc, dynamic_shapes)
                torch_text = to_python(fixed) if fixed is not None else ""
                fixed, kept = keep_bounds(fixed, dynamic_shapes)
                if kept:
                    out["fix_kept_bounds"] = kept
            except Exception as err:  # noqa: BLE001 - the refiner cannot build every fix: draft_export then
                fixed = None
                out["dynamic_shapes_fix_error"] = describe_exception(err, 500)
            if fixed is not None:
                out["draft_export_skipped"] = FIX_FROM_MESSAGE
                cause = None
                pinned = constants(dynamic_shapes, fixed)
                if pinned and pinned[0][2] not in (0, 1):  # no size-1 example explains it: find the line (#54)
                    out.pop("draft_export_skipped")
                    out.update(draft_findings(module, args, kwargs, dynamic_shapes, strict, workdir))
                    found = specialization(out["failures"], module, pinned[0][2])
                    if found:
                        out["specialized_at"] = found["line"]
                        out.update({"specialized_by": found["module"]} if found.get("module") else {})
                        cause = cause_text(found, pinned[0][2])
                try:
                    out.update(checked_fix(fixed, module, args, kwargs, strict, dynamic_shapes, cause))
                except Exception as err:  # noqa: BLE001 - a check that crashes confirms nothing
                    out.update(dynamic_shapes_fix_torch=torch_text,
                               dynamic_shapes_fix_problem=f"checking it raised {describe(err).rstrip('.')}")
                return out
            try:
                out.update(draft_findings(module, args, kwargs, dynamic_shapes, strict, workdir))
            except Exception as err:  # noqa: BLE001 - draft_export itself may raise; the original failure stands
                out["draft_export_error"] = describe_exception(err, 500)
            out.update(_from_guards(exc, module, args, kwargs, dynamic_shapes, strict))
    except (Expired, CaseTimeout) as cut:
        out.update(cut=True, cut_by="limit" if isinstance(cut, Expired) else "case timeout",
                   cut_after_s=round(time.monotonic() - t0, 3))
        if out.get("draft_export_skipped") and not {"dynamic_shapes_fix", "dynamic_shapes_fix_problem"} & out.keys():
            out.update(dynamic_shapes_fix_torch=torch_text,
                       dynamic_shapes_fix_problem="its check (exporting again with it) was cut by the time limit")
    return out


def _from_guards(exc: BaseException, module: Any, args: tuple, kwargs: dict, dynamic_shapes: Any,
                 strict: bool) -> dict[str, Any]:
    """Where torch suggested no fix for a constraint violation: the declared ranges narrowed to the sizes the
    generated guards accept (each violated dim alone, decided over every size), checked as torch's own would be,
    and said as a narrowing, with why the refused sizes are refused (#54: MobileNetV3's H, W >= 33)."""
    from torch.export import Dim

    ranges = accepted_sizes(exc)
    if not ranges or any(r["accepted"] is None for r in ranges.values()):
        return {}
    narrower = [Dim(n, min=r["accepted"][0], max=r["accepted"][1]) for n, r in ranges.items()]
    spec, kept = keep_bounds(dynamic_shapes, narrower)
    if not kept:
        return {}
    out = checked_fix(spec, module, args, kwargs, strict, dynamic_shapes)
    why = [f"{n} = {r['refused'][0]} is refused by `{r['refused'][1]}`" + "".join(
        f" (at {n} = {r['refused'][0]}, {m.group(1)} is 1: export traced that size above 1 and specializes a size of "
        f"1 apart, as a feature map of 1x1)" for m in [re.fullmatch(r"Ne\((.+), 1\)", r["refused"][1])] if m)
        for n, r in ranges.items() if r["refused"]]
    out["dynamic_shapes_fix_from"] = "derived from the guards torch generated; torch suggested no fix"
    out["dynamic_shapes_fix_note"] = ("it narrows the declared ranges to what the program accepts: "
                                      + "; ".join(kept) + (": " + "; ".join(why) if why else ""))
    return out


def cut_text(d: dict[str, Any]) -> str:
    """The line that says a limit cut the diagnosis, and which."""
    if not d.get("cut"):
        return ""
    after = d.get("cut_after_s")
    head = f"diagnosis cut after {after:.1f} s" if isinstance(after, (int, float)) else "diagnosis cut"
    if d.get("cut_by") == "case timeout":
        why = "the case's time limit (--export-timeout / timeout=) ran out"
    else:
        limit = d.get("limit_s")
        why = (f"its own limit of {limit:.1f} s" if isinstance(limit, (int, float)) else "its own limit") + (
            f" (twice export's time, at least {LIMIT_FLOOR_S:g} s)")
    what = "checking torch's suggested fix" if d.get("draft_export_skipped") else "draft_export"
    return f"{head} ({what} did not finish): {why}; --export-no-diagnose skips it"


def diagnosis_text(d: dict[str, Any]) -> str:
    """draft_export's findings, or the fix from torch's message alone: to paste if checked, else why and torch's."""
    lines = [f"diagnosis ({d.get('draft_export_skipped') or 'torch.export.draft_export'}):"]
    if d.get("cut"):
        lines.append("  " + cut_text(d))
    if d.get("failure_types"):
        lines.append("  failure types: " + ", ".join(d["failure_types"]))
    if d.get("specialized_at"):  # found, not guessed (#54)
        by = f" inside {d['specialized_by']}" if d.get("specialized_by") else ""
        lines.append(f"  specialized{by} at {d['specialized_at']}")
    for f in d.get("failures", [])[:10]:
        lines.append(f"  - {f['type']}: {f['expr'] or '(no expression)'}" + (f"  at: {f['where']}" if f["where"] else ""))
    if d.get("draft_export_error"):
        lines.append(f"  draft_export raised: {d['draft_export_error'].splitlines()[0]}")
    if d.get("dynamic_shapes_fix"):
        how = d.get("dynamic_shapes_fix_from") or "refine_dynamic_shapes_from_suggested_fixes"
        lines.append(f"corrected dynamic_shapes ({how}); paste back:")
        lines += ["    " + ln for ln in d["dynamic_shapes_fix"].splitlines()]
        if d.get("dynamic_shapes_fix_checked"):
            note = f"; {d['dynamic_shapes_fix_note']}" if d.get("dynamic_shapes_fix_note") else ""
            proof = d.get("dynamic_shapes_fix_proof", "")
            lines.append(f"  (checked: it exports again and its program takes the bounds of its ranges{note}"
                         f"{'; ' + proof if proof else ''})")
        if d.get("fix_kept_bounds"):
            lines.append("  (it keeps the bounds you wrote that torch's suggestion dropped: "
                         + "; ".join(d["fix_kept_bounds"]) + ")")
    elif d.get("dynamic_shapes_fix_problem"):
        lines.append(f"  no corrected dynamic_shapes to paste (not confirmed): {d['dynamic_shapes_fix_problem']}; "
                     "torch suggested:")
        lines += ["    " + ln for ln in d.get("dynamic_shapes_fix_torch", "").splitlines()]
    elif d.get("dynamic_shapes_fix_error"):
        lines.append(f"  (could not build the corrected dynamic_shapes: {d['dynamic_shapes_fix_error'].splitlines()[0]})")
    return "\n".join(lines) if len(lines) > 1 else ""


__all__ = ["diagnose", "diagnosis_text", "cut_text", "limit_for", "to_python", "draft_findings",
           "refined_dynamic_shapes", "suggested_fixes_message", "keep_bounds", "FIX_FROM_MESSAGE"]
