"""Marker keywords and session options: the schema, its validation, and the merged per-case options.

Nothing here imports torch at module import time; checks that need torch classes import it lazily,
and only when a case actually runs.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Callable

from ..util import comma_list, condition_holds, condition_problem
from .blob import is_blob
from .values import parse_memory, parse_runtime_tolerance, runtime_tolerance_problem

STAGES = ("export", "compare", "serde", "decomp", "guards", "fuzz", "retrace", "unflatten", "cuda", "aoti",
          "onnx", "executorch")
"""Stage names in run order. They are public: reports, baselines and ``xfail`` use them."""

ORDER = ("eager", *STAGES)
"""Every stage in run order: the one list. ``stages/`` holds one module per name, and the runner runs them in
this order (``eager`` first: a failure there is the model's, so it is neither ``xfail``-able nor skippable)."""


class ExportWarning(UserWarning):
    """A finding that does not fail the case (a bare ``Dim.AUTO`` narrowed, sizes 0/1 accepted but wrong).

    Shown in pytest's warnings summary; ``-W error::pytest_export.ExportWarning`` makes them fail.
    """


class UsageError(Exception):
    """A case or its marker is misused: the message names the test, the key and the fix."""


@dataclasses.dataclass(frozen=True)
class Keyword:
    name: str
    check: Callable[[Any], str | None]  # returns an error text or None
    expected: str  # human description of the accepted values
    default: Any
    help: str


def _is_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be True or False"


def _is_opt_bool(v: Any) -> str | None:
    return None if v is None or isinstance(v, bool) else "must be True, False or None"


def _is_tolerance(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "must be a non-negative number or None"
    if v < 0 or v != v:
        return "must be a non-negative number or None"
    return None


def _is_tags(v: Any) -> str | None:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple, set, frozenset)) or not all(isinstance(t, str) and t for t in v):
        return "must be a string or a list of non-empty strings"
    return None


XFAIL_SCOPES = ("non-strict", "strict", "cpu", "cuda")
"""Keys of ``xfail`` that hold ``{stage: reason}`` for one tracing mode or device only."""


