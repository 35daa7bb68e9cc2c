"""What the controller of an ``--export-check`` run reports: the case lines beside ``--export-report`` as cases start
and end (#23), and at the end of the run the whole run's gate over the baseline (#24), the report's files and the
terminal summary. SIGTERM (a CI job's timeout) ends the run as Ctrl-C does, so that all of it is still written.

``session.ExportSession`` keeps the run's books (its cases, their durations, its scope, the workers' torch facts)
and hands them here; this module decides nothing about a case. The one module of ``report`` that imports pytest.
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any

import pytest

from ..gate.scope import Scope, empty_shard, interrupted

if TYPE_CHECKING:
    from ..declare.options import SessionOptions
    from ..gate.baseline import Baseline
    from .files import CaseLines


class RunReport:
    """The report of one ``--export-check`` run, made on its controller (never on an xdist worker)."""

    def __init__(self, config: pytest.Config, options: SessionOptions, summary: str):
        self.config = config
        self.options = options
        self.summary = summary  # --export-summary; "" where not given: -q decides (summary_mode)
        self.lines: CaseLines | None = None  # the case lines beside --export-report (#23)
        self.baseline_messages: list[str] = []
        self.notes: list[str] = []  # lines for the end of the terminal summary
        self._sigterm: tuple[Any] | None = None  # the handler SIGTERM had before this run's

    # ---- a run stopped from outside keeps what it found (issue #23) --------------------------------------
    def start(self) -> None:
        """SIGTERM ends the run as Ctrl-C does (a CI job's timeout sends it; pytest then finishes the session and
        writes the report), and the case lines are opened."""
        if threading.current_thread() is threading.main_thread():
            self._sigterm = (signal.signal(signal.SIGTERM, self.on_sigterm),)
        if self.options.report:
            from .files import CaseLines

            self.lines = CaseLines.for_session(self.options, self.config.invocation_params.args)

    def close(self) -> None:
        """SIGTERM put back and the case lines closed, also where the session ended before its sessionfinish."""
        self.release_sigterm()
        if self.lines is not None:
            self.lines.close()

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.release_sigterm()  # a second SIGTERM ends the process as it would without the plugin
        raise KeyboardInterrupt("SIGTERM: pytest-export ends the run as Ctrl-C does; the report keeps the cases "
                                "that finished and says it was interrupted")

    @staticmethod
    def drop_lineless_frames(exc: BaseException | None) -> None:
        """Frames Python gives no line (``tb_lineno`` None: an interrupt landing on an instruction that has none, as
        SIGTERM can in the middle of torch's tracing) unlinked from the interrupt's traceback and those it chains.
        pytest's account of the interrupt would crash on them, and the run end with exit status 1 instead of 2
        (interrupted) after its report was written. The first frame (pytest's own ``wrap_session``) keeps its line."""
        todo, seen = [exc], set()
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen:
                continue
            seen.add(id(e))
            tb = e.__traceback__
            while tb is not None and tb.tb_lineno is None:
                tb = tb.tb_next
            e.__traceback__ = tb
            while tb is not None:
                after = tb.tb_next
                while after is not None and after.tb_lineno is None:
                    after = after.tb_next
                tb.tb_next = after
                tb = after
            todo += [e.__cause__, e.__context__]

    def release_sigterm(self) -> None:
        """SIGTERM's handler put back as it was (unless someone replaced this run's since)."""
        if self._sigterm is not None and signal.getsignal(signal.SIGTERM) == self.on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._sigterm[0] is None else self._sigterm[0])
        self._sigterm = None

    # ---- the case lines, as cases start and end ----------------------------------------------------------
    def started(self, nodeid: str) -> None:
        if self.lines is not None:
            self.lines.start(nodeid)

    def recorded(self, case: dict[str, Any], xfail: dict[str, Any]) -> None:
        """A case's result, written at once (with its test's xfail mark, as ``scope.xfail`` has it: #32)."""
        if self.lines is not None:
            self.lines.case(case, xfail)

    def ended(self, nodeid: str, seconds: float | None) -> None:
        if self.lines is not None:
            self.lines.end(nodeid, seconds)

    # ---- the end of the run ------------------------------------------------------------------------------
    def finish(self, session: pytest.Session, cases: dict[str, dict[str, Any]], data: dict[str, Any], scope: Scope,
               baseline: Baseline | None, torch_version: str | None) -> None:
        """The whole run's gate over the baseline (rewritten in update mode; stale entries fail the run), an empty
        pytest-split group made a pass, the report's files written and the case lines closed."""
        from .files import unwritten, write_baseline, write_session

        listed = list(cases.values())
        problems: list[str] = []
        if self.options.baseline:
            from ..gate.judge import finish

            verdict = finish(baseline, listed, scope, self.options)
            if verdict.updated is not None:
                try:
                    write_baseline(self.options.baseline, verdict.updated)
                except OSError as exc:
                    problems.append(unwritten("--export-baseline", self.options.baseline, exc) + "; the baseline "
                                    "keeps its old entries")
            self.baseline_messages += verdict.messages
            if verdict.stale_fails and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        empty = empty_shard(scope, session.exitstatus)
        if empty:  # pytest-split left this group empty: nothing to check here, and no failure (#24)
            session.exitstatus = pytest.ExitCode.OK
            self.notes.append(empty)
        stopped = interrupted(scope, session.exitstatus)  # Ctrl-C, SIGTERM; no collection error (#32)
        problems += write_session(self.options, listed, data, torch_version, self.baseline_messages,
                                  unfinished=(self.lines.unfinished(cases) if self.lines else []) if stopped else None,
                                  scope=scope.to_json())
        if problems and session.exitstatus == pytest.ExitCode.OK:  # CI must not pass without the files it asked for
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.lines is not None:  # the case lines end as always: they hold the run where its report is missing
            self.lines.close(scope, exitstatus=int(session.exitstatus), interrupted=stopped, cases=len(listed))
            if any(p.startswith("--export-report ") for p in problems) and not self.lines.problem:
                problems.append(f"the case lines {self.lines.path} hold every case: python -m pytest_export "
                                "merge, gate and show read them")
        self.notes += [f"pytest-export: {p}" for p in problems]

    def terminal(self, terminalreporter: Any, cases: list[dict[str, Any]], data: dict[str, Any], verbose: int) -> None:
        """The end of the run as ``--export-summary`` asks (not given: one line when green; ``-q``: short)."""
        from .summary import summary_mode, terminal_parts

        mode = summary_mode(self.summary, verbose)
        parts = terminal_parts(mode, cases, data, verbose=verbose > 0, baseline=self.options.baseline,
                               messages=self.baseline_messages, report=self.options.report,
                               lines=str(self.lines.path) if self.lines else None)
        problem = [f"pytest-export: case lines: {self.lines.problem}"] if self.lines and self.lines.problem else []
        for title, text in [*parts, *((None, line) for line in [*problem, *self.notes])]:
            if title:
                terminalreporter.write_sep("=", title)
            terminalreporter.write_line(text)


__all__ = ["RunReport"]
