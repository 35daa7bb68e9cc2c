"""Session state: options, torch set-up, the cases seen by this process, and the files written at the end."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported where used: a run without --export-check loads none of them
    from .options import SessionOptions
    from .results import CaseResult
    from .variants import Variant

SESSION_KEY = pytest.StashKey["ExportSession"]()


def _int_option(config: pytest.Config, name: str, default: int) -> int:
    value = config.getoption(name) or config.getini(name) or default
    try:
        n = int(value)
        if n < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise pytest.UsageError(f"--{name.replace('_', '-')} must be a non-negative integer, got {value!r}")
    return n


def _flag(config: pytest.Config, name: str) -> bool:
    return bool(config.getoption(name) or config.getini(name))


def read_session_options(config: pytest.Config) -> SessionOptions:
    from .options import SessionOptions, parse_skip_stages
    from .variants import parse_devices, parse_modes

    def flag(name: str) -> bool:
        return _flag(config, name)

    return SessionOptions(
        check=flag("export_check"),
        core_aten=flag("export_core_aten"),
        examples=_int_option(config, "export_examples", 25),
        max_size=_int_option(config, "export_max_size", 64),
        report=_path_option(config, "export_report"),
        timeout=_float_option(config, "export_timeout"),
        baseline=_path_option(config, "export_baseline"),
        baseline_update=flag("export_baseline_update"),
        baseline_warn_stale=flag("export_baseline_warn_stale"),
        coverage=_path_option(config, "export_coverage"),
        summary_md=_path_option(config, "export_summary_md"),
        diagnose=not flag("export_no_diagnose"),
        aoti=flag("export_aoti"),
        modes=_list_option(config, "export_modes", parse_modes),
        devices=_list_option(config, "export_devices", parse_devices),
        skip_stages=_list_option(config, "export_skip_stages", parse_skip_stages) or (),
    )


# every option and ini name of the plugin (pytest_addoption in plugin.py adds them)
OPTION_NAMES = ("export_check", "export_tags", "export_report", "export_core_aten", "export_examples",
                "export_max_size", "export_modes", "export_devices", "export_skip_stages", "export_aoti",
                "export_timeout", "export_baseline", "export_baseline_update", "export_baseline_warn_stale",
                "export_coverage", "export_summary_md", "export_no_diagnose")


def _any_export_option(config: pytest.Config) -> bool:
    return any(config.getoption(n) or config.getini(n) for n in OPTION_NAMES)


def _path_option(config: pytest.Config, name: str) -> str | None:
    return config.getoption(name) or config.getini(name) or None


def _list_option(config: pytest.Config, name: str, parse: Any) -> tuple[str, ...] | None:
    try:
        return parse(config.getoption(name) or config.getini(name) or None)
    except ValueError as exc:
        raise pytest.UsageError(str(exc))


def _float_option(config: pytest.Config, name: str) -> float | None:
    value = config.getoption(name) or config.getini(name)
    if value in (None, ""):
        return None
    try:
        seconds = float(value)
        if seconds <= 0 or seconds != seconds:
            raise ValueError
    except (TypeError, ValueError):
        raise pytest.UsageError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value!r}")
    return seconds


class ExportSession:
    """Registered as a plugin object per config, so its hooks see this session only."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.check = _flag(config, "export_check")
        self._options: SessionOptions | None = None
        if self.check or _any_export_option(config):
            self.options  # noqa: B018 - a bad option value is a usage error now, not at first use
        self.cases: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, dict[str, Any]] = {}  # marked cases whose setup ran (to report a crash)
        self.session_data: dict[str, Any] = {}
        self.baseline_messages: list[str] = []
        self._baseline = None
        self._torch_ready = False
        self._cuda: bool | None = None
        self._run_tmp: Path | None = None

    @property
    def options(self) -> SessionOptions:
        """The session's options, parsed on first use: a run without the plugin's options never imports them."""
        if self._options is None:
            self._options = read_session_options(self.config)
        return self._options

    def cuda_available(self) -> bool:
        if self._cuda is None:
            import torch

            self._cuda = bool(torch.cuda.is_available())
        return self._cuda

    def variants(self) -> list[Variant]:
        """The items each marked case becomes under --export-modes / --export-devices (empty: just one)."""
        if not self.check:
            return []
        from .variants import variants

        return variants(self.options.modes, self.options.devices, self.cuda_available)

    def run_tmp_dir(self) -> Path:
        """A temp dir of this run (pytest's basetemp; per worker under xdist) for caches shared by its cases."""
        if self._run_tmp is None:
            self._run_tmp = self.config._tmp_path_factory.mktemp("pytest-export")
        return self._run_tmp

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    # ---- running cases ---------------------------------------------------------------
    def _ready(self) -> None:
        if self._torch_ready:
            return
        import torch

        if self.is_worker and not os.environ.get("PYTEST_EXPORT_KEEP_THREADS"):
            torch.set_num_threads(1)  # two workers on two cores must not fight over threads
        self._torch_ready = True

    def build_case(self, where: str, value: Any):
        self._ready()
        from .case import Case

        return Case.from_return(where, value)

    def smoke(self, where: str, case: Any) -> None:
        from .runner import describe_exception, smoke

        try:
            smoke(case)
        except Exception as exc:
            pytest.fail(f"{where}: eager forward raised on the example inputs: {describe_exception(exc)}", pytrace=False)

    def run(self, nodeid: str, case: Any, keywords: dict[str, Any], workdir: Path, device: str = "cpu") -> CaseResult:
        self._ready()
        from .options import merge
        from .runner import run_case

        options = merge(self.options, keywords)
        options.device = device
        return run_case(case, options, nodeid=nodeid, workdir=workdir, session=self)

    # ---- the baseline (read on every process: workers judge their own cases) ----------------
    @property
    def baseline(self):
        if self._baseline is None and self.check and self.options.baseline:
            from . import baseline as bl
            from .options import UsageError

            try:
                self._baseline = bl.load(self.options.baseline, missing_ok=self.options.baseline_update)
            except UsageError as exc:
                raise pytest.UsageError(str(exc))
        return self._baseline

    def gate(self, result: CaseResult) -> tuple[str, str]:
        """What the item does with its result: ``("fail" | "xfail" | "warn" | "pass", text)``.

        An error (a stage that ended ``error``, or a case-level error) always fails, with or without a baseline
        and in update mode too: the harness could not decide, so no baseline can expect it. Without a baseline
        a failed case fails. With one, known failures are expected (xfail); new failures (unlisted, or listed
        with another signature) and new non-core ops fail; entries that now pass are stale (fail, or warn).
        In update mode every failure is being recorded, so no failure fails the item.
        """
        from . import baseline as bl

        base = self.baseline
        case = result.to_json()
        verdict: dict[str, Any] = {}
        if base is not None and not self.options.baseline_update:
            verdict = bl.judge(case, base)  # in the report even where an error fails the item
            if verdict:
                result.info["baseline"] = verdict
        errors = bl.errors_of(case)
        if errors:
            return "fail", _error_text(result, errors)
        if base is None:
            return ("fail", result.failure_text()) if result.failed else ("pass", "")
        if self.options.baseline_update:
            now = bl.failures_of(case)
            return ("xfail", "recorded in the baseline: " + _stages_text(
                {s: e["reason"] for s, e in now.items()})) if now else ("pass", "")
        path = self.options.baseline
        if verdict.get("new") or verdict.get("new_non_core"):
            lines = [result.failure_text(), "", f"--- baseline {path} ---"]
            listed = base.failures.get(result.nodeid, {})
            unlisted = {s: r for s, r in verdict.get("new", {}).items() if s not in listed}
            if unlisted:
                lines.append("new failure (not in the baseline): " + _stages_text(unlisted))
            for s, r in sorted(verdict.get("new", {}).items()):
                if s in listed:  # listed, but it fails for another reason now
                    lines.append(f"new failure in {s}: {r}")
            if verdict.get("new_non_core"):
                lines.append("new non-core op after decomposition (not in the baseline): "
                             + ", ".join(verdict["new_non_core"]))
            lines.append("fix it, or accept it with --export-baseline-update")
            return "fail", "\n".join(lines)
        if result.outcome == "failed" and any(s.status == "xpassed" for s in result.stages.values()):
            return "fail", result.failure_text()
        if verdict.get("stale"):
            text = (f"stale: remove it: baseline {path} expects {_stages_text(verdict['stale'])} to fail, "
                    "but it passes now (rerun with --export-baseline-update)")
            return ("warn" if self.options.baseline_warn_stale else "fail"), text
        if verdict.get("known"):
            return "xfail", "known failure in the baseline: " + _stages_text(verdict["known"])
        return ("fail", result.failure_text()) if result.failed else ("pass", "")

    # ---- collecting results (controller side; under xdist the reports arrive from workers) ----
    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        marked = getattr(report, "export_case", None)
        if marked and report.when == "setup":
            self.pending[report.nodeid] = marked
        results = getattr(report, "export_results", None)
        if results and report.when == "call":
            for r in results:
                self.cases[r["nodeid"]] = r
            return
        if report.failed and report.nodeid in self.pending and report.nodeid not in self.cases:
            # a worker that died mid-case (xdist reports it with when="???"), or a fixture that failed
            why = "the worker running it crashed" if report.when not in ("setup", "call", "teardown") \
                else f"{report.when} failed"
            text = str(report.longrepr).strip().splitlines()
            from .results import ERROR, CaseResult

            self.cases[report.nodeid] = CaseResult(
                report.nodeid, outcome=ERROR, tags=list(self.pending[report.nodeid].get("tags", [])),
                error=f"{report.nodeid}: {why}: {text[-1] if text else ''}".rstrip(": "),
            ).to_json()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist: a worker finished; merge what it knows about torch (version, Core ATen ops, op facts)."""
        data = getattr(node, "workeroutput", {}).get("pytest_export")
        if data:
            self.merge_session_data(data)

    def merge_session_data(self, data: dict[str, Any]) -> None:
        for key in ("torch", "core_ops"):
            if data.get(key) is not None:
                self.session_data[key] = data[key]
        self.session_data.setdefault("op_facts", {}).update(data.get("op_facts") or {})

    def local_session_data(self) -> dict[str, Any]:
        """Torch facts of this process for the cases it ran (JSON-able; shipped from workers)."""
        if not self.cases or "torch" not in sys.modules:
            return {}
        from .ops import countable_core_ops, op_facts

        ops = {op for c in self.cases.values() for s in ("decomp",)
               for key in ("ops_before", "ops_after") for op in (c.get("stages", {}).get(s) or {}).get(key) or []}
        return {"torch": self.torch_version(), "core_ops": sorted(countable_core_ops()), "op_facts": op_facts(ops)}

    def full_data(self) -> dict[str, Any]:
        """Session data: from workers under xdist, else from this process (which imports torch if needed)."""
        data = dict(self.session_data)
        need = not data.get("core_ops") or not data.get("torch") or any(
            op not in data.get("op_facts", {}) for c in self.cases.values()
            for op in (c.get("stages", {}).get("decomp") or {}).get("ops_before", []))
        if need and self.cases:
            import torch  # noqa: F401 - a controller whose workers all died still knows the facts

            local = self.local_session_data()
            for key, value in local.items():
                if key == "op_facts":
                    data["op_facts"] = {**value, **data.get("op_facts", {})}
                elif not data.get(key):
                    data[key] = value
            self.session_data = dict(data)  # computed once
        return data

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            if self.check:
                # execnet sends builtin types only: anything else crashes the worker here, at session end
                self.config.workeroutput["pytest_export"] = to_builtins(self.local_session_data())
            return
        if not self.check:
            return
        data = self.full_data()
        self._finish_baseline(session)
        if self.options.report:
            self.write_report(self.options.report, data)
        from . import summary

        if self.options.coverage:
            summary.write_coverage(self.options.coverage, list(self.cases.values()), data)
        md_path = self.options.summary_md
        append = False
        if md_path is None and os.environ.get("GITHUB_STEP_SUMMARY"):
            md_path, append = os.environ["GITHUB_STEP_SUMMARY"], True
        if md_path and self.cases:
            summary.write_summary_md(md_path, self.report_data(data), self.baseline_messages, append=append)

    def _finish_baseline(self, session: pytest.Session) -> None:
        if not self.options.baseline:
            return
        from . import baseline as bl
        from .report import write_text_atomic

        base = self.baseline
        scope = prune_scope(self.config, session)
        cases = list(self.cases.values())
        # errors fail their items whatever the baseline says; list them here too, so the summary explains why
        # an update did not record them and a gate run did not expect them
        errors = [f"error (never baselined): {c['nodeid']} [{', '.join(bl.errors_of(c))}]: the harness could not "
                  "decide; fix what stopped it and rerun" for c in sorted(cases, key=lambda c: c["nodeid"])
                  if bl.errors_of(c)]
        if self.options.baseline_update:
            new = bl.updated(base, cases, scope)
            write_text_atomic(self.options.baseline, new.dumps())
            self.baseline_messages.append(
                f"baseline {self.options.baseline} updated: {sum(len(s) for s in new.failures.values())} known "
                f"failure(s), {len(new.non_core_ops)} non-core op(s)"
                + ("" if scope else " (subset run: entries of cases that did not run were kept)"))
            self.baseline_messages += errors
            return
        stale = [f"{c['nodeid']} [{', '.join(sorted(c['baseline']['stale']))}]: passes now"
                 for c in cases if c.get("baseline", {}).get("stale")]
        stale += bl.session_stale(base, cases, scope)
        new = []
        for c in cases:
            verdict = c.get("baseline", {})
            listed = base.failures.get(c["nodeid"], {})
            unlisted = sorted(s for s in verdict.get("new", {}) if s not in listed)
            parts = [f"new failure in {', '.join(unlisted)}"] if unlisted else []
            parts += [f"new failure in {s} ({r})" for s, r in sorted(verdict.get("new", {}).items()) if s in listed]
            if verdict.get("new_non_core"):
                parts.append(f"new non-core op {', '.join(verdict['new_non_core'])}")
            if parts:
                new.append(f"{c['nodeid']}: " + "; ".join(parts))
        self.baseline_messages += [f"new: {m}" for m in new] + errors
        verb = "stale (warning)" if self.options.baseline_warn_stale else "stale: remove it"
        self.baseline_messages += [f"{verb}: {m}" for m in stale]
        if stale and not self.options.baseline_warn_stale and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def torch_version(self) -> str | None:
        if self.session_data.get("torch"):
            return self.session_data["torch"]
        torch = sys.modules.get("torch")
        if torch is None and self.cases:
            import torch  # noqa: F811
        version = getattr(torch, "__version__", None) if torch else None
        return str(version) if version is not None else None  # a TorchVersion (str subclass) is no builtin

    def report_data(self, data: dict[str, Any] | None = None) -> dict[str, Any]:
        from .report import build_report
        from .summary import coverage_summary

        data = self.full_data() if data is None else data
        cases = list(self.cases.values())
        return build_report(cases, data.get("torch") or self.torch_version(),
                            coverage=coverage_summary(cases, data.get("core_ops")))

    def write_report(self, path: str, data: dict[str, Any] | None = None) -> None:
        from .report import write_json_atomic

        write_json_atomic(path, self.report_data(data))

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker or not self.check:
            return
        if self.cases:
            from .summary import summary_text

            data = self.full_data()
            terminalreporter.write_sep("=", f"export summary (torch {data.get('torch')})")
            terminalreporter.write_line(summary_text(list(self.cases.values()), data.get("core_ops"),
                                                     verbose=config.getoption("verbose") > 0))
            if any(c.get("tags") for c in self.cases.values()):
                self.write_conformance(terminalreporter)
        if self.baseline_messages:
            terminalreporter.write_sep("=", f"export baseline {self.options.baseline}")
            for line in self.baseline_messages:
                terminalreporter.write_line(line)
        if self.options.report and self.cases:
            terminalreporter.write_line(f"pytest-export: report written to {self.options.report}")

    def write_conformance(self, terminalreporter: Any) -> None:
        """Cases by tag and stage, and the Core ATen coverage they reach."""
        from .conformance import conformance_table

        terminalreporter.write_sep("=", f"export conformance (torch {self.torch_version()})")
        terminalreporter.write_line(conformance_table(list(self.cases.values()), self.full_data().get("core_ops")))


_SCALARS = (bool, int, float, str, bytes)


def to_builtins(value: Any, where: str = "workeroutput") -> Any:
    """``value`` as exact builtin types, for xdist's ``workeroutput``: execnet serializes only those and a
    subclass (``torch.__version__`` is a ``TorchVersion``, a str subclass) kills the worker with ``DumpError``.
    Subclasses of builtin scalars become their base type, tuples and sets lists (sets sorted); anything
    else raises TypeError naming where it is (a bug here, not in the user's tests)."""
    if value is None or type(value) in _SCALARS:
        return value
    for base in _SCALARS:
        if isinstance(value, base):
            return base(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)):
                raise TypeError(f"{where}: key {k!r} ({type(k).__name__}) cannot be sent from an xdist worker")
            out[to_builtins(k, where)] = to_builtins(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [to_builtins(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        return sorted(to_builtins(v, where) for v in value)
    raise TypeError(f"{where}: {type(value).__module__}.{type(value).__qualname__} cannot be sent from an xdist "
                    "worker (execnet sends builtin types only); convert it to str, int, float, list or dict")


def _error_text(result: CaseResult, errors: list[str]) -> str:
    """The failure text of a result the harness could not decide: never expected, never baselined."""
    stages = [e for e in errors if e != "case"]
    what = f"the {stages[0]} stage's message" if stages else "the case's error"
    return (f"{result.failure_text()}\n\n{result.nodeid} [{', '.join(errors)}]: error: the harness could not "
            f"decide; errors are never expected or baselined; fix what stopped it ({what} above says what; "
            "a timeout: raise --export-timeout or make the case smaller)")


def _stages_text(stages: dict[str, str]) -> str:
    return "; ".join(f"{s} ({r})" if r else s for s, r in sorted(stages.items()))


def prune_scope(config: pytest.Config, session: pytest.Session) -> list[str] | None:
    """Rootdir-relative folders that ran whole, or None for a subset run (``-k``, ``-m``, a file, a test id,
    ``--export-tags``, ``--lf``, a run stopped early): the baseline prunes only inside them."""
    opt = config.option
    if (getattr(opt, "keyword", "") or getattr(opt, "markexpr", "") or getattr(opt, "deselect", None)
            or getattr(opt, "lf", False) or getattr(opt, "stepwise", False) or getattr(opt, "maxfail", 0)
            or config.getoption("export_tags") or config.getini("export_tags") or session.shouldstop
            or session.shouldfail):
        return None
    root = Path(config.rootpath)
    scope = []
    for arg in config.args:
        if "::" in arg:
            return None
        path = Path(arg) if Path(arg).is_absolute() else Path(config.invocation_params.dir, arg)
        if not path.is_dir():
            return None
        try:
            rel = path.resolve().relative_to(root.resolve())
        except ValueError:
            return None
        scope.append("" if str(rel) == "." else rel.as_posix())
    return scope


__all__ = ["ExportSession", "SESSION_KEY", "prune_scope", "to_builtins"]