def _reason_problem(value: Any, where: str) -> str | None:
    """An xfail entry's value: a reason, or ``(reason, "torch<2.14")`` where it holds on some torch versions only."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or not isinstance(value[0], str) or not value[0].strip():
            return f"{where} must be a reason string or a (reason, condition) pair such as (\"reason\", \"torch<2.14\")"
        problem = condition_problem(value[1])
        return f"{where} has a bad condition {value[1]!r}: {problem}" if problem else None
    if not isinstance(value, str) or not value.strip():
        return f"needs a non-empty reason string for {where}"
    return None


def _is_xfail(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, dict):  # an empty one expects no failure (a table of expectations has none for a case)
        return "must be a dict {stage: reason}"
    for key, value in v.items():
        if key in XFAIL_SCOPES:
            if not isinstance(value, dict) or not value:
                return f"[{key!r}] must be a dict {{stage: reason}} for the {key} items only"
            for stage, reason in value.items():
                if stage not in STAGES:
                    return f"[{key!r}] has unknown stage {stage!r}; valid stages: {', '.join(STAGES)}"
                problem = _reason_problem(reason, f"[{key!r}][{stage!r}]")
                if problem:
                    return problem
            continue
        if key not in STAGES:
            return (f"has unknown stage {key!r}; valid stages: {', '.join(STAGES)} (or a mode or device: "
                    f"{', '.join(XFAIL_SCOPES)}, mapping to {{stage: reason}})")
        problem = _reason_problem(value, f"stage {key!r}")
        if problem:
            return problem
    return None


def xfail_for(xfail: dict[str, Any], strict: bool, device: str,
              torch_version: str | None = None) -> dict[str, str]:
    """The ``{stage: reason}`` that holds for one item: the plain entries, then its mode's, then its device's.

    An entry ``(reason, "torch<2.14")`` holds only where the installed torch meets the condition (issue #25); its
    reason then names the condition, so the report records which one applied."""
    entries = {k: v for k, v in xfail.items() if k in STAGES}
    for scope in ("strict" if strict else "non-strict", "cuda" if device.startswith("cuda") else "cpu"):
        entries.update(xfail.get(scope) or {})
    out: dict[str, str] = {}
    for stage, value in entries.items():
        if isinstance(value, (tuple, list)):
            reason, condition = value
            if torch_version is None or not condition_holds(condition, torch_version):
                continue
            value = f"{reason} [{condition.strip()}: torch {torch_version}]"
        out[stage] = value
    return out


def _is_dynamic_shapes(v: Any) -> str | None:
    if v is None or isinstance(v, (dict, list, tuple)):
        return None
    # ShapesCollection / AdditionalInputs: only look at torch when the value is not a builtin.
    import torch.export

    if isinstance(v, (torch.export.ShapesCollection, torch.export.AdditionalInputs)):
        return None
    return (
        "must be a dict by argument name, a tuple/list by position, None, "
        "a torch.export.ShapesCollection or a torch.export.AdditionalInputs"
    )


def _is_positive_int(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        return "must be a non-negative int or None"
    return None


def _is_memory(v: Any) -> str | None:
    try:
        parse_memory(v, "max_memory")
    except ValueError:
        return "must be a size such as \"4GB\", \"512MiB\" or a number of bytes, or None"
    return None


def _is_callable(v: Any) -> str | None:
    return None if v is None or callable(v) else "must be a callable or None"


def _is_fqns(v: Any) -> str | None:
    if isinstance(v, str):
        return "must be a tuple of submodule names, e.g. (\"encoder.layer1\",), not a bare string"
    if not isinstance(v, (tuple, list)) or not v or not all(isinstance(t, str) and t for t in v):
        return "must be a non-empty tuple of submodule names (fully qualified, e.g. \"encoder.layer1\")"
    return None


def _is_seed(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        return "must be an int or None"
    return None


EXECUTORCH_BACKENDS = ("xnnpack", "portable")  # the executorch stage's partitioners, tried in order; portable: none


def backends_problem(value: Any) -> str | None:
    """What is wrong with an ``executorch`` backend list (``"xnnpack"``, ``["xnnpack"]``, ``"portable"``)."""
    names = comma_list(value) if isinstance(value, (str, list, tuple)) else []
    if names and all(n in EXECUTORCH_BACKENDS for n in names) and ("portable" not in names or len(names) == 1):
        return None
    return f"must name backends of {', '.join(EXECUTORCH_BACKENDS)} (portable alone: no partitioner)"


KEYWORDS: dict[str, Keyword] = {
    k.name: k
    for k in [
        Keyword(
            "dynamic_shapes", _is_dynamic_shapes, "dict | tuple | list | ShapesCollection | AdditionalInputs | None",
            None, "passed to torch.export.export; the declared ranges are audited, fuzzed and guard-checked",
        ),
        Keyword("strict", _is_bool, "bool", False, "trace with TorchDynamo (strict=True) or not (default)"),
        Keyword("rtol", _is_tolerance, "float >= 0 | None", None, "relative tolerance (default: torch.testing's, by dtype)"),
        Keyword("atol", _is_tolerance, "float >= 0 | None", None, "absolute tolerance (default: torch.testing's, by dtype)"),
        Keyword(
            "core_aten", _is_opt_bool, "bool | None", None,
            "fail `decomp` when ops outside Core ATen survive run_decompositions() (default: --export-core-aten)",
        ),
        Keyword("tags", _is_tags, "str | list[str]", (), "labels for selection with --export-tags and grouping in tables"),
        Keyword(
            "xfail", _is_xfail, "dict {stage: reason or (reason, 'torch<2.14')} (also per mode/device: "
            "{'strict': {stage: reason}}) | None", None,
            "stages expected to fail; a stage that passes anyway is a strict XPASS failure",
        ),
        Keyword("examples", _is_positive_int, "int >= 0 | None", None, "fuzz examples for this case (default: --export-examples)"),
        Keyword(
            "input_builder", _is_callable, "callable(sizes, example_args, example_kwargs) | None", None,
            "builds (args, kwargs) for drawn sizes; for inputs with meaning such as token ids or masks",
        ),
        Keyword("allow_static", _is_bool, "bool", False,
                "accept that export made a Dim.AUTO axis static (otherwise `guards` fails)"),
        Keyword("seed", _is_seed, "int | None", None, "Hypothesis seed for this case's fuzzing (replay a failure)"),
        Keyword("reproduce", is_blob, "str | None", None,
                "a reproduce blob printed by a failed `fuzz` stage; replays that exact example first"),
        Keyword("timeout", _is_tolerance, "float seconds > 0 | None", None,
                "time limit for this case's stages (default: --export-timeout)"),
        Keyword(
            "budget", _is_tolerance, "float seconds >= 0 | None", None,
            "seconds of probing for this case (the forward calls at sizes other than the example's, fake or numeric); "
            "0 lifts the limit (default: --export-budget)",
        ),
        Keyword(
            "max_memory", _is_memory, "str such as '4GB' | int bytes | None", None,
            "memory a numeric probe may use; larger sizes are checked with fake tensors only (default: "
            "--export-max-memory)",
        ),
        Keyword("max_size", _is_positive_int, "int | None", None,
                "cap for unbounded Dim maxima while fuzzing (default: --export-max-size)"),
        Keyword(
            "preserve_module_call_signature", _is_fqns, "tuple[str, ...]", (),
            "submodules whose call signature export keeps; runs the `unflatten` stage (unflatten, compare, swap each "
            "for its eager original)",
        ),
        Keyword("aoti", _is_opt_bool, "bool | None", None,
                "run the `aoti` stage (AOTInductor compile, load, compare) for this case (default: --export-aoti)"),
        Keyword("onnx", _is_opt_bool, "bool | None", None,
                "run the `onnx` stage (torch.onnx.export of the program, checked in ONNX Runtime) for this case "
                "(default: --export-onnx)"),
        Keyword("executorch", lambda v: None if v is None or isinstance(v, bool) else backends_problem(v),
                "bool | 'xnnpack' | 'portable' | list[str] | None", None,
                "run the `executorch` stage (the program lowered with ExecuTorch, run in its runtime) for this case; "
                "a backend list also chooses its partitioners (default: --export-executorch, --export-executorch-backends)"),
        Keyword("runtime_tolerance", runtime_tolerance_problem, "dict {runtime: (rtol, atol)} | None", None,
                "tolerances of the `executorch` and `onnx` stages alone (default: --export-runtime-tolerance, else "
                "by dtype, allowing for kernel libraries' reduction order)"),
        Keyword("train", _is_bool, "bool", False,
                "the module is exported in training mode on purpose (dropout, batch-norm statistics): no warning"),
        Keyword("grad", _is_bool, "bool", False, "run eager and the programs with autograd on (default: under "
                "torch.no_grad(), in the memory of an inference check)"),
        Keyword("require_numerics", _is_opt_bool, "bool | None", None, "a case whose numerics fell short of any "
                "declared max ends as `error` (default: --export-require-numerics)"),
    ]
}


@dataclasses.dataclass
class SessionOptions:
    """Session-wide settings (command line or ini)."""

    check: bool = False
    core_aten: bool = False
    examples: int = 25
    max_size: int = 64
    report: str | None = None
    timeout: float | None = None
    budget: float | str | None = "auto"  # --export-budget (None: no limit; "auto": 30 s, raised for the edges)
    max_memory: int | None = None  # --export-max-memory in bytes (None: cost.default_max_memory())
    baseline: str | None = None
    baseline_update: bool = False
    baseline_warn_stale: bool = False
    coverage: str | None = None
    summary_md: str | None = None
    diagnose: bool = True  # --export-no-diagnose clears it
    diagnose_when: str = "auto"  # --export-diagnose: auto (not for baselined failures), always, never
    repro: str | None = None  # --export-repro DIR
    onnx: bool = False
    aoti: bool = False
    executorch: bool = False
    executorch_backends: tuple[str, ...] = ("xnnpack",)  # --export-executorch-backends
    runtime_tolerance: dict[str, tuple] = dataclasses.field(default_factory=dict)  # --export-runtime-tolerance
    require_numerics: bool = False  # --export-require-numerics
    modes: tuple[str, ...] | None = None  # --export-modes; None: the marker's `strict` decides
    devices: tuple[str, ...] | None = None  # --export-devices; None: cpu, plus cuda where available
    skip_stages: tuple[str, ...] = ()  # --export-skip-stages


@dataclasses.dataclass
class CaseOptions:
    dynamic_shapes: Any = None
    strict: bool = False
    rtol: float | None = None
    atol: float | None = None
    core_aten: bool = False
    tags: tuple[str, ...] = ()
    xfail: dict[str, str] = dataclasses.field(default_factory=dict)
    examples: int = 25
    input_builder: Callable[..., Any] | None = None
    allow_static: bool = False
    seed: int | None = None
    reproduce: str | None = None
    max_size: int = 64
    timeout: float | None = None
    budget: float | None = 30.0  # seconds of probing (None: no limit)
    budget_auto: bool = True  # not given: at least the floor, raised to afford the edges (cost.Costs.size_for_edges)
    max_memory: int | None = None  # bytes a numeric probe may use (None: cost.default_max_memory())
    diagnose: bool = True
    diagnose_skipped: str = ""  # why a failed export is not diagnosed (--export-diagnose=auto: known or expected)
    preserve_module_call_signature: tuple[str, ...] = ()
    aoti: bool = False
    onnx: bool = False
    executorch: bool = False
    executorch_backends: tuple[str, ...] = ("xnnpack",)  # partitioners in order; ("portable",): none
    runtime_tolerance: dict[str, tuple] = dataclasses.field(default_factory=dict)  # runtime -> (rtol, atol)
    train: bool = False  # exported in training mode on purpose (no training-mode warning)
    grad: bool = False  # forward calls with autograd on (default: under torch.no_grad(); issue #31)
    require_numerics: bool = False  # numerics short of a declared max is an `error` (issue #31)
    device: str = "cpu"  # where the case is exported and compared (--export-devices)
    skip_stages: tuple[str, ...] = ()  # stages not run (--export-skip-stages)


SKIPPABLE = tuple(s for s in STAGES if s != "export")
DEFAULT_BUDGET = 30.0  # seconds of probing; raised for a slow model's edges where not given (issue #31)


def parse_skip_stages(value: Any) -> tuple[str, ...]:
    """``--export-skip-stages guards,fuzz`` -> ("guards", "fuzz"); ValueError naming the choices."""
    parts = comma_list(value or None)
    for p in parts:
        if p not in SKIPPABLE:
            raise ValueError(f"--export-skip-stages: unknown or required stage {p!r}; valid: {', '.join(SKIPPABLE)}")
    return tuple(parts)


def _suggest(key: str) -> str:
    close = difflib.get_close_matches(key, KEYWORDS, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def validate_keywords(where: str, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Check marker (or fixture) keywords against the allow-list; return them unchanged or raise UsageError."""
    valid = ", ".join(sorted(KEYWORDS))
    if args:
        raise UsageError(
            f"{where}: exportable takes keyword arguments only, got positional {args!r}. "
            f"Write e.g. @pytest.mark.exportable(dynamic_shapes=...). Valid keywords: {valid}"
        )
    for key, value in kwargs.items():
        kw = KEYWORDS.get(key)
        if kw is None:
            raise UsageError(f"{where}: unknown exportable keyword {key!r}.{_suggest(key)} Valid keywords: {valid}")
        try:
            problem = kw.check(value)
        except Exception as exc:  # a validator must never crash the session
            problem = f"could not be checked ({type(exc).__name__}: {exc})"
        if problem:
            raise UsageError(f"{where}: exportable keyword {key!r} {problem} (expected {kw.expected}); got {value!r}")
    return kwargs


def merge(session: SessionOptions, kwargs: dict[str, Any]) -> CaseOptions:
    """Marker keywords over session defaults."""
    opts = CaseOptions(core_aten=session.core_aten, examples=session.examples, max_size=session.max_size,
                       timeout=session.timeout, budget=DEFAULT_BUDGET if session.budget == "auto" else session.budget,
                       budget_auto=session.budget == "auto", max_memory=session.max_memory,
                       diagnose=session.diagnose and session.diagnose_when != "never", aoti=session.aoti,
                       onnx=session.onnx, executorch=session.executorch,
                       executorch_backends=session.executorch_backends,
                       runtime_tolerance=dict(session.runtime_tolerance), require_numerics=session.require_numerics,
                       skip_stages=tuple(session.skip_stages))
    for key, value in kwargs.items():
        if key == "tags":
            value = (value,) if isinstance(value, str) else tuple(value)
        elif key == "xfail":
            value = dict(value or {})
        elif key == "preserve_module_call_signature":
            value = tuple(value)
        elif key == "executorch" and value is not None and not isinstance(value, bool):
            opts.executorch_backends, value = tuple(comma_list(value)), True  # a backend list also turns it on
        elif key in ("core_aten", "examples", "max_size", "timeout", "budget", "aoti", "onnx", "executorch", "max_memory",
                     "require_numerics") and value is None:
            continue
        elif key == "max_memory":
            value = parse_memory(value, "max_memory")
        elif key == "runtime_tolerance":
            value = {**opts.runtime_tolerance, **parse_runtime_tolerance(value)}
        elif key == "budget":
            value = value or None  # budget=0: no limit
            opts.budget_auto = False
        setattr(opts, key, value)
    return opts
