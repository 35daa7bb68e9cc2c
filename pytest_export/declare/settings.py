"""The session's settings: one table of every command-line option and its ini twin.

``plugin.pytest_addoption`` adds the options from this table, ``ExportSession`` reads them from it, and the
"no effect without --export-check" warning lists the ones it marks ``needs_check``: a new option is one row here
(and, if the runner needs it, one field of ``options.SessionOptions``), as Hypothesis keeps one source per setting.

Loaded with the plugin in every pytest run: imports no torch and nothing else of this package at import time
(the parsers of list options import theirs when they run).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import pytest

from ..util import output_problem

if TYPE_CHECKING:
    from .options import SessionOptions


@dataclasses.dataclass(frozen=True)
class Setting:
    """One option: ``--<name with dashes>`` on the command line and ``<name>`` in the ini file."""

    name: str  # the option's dest and its ini name
    help: str
    parse: Callable[[Any, str], Any]  # (the raw value, the flag) -> the value; ValueError says what is wrong
    field: str | None = None  # the SessionOptions field it sets (None: read where it is used)
    kind: str = "value"  # "flag" (store_true, ini bool), "list" (repeatable, comma-separated) or "value"
    metavar: str | None = None
    needs_check: bool = False  # acts only on the cases --export-check runs

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def ini_type(self) -> str:
        return "bool" if self.kind == "flag" else "string"


# ---- parsers: (raw value, flag) -> value ------------------------------------------------------------


def _flag(value: Any, flag: str) -> bool:
    return bool(value)


def _not_flag(value: Any, flag: str) -> bool:
    return not value


def _path(value: Any, flag: str) -> str | None:
    return value or None


def _count(default: int) -> Callable[[Any, str], int]:
    def parse(value: Any, flag: str) -> int:
        value = value or default
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = -1
        if n < 0:
            raise ValueError(f"{flag} must be a non-negative integer, got {value!r}")
        return n

    return parse


def _non_negative(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return -1.0
    return seconds if seconds >= 0 else -1.0  # NaN compares false: -1 too


def _seconds(value: Any, flag: str) -> float | None:
    if value in (None, ""):
        return None
    if not _non_negative(value) > 0:
        raise ValueError(f"{flag} must be a positive number of seconds, got {value!r}")
    return float(value)


def _budget(value: Any, flag: str) -> float | str | None:
    """Seconds; not given: ``"auto"`` (30 s, raised for a slow model's edges: ``cost.Costs.size_for_edges``); 0
    lifts the limit."""
    if value in (None, ""):
        return "auto"
    seconds = _non_negative(value)
    if seconds < 0:
        raise ValueError(f"{flag} must be a number of seconds >= 0 (0: no limit), got {value!r}")
    return seconds or None


def _memory(value: Any, flag: str) -> int | None:
    from .values import parse_memory

    return parse_memory(value, flag)


def _runtime_tolerance(value: Any, flag: str) -> dict[str, tuple]:
    from .values import parse_runtime_tolerance

    return parse_runtime_tolerance(value, flag)


def _choice(choices: tuple[str, ...], default: str) -> Callable[[Any, str], str]:
    def parse(value: Any, flag: str) -> str:
        value = value or default
        if value == "":  # not given, and the default is decided where it is used (-q gives --export-summary=short)
            return value
        if value not in choices:
            raise ValueError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def _tags(value: Any, flag: str) -> list[str]:
    from .tags import parse_tags

    return parse_tags(value)


def _modes(value: Any, flag: str) -> tuple[str, ...] | None:
    from .variants import parse_modes

    return parse_modes(value or None)


def _devices(value: Any, flag: str) -> tuple[str, ...] | None:
    from .variants import parse_devices

    return parse_devices(value or None)


def _skip_stages(value: Any, flag: str) -> tuple[str, ...]:
    from .options import parse_skip_stages

    return parse_skip_stages(value or None) or ()


def _backends(value: Any, flag: str) -> tuple[str, ...]:
    from ..util import comma_list
    from .options import backends_problem

    names = tuple(comma_list(value)) or ("xnnpack",)
    problem = backends_problem(names)
    if problem:
        raise ValueError(f"{flag} {problem}, got {', '.join(names)!r}")
    return names


# ---- the table (in the order --help lists them) -------------------------------------------------------

SETTINGS: tuple[Setting, ...] = (
    Setting("export_check", "export every @pytest.mark.exportable case and check it", _flag, "check", kind="flag"),
    Setting("export_tags", "run only the cases that carry one of these tags (comma-separated)", _tags,
            kind="list", metavar="TAG[,TAG...]"),
    Setting("export_report", "write the session's JSON report to PATH", _path, "report", metavar="PATH",
            needs_check=True),
    Setting("export_core_aten", "fail the decomp stage where ops outside Core ATen survive run_decompositions()", _flag,
            "core_aten", kind="flag"),
    Setting("export_examples", "fuzz examples per case (default 25)", _count(25), "examples", metavar="N"),
    Setting("export_max_size", "cap for unbounded Dim maxima while fuzzing (default 64)", _count(64), "max_size",
            metavar="N"),
    Setting("export_modes", "trace every case in each of these modes, each its own item: non-strict, strict "
            "(comma-separated; default: the marker's strict=)", _modes, "modes", kind="list",
            metavar="MODE[,MODE]", needs_check=True),
    Setting("export_devices", "export and compare every case on each of these devices, each its own item: cpu, "
            "cuda, cuda:N (default: cpu, plus cuda where available)", _devices, "devices", kind="list",
            metavar="DEVICE[,DEVICE]", needs_check=True),
    Setting("export_skip_stages", "do not run these stages (comma-separated, e.g. fuzz,guards); they are reported "
            "as skipped", _skip_stages, "skip_stages", kind="list", metavar="STAGE[,STAGE]"),
    Setting("export_aoti", "run the aoti stage (AOTInductor compile, load, compare) for every case", _flag, "aoti",
            kind="flag"),
    Setting("export_timeout", "time limit in seconds for each case's stages; a case over it is stopped and "
            "reported (default: none)", _seconds, "timeout", metavar="SECONDS"),
    Setting("export_budget", "seconds of probing per case: the forward calls at sizes other than the example's "
            "(guards, fuzz, and the probes of later stages), fake or numeric, and the fake runs that predict their "
            "cost; export, compare, save/load and decomp do not count. Numeric probes run while it lasts, every "
            "boundary size runs at least with fake tensors, random fuzz examples stop when it is spent (default: "
            "30, raised for a slow model to afford every dim's edges numerically, up to 300; 0: no limit)",
            _budget, "budget", metavar="SECONDS"),
    Setting("export_max_memory", "memory a numeric probe may use (e.g. 4GB, 512MiB); larger sizes are checked with "
            "fake tensors only (default: 1/16 of the machine's memory divided by xdist's workers)", _memory,
            "max_memory", metavar="SIZE"),
    Setting("export_require_numerics", "a case whose numerics (real tensors compared with eager) fell short of any "
            "declared max, or of any edge, ends as an error instead of passing with a note (for gates that want every "
            "edge run with real tensors)", _flag, "require_numerics", kind="flag"),
    Setting("export_baseline", "known failures (case, stage, reason) and non-core ops: a failure or op not in it "
            "fails the run, an entry that now passes is stale and fails it too", _path, "baseline", metavar="PATH",
            needs_check=True),
    Setting("export_baseline_update", "rewrite --export-baseline from this run (entries of cases that did not run "
            "are pruned only where the whole suite, or a whole folder of it, ran)", _flag, "baseline_update",
            kind="flag", needs_check=True),
    Setting("export_baseline_warn_stale", "report stale baseline entries as warnings instead of failing the run",
            _flag, "baseline_warn_stale", kind="flag", needs_check=True),
    Setting("export_coverage", "write the decomposition coverage op table to PATH (JSON) and, as Markdown, to "
            "PATH with its suffix replaced by .md (coverage.json -> coverage.md)", _path, "coverage", metavar="PATH",
            needs_check=True),
    Setting("export_summary_md", "write a short Markdown summary to PATH (default: appended to "
            "$GITHUB_STEP_SUMMARY when set)", _path, "summary_md", metavar="PATH", needs_check=True),
    Setting("export_no_diagnose", "do not diagnose a failed export (neither check the fix torch's message carries "
            "nor rerun it with torch.export.draft_export; the same as --export-diagnose=never)", _not_flag, "diagnose", kind="flag"),
    Setting("export_diagnose", "when to diagnose a failed export (check the fix torch's constraint-violation message "
            "carries; else rerun it with torch.export.draft_export): auto (failures not "
            "known to --export-baseline; the default), always, never", _choice(("auto", "always", "never"), "auto"),
            "diagnose_when", metavar="auto|always|never"),
    Setting("export_summary", "the end-of-run tables: full, short (one line per run and the failing cases; the "
            "default under -q) or off (default: full)", _choice(("full", "short", "off"), ""), metavar="full|short|off"),
    Setting("export_repro", "write a standalone repro script for every failing case into DIR (its header names what it needs)",
            _path, "repro", metavar="DIR", needs_check=True),
    Setting("export_onnx", "run the onnx stage (torch.onnx.export of the exported program, checked in ONNX Runtime) "
            "for every case (needs the [onnx] extra)", _flag, "onnx", kind="flag"),
    Setting("export_executorch", "run the executorch stage (the exported program lowered with ExecuTorch, run in its "
            "runtime) for every case (needs the [executorch] extra)", _flag, "executorch", kind="flag"),
    Setting("export_executorch_backends", "the executorch stage's backends, whose partitioners take the operators "
            "they can in this order: xnnpack, or portable alone for none (default: xnnpack)", _backends,
            "executorch_backends", kind="list", metavar="BACKEND[,BACKEND]"),
    Setting("export_runtime_tolerance", "tolerances of a deployment runtime's stage alone, RUNTIME:RTOL:ATOL (runtimes: "
            "executorch, onnx; e.g. executorch:1e-4:1e-5; default: by dtype, allowing for kernel libraries' "
            "reduction order; a marker's rtol/atol apply where this is not given)", _runtime_tolerance,
            "runtime_tolerance", kind="list", metavar="RUNTIME:RTOL:ATOL"),
)
BY_NAME = {s.name: s for s in SETTINGS}


def add_options(parser: pytest.Parser) -> None:
    """Every setting as an option of the ``export`` group and an ini value of the same name."""
    group = parser.getgroup("export", "torch.export conformance (pytest-export)")
    for s in SETTINGS:
        kw: dict[str, Any] = {"action": {"flag": "store_true", "list": "append"}.get(s.kind, "store")}
        if s.metavar:
            kw["metavar"] = s.metavar
        group.addoption(s.flag, dest=s.name, default=None, help=f"{s.help} (ini: {s.name})", **kw)
        parser.addini(s.name, help=s.help, type=s.ini_type, default=False if s.kind == "flag" else None)


def raw(config: pytest.Config, name: str) -> Any:
    """What the command line gave, else the ini file (the command line wins)."""
    return config.getoption(name) or config.getini(name)


def value(config: pytest.Config, name: str) -> Any:
    """One setting, parsed; a bad value is a usage error naming the option."""
    s = BY_NAME[name]
    try:
        return s.parse(raw(config, name), s.flag)
    except ValueError as exc:
        raise pytest.UsageError(str(exc))


def read_session_options(config: pytest.Config) -> SessionOptions:
    """Every setting that has a ``SessionOptions`` field, parsed (a bad value is a usage error)."""
    from .options import SessionOptions

    return SessionOptions(**{s.field: value(config, s.name) for s in SETTINGS if s.field})


def any_given(config: pytest.Config) -> bool:
    """Whether any of the plugin's options is set (then a bad value is an error even without --export-check)."""
    return any(raw(config, s.name) for s in SETTINGS)


def given_without_check(config: pytest.Config) -> list[str]:
    """The flags on the command line that act only on the cases --export-check runs."""
    return [s.flag for s in SETTINGS if s.needs_check and config.getoption(s.name)]


# ---- the files a run writes, checked before any case runs ----------------------------------------------

def outputs(options: SessionOptions) -> list[tuple[str, str, bool]]:
    """The paths a run writes to, as (flag, path, is a directory): the report (its case lines beside it), the
    coverage table (its Markdown beside it), the Markdown summary, the repro scripts' folder, and the baseline
    where ``--export-baseline-update`` rewrites it."""
    out = [(BY_NAME[name].flag, path, False) for name, path in (
        ("export_report", options.report), ("export_coverage", options.coverage),
        ("export_summary_md", options.summary_md)) if path]
    if options.baseline and options.baseline_update:
        out.append((BY_NAME["export_baseline"].flag, options.baseline, False))  # rewritten at the end
    if options.repro:
        out.append((BY_NAME["export_repro"].flag, options.repro, True))
    return out


def check_outputs(options: SessionOptions) -> None:
    """Every path the run writes to, checked at configure time: a usage error naming the option, the path, why
    and the fix, before any case runs (a run that could not write its report would find out at its end)."""
    problems = [f"{flag} {path}: {why}" for flag, path, directory in outputs(options)
                for why in [output_problem(path, directory)] if why]
    if problems:
        raise pytest.UsageError("\n".join(problems) + "\nthe run would not be able to write it; give a path in a "
                                "writable directory (or make the directory writable)")


__all__ = ["Setting", "SETTINGS", "add_options", "raw", "value", "read_session_options", "any_given",
           "given_without_check", "outputs", "output_problem", "check_outputs"]
