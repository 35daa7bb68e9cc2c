"""The session: the state of one pytest run (its options, torch set-up), what a marked case's item asks of it
(run the case, gate its result), and the run's books: the cases seen by this process, their durations, what the
run covered (#24), and the cases and torch facts xdist workers send the controller.

What it delegates (none loads in a run without the plugin's options): ``declare.settings`` parses the options;
``gate`` records what the run covers and judges it; on the controller, ``report.run.RunReport`` writes the case
lines as cases end and, at the end of the run (also when SIGTERM or Ctrl-C stops it: #23), the files and the
terminal summary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pytest

from .declare import settings
from .gate.scope import Recorder, folders_of, split_of, stopped_of
from .torchside import timeout

if TYPE_CHECKING:  # imported where used: a run without --export-check loads none of them
    from .declare.case import Case
    from .declare.options import CaseOptions, SessionOptions
    from .report.run import RunReport
    from .results import CaseResult
    from .declare.variants import Variant

SESSION_KEY = pytest.StashKey["ExportSession"]()
SPLIT_SETUP_TEARDOWN_LIMIT = 600  # seconds: pytest-split drops a longer setup or teardown (a frozen clock's, freezegun)


def session_of(config: pytest.Config) -> ExportSession:
    return config.stash[SESSION_KEY]


class ExportSession:
    """Registered as a plugin object per config, so its hooks see this session only."""
    def __init__(self, config: pytest.Config, is_case: Callable[[pytest.Item], bool] = lambda item: False):
        self.config = config
        self.check: bool = settings.value(config, "export_check")
        self._options: SessionOptions | None = None
        self.summary = settings.value(config, "export_summary")  # "" where not given: -q decides (summary_mode)
        if self.check or settings.any_given(config):
            self.options  # noqa: B018 - a bad option value is a usage error now, not at first use
        self.cases: dict[str, dict[str, Any]] = {}
        self.pending: dict[str, dict[str, Any]] = {}  # marked cases whose setup ran (to report a crash)
        self.session_data: dict[str, Any] = {}
        self.durations: dict[str, float] = {}  # seconds per test id, as pytest-split's --store-durations counts them
        self.recorder = Recorder(is_case)  # what the run covers, for both gates (#24)
        self.run_report: RunReport | None = None  # what the controller of an --export-check run writes
        if self.check and not self.is_worker:
            from .report.run import RunReport

            settings.check_outputs(self.options)  # a path it cannot write to is a usage error now, not at its end
            self.run_report = RunReport(config, self.options, self.summary)
        self._baseline = None
        self._torch_ready = False
        self._cuda: bool | None = None
        self._tmp_factory: pytest.TempPathFactory | None = None
        self._run_tmp: Path | None = None
        if self.check and self.options.baseline:
            self.baseline  # noqa: B018 - a missing or broken baseline is a usage error before any case runs (#17)

    @property
    def options(self) -> SessionOptions:
        """The session's options, parsed on first use: a run without the plugin's options never imports them."""
        if self._options is None:
            self._options = settings.read_session_options(self.config)
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
        from .declare.variants import variants

        return variants(self.options.modes, self.options.devices, self.cuda_available)

    def run_tmp_dir(self) -> Path:
        """A temp dir of this run (pytest's basetemp; per worker under xdist) for caches shared by its cases.

        Made from the ``tmp_path_factory`` fixture that the case's item handed to ``run``: pytest's public way
        to a session-wide temp dir (its ``config._tmp_path_factory`` is private)."""
        if self._run_tmp is None:
            if self._tmp_factory is None:
                raise RuntimeError("run_tmp_dir() is only available while ExportSession.run() runs a case")
            self._run_tmp = self._tmp_factory.mktemp("pytest-export")
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

    def build_case(self, where: str, value: Any) -> Case:
        self._ready()
        from .declare.case import Case

        return Case.from_return(where, value)

    def smoke(self, where: str, case: Case, dynamic_shapes: Any = None) -> list[str]:
        """Without --export-check: the declaration is checked against the case (keys, axes, ranges, examples),
        and eager forward runs once; nothing is exported (#17). Returns its warnings (the item attributes them)."""
        from .declare.options import UsageError
        from .declare.shapes import parse
        from .torchside.frames import located
        from .runner import describe_exception, smoke

        found: list[str] = []
        try:  # failed `from None`: each message once, no "During handling of the above exception" (#26)
            parse(where, dynamic_shapes, case.module, case.args, case.kwargs)
        except UsageError as exc:
            raise pytest.fail.Exception(str(exc), pytrace=False) from None
        except Exception as exc:  # noqa: BLE001 - the harness's own limit: said, never passed over in silence
            found.append(f"{where}: dynamic_shapes not checked: the harness could not read the declaration "
                         f"({describe_exception(exc)}); --export-check ends guards and fuzz as error for it")
        try:
            smoke(case)
        except Exception as exc:  # the model's frames shown, as pytest shows a test's
            text = located(f"{where}: eager forward raised on the example inputs: {describe_exception(exc)}", exc)
            raise pytest.fail.Exception(text, pytrace=False) from None
        return found

    def run(self, nodeid: str, case: Case, keywords: dict[str, Any], workdir: Path, *, device: str = "cpu",
            tmp_factory: pytest.TempPathFactory) -> CaseResult:
        """Run one case as ``api.run`` does; a failed export known or expected goes undiagnosed (``gate``: #26)."""
        self._ready()
        self._tmp_factory = self._tmp_factory or tmp_factory
        from .api import run
        from .gate.judge import diagnosis_skipped
        from .report.progress import Progress

        def prepare(options: CaseOptions) -> None:
            options.diagnose_skipped = diagnosis_skipped(nodeid, options, self.baseline, self.options,
                                                         self.torch_version())
            options.diagnose = options.diagnose and not options.diagnose_skipped

        with Progress.of(self.config, self.summary).case(nodeid) as progress:  # the stage a long case is in (#31)
            return run(case, keywords, nodeid=nodeid, options=self.options, workdir=workdir, device=device,
                       session=self, prepare=prepare, progress=progress)

    # ---- the gate (the baseline is read on every process: workers judge their own cases) -----------
    @property
    def baseline(self):
        if self._baseline is None and self.check and self.options.baseline:
            from .declare.options import UsageError
            from .gate import baseline as bl

            try:
                self._baseline = bl.load(self.options.baseline, missing_ok=self.options.baseline_update)
            except UsageError as exc:
                raise pytest.UsageError(str(exc))
        return self._baseline

    def gate(self, result: CaseResult) -> tuple[str, str]:
        """What the item does with its result: ``("fail" | "xfail" | "warn" | "pass", text)`` (see ``gate.judge``)."""
        from .gate.judge import judge

        return judge(result, self.baseline, self.options)

    # ---- the controller's report: case lines as cases end, files and summary at the end (issue #23) ------
    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.run_report is not None:
            self.run_report.start()

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter describes it
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if self.run_report is not None:
            self.run_report.drop_lineless_frames(excinfo.value)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.run_report is not None:
            self.run_report.close()

    # ---- the run's scope (issue #24): what pytest selected, left out, skipped and marked xfail -----------
    @pytest.hookimpl
    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """-k, -m, --export-tags, a conftest, any plugin, pytest-split: these tests did not run, so their baseline
        entries are neither stale nor pruned (issue #19)."""
        self.recorder.deselect(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> Any:
        """--ignore, --ignore-glob, a conftest's collect_ignore, norecursedirs: no test there is gone."""
        ignored = yield
        if ignored and self.check:
            self.recorder.ignore(collection_path, config.rootpath)
        return ignored

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A file that cannot be imported, or one a module-level importorskip skipped."""
        self.recorder.collect_report(report)

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.check:
            self.recorder.collected(session.items)

    # ---- collecting results (controller side; under xdist the reports arrive from workers) ----
    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.count_duration(report)
        self.recorder.test_report(report)
        marked = getattr(report, "export_case", None)
        if marked and report.when == "setup":
            self.pending[report.nodeid] = marked
            if self.run_report is not None:
                self.run_report.started(report.nodeid)
        results = getattr(report, "export_results", None)
        if results and report.when == "call":
            from .gate.verdicts import settle

            settle(results, report)  # what pytest reported for the item, and why (#26)
            for r in results:
                self.record(r)
            return
        if report.failed and report.nodeid in self.pending and report.nodeid not in self.cases:
            # a worker that died mid-case (xdist reports it with when="???"), or a fixture that failed
            why = "the worker running it crashed" if report.when not in ("setup", "call", "teardown") \
                else f"{report.when} failed"
            text = str(report.longrepr).strip().splitlines()
            from .gate.verdicts import reported
            from .results import ERROR, CaseResult

            self.record({**CaseResult(
                report.nodeid, outcome=ERROR, tags=list(self.pending[report.nodeid].get("tags", [])),
                error=f"{report.nodeid}: {why}: {text[-1] if text else ''}".rstrip(": "),
            ).to_json(), "item": reported(report), "verdict": "error"})
        if report.when not in ("setup", "call") and self.run_report is not None:  # teardown, or its worker's crash
            self.run_report.ended(report.nodeid, self.durations.get(report.nodeid))

    def record(self, case: dict[str, Any]) -> None:
        """A case's result: kept for the report and, on the controller, written to the case lines at once."""
        self.cases[case["nodeid"]] = case
        if self.run_report is not None:
            self.run_report.recorded(case, self.recorder.xfail)

    def count_duration(self, report: pytest.TestReport) -> None:
        """A test's wall time as pytest-split records it in ``.test_durations`` (issue #19): its setup, call and
        teardown reports' durations added up, leaving out a setup or teardown over ten minutes as it does."""
        if not self.check or self.is_worker or report.duration < 0:
            return
        if report.when in ("setup", "teardown") and report.duration > SPLIT_SETUP_TEARDOWN_LIMIT:
            return
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + report.duration

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
        self.recorder.merge(data.get("scope"))
        self.session_data.setdefault("op_facts", {}).update(data.get("op_facts") or {})

    def local_session_data(self) -> dict[str, Any]:
        """Torch facts of this process for the cases it ran (JSON-able; shipped from workers)."""
        if not self.cases or "torch" not in sys.modules:
            return {}
        from .torchside.ops import countable_core_ops, op_facts

        ops = {op for c in self.cases.values() for key in ("ops_before", "ops_after")
               for op in (c.get("stages", {}).get("decomp") or {}).get(key) or []}
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
        if self.run_report is not None:
            self.run_report.release_sigterm()
        if self.is_worker:
            if self.check:
                # execnet sends builtin types only: anything else crashes the worker here, at session end
                # xdist's controller collects nothing: only its workers see selection, deselection, ignored paths
                data = {**self.local_session_data(), "scope": self.recorder.worker_data()}
                self.config.workeroutput["pytest_export"] = to_builtins(data)
                timeout.ignore_shutdown_interrupt()  # sent next, by xdist: nothing left to stop (#32)
            return
        if self.run_report is None:
            return
        data = self.full_data()
        for nodeid, seconds in self.durations.items():
            if nodeid in self.cases:  # an item's first case carries its test id (a second export_check call: #2)
                self.cases[nodeid]["duration"] = round(seconds, 6)
        scope = self.recorder.scope(folders_of(self.config), split_of(self.config),
                                    stopped_of(session, self.recorder.errors))  # read by both gates (#24)
        self.run_report.finish(session, self.cases, data, scope, self.baseline, self.torch_version())

    def torch_version(self) -> str | None:
        if self.session_data.get("torch"):
            return self.session_data["torch"]
        torch = sys.modules.get("torch")
        if torch is None and self.cases:
            import torch  # noqa: F811
        version = getattr(torch, "__version__", None) if torch else None
        return str(version) if version is not None else None  # a TorchVersion (str subclass) is no builtin

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.run_report is not None:
            self.run_report.terminal(terminalreporter, list(self.cases.values()),
                                     self.full_data() if self.cases else {}, config.getoption("verbose"))


def to_builtins(value: Any, where: str = "workeroutput") -> Any:
    """``value`` as exact builtin types, for xdist's ``workeroutput`` (see ``results.to_builtins``)."""
    from .results import to_builtins as builtins

    return builtins(value, where)


__all__ = ["ExportSession", "SESSION_KEY", "session_of", "to_builtins"]
