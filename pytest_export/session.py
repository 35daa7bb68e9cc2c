"""Session state: options, torch set-up, the cases seen by this process, and the files written at the end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .options import SessionOptions, UsageError, merge
from .results import CaseResult

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


def read_session_options(config: pytest.Config) -> SessionOptions:
    def flag(name: str) -> bool:
        return bool(config.getoption(name) or config.getini(name))

    return SessionOptions(
        check=flag("export_check"),
        core_aten=flag("export_core_aten"),
        examples=_int_option(config, "export_examples", 25),
        max_size=_int_option(config, "export_max_size", 64),
        report=config.getoption("export_report") or config.getini("export_report") or None,
        timeout=_float_option(config, "export_timeout"),
    )


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
        self.options = read_session_options(config)
        self.cases: dict[str, dict[str, Any]] = {}
        self._torch_ready = False

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

    def run(self, nodeid: str, case: Any, keywords: dict[str, Any], workdir: Path) -> CaseResult:
        self._ready()
        from .runner import run_case

        options = merge(self.options, keywords)
        return run_case(case, options, nodeid=nodeid, workdir=workdir, session=self)

    # ---- collecting results (controller side; under xdist the reports arrive from workers) ----
    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        results = getattr(report, "export_results", None)
        if results and report.when == "call":
            for r in results:
                self.cases[r["nodeid"]] = r

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        if self.options.report:
            self.write_report(self.options.report)

    def torch_version(self) -> str | None:
        import sys

        torch = sys.modules.get("torch")
        if torch is None and self.cases:
            import torch  # noqa: F811
        return getattr(torch, "__version__", None) if torch else None

    def report_data(self) -> dict[str, Any]:
        from .report import build_report

        return build_report(list(self.cases.values()), self.torch_version())

    def write_report(self, path: str) -> None:
        from .report import write_json_atomic

        write_json_atomic(path, self.report_data())

    def terminal_summary(self, terminalreporter: Any) -> None:
        pass

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.is_worker or not self.cases:
            return
        if self.options.report:
            terminalreporter.write_line(f"pytest-export: report written to {self.options.report}")
        if self.options.check and any(c.get("tags") for c in self.cases.values()):
            self.write_conformance(terminalreporter)

    def write_conformance(self, terminalreporter: Any) -> None:
        """Cases by tag and stage, and the Core ATen coverage they reach (counting the core ops imports torch)."""
        from .conformance import conformance_table
        from .ops import countable_core_ops

        terminalreporter.write_sep("=", f"export conformance (torch {self.torch_version()})")
        terminalreporter.write_line(conformance_table(list(self.cases.values()), countable_core_ops()))


__all__ = ["ExportSession", "SESSION_KEY", "UsageError", "CaseResult"]
