"""Which stage a long case is in, on the terminal while it runs (issue #31).

``ExportSession.run`` hands ``Progress.case(nodeid)`` to the runner, which calls it before each stage starts and
once when the case ends. Under ``-v`` each stage gets a line as it starts; at the default verbosity on a terminal,
a case that has run ``PROGRESS_AFTER`` seconds shows a status at the end of the dots line, written past pytest's
own bookkeeping of that line and erased (backspaces, blanks) before the next stage and when the case ends, so the
dots line goes on as if nothing had been there. ``-q``, ``--export-summary=off``, output that is not a terminal
(without ``-v``), ``-s`` and xdist workers show nothing.

Writes go through pytest's terminal reporter inside ``capman.global_and_fixture_disabled()``, as pytest's live
logging does. Loaded only where a case runs under ``--export-check``; imports no torch and nothing of this package.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator

import pytest

PROGRESS_AFTER = 3.0  # seconds a case runs before its live status shows on a terminal
AFTER_ENV = "PYTEST_EXPORT_PROGRESS_AFTER"  # overrides PROGRESS_AFTER (seconds), read when the session starts
_KEY = pytest.StashKey["Progress"]()


def threshold() -> float:
    """``PROGRESS_AFTER``, or the seconds ``$PYTEST_EXPORT_PROGRESS_AFTER`` gives (ignored where not a number >= 0)."""
    try:
        seconds = float(os.environ.get(AFTER_ENV, ""))
    except ValueError:
        return PROGRESS_AFTER
    return seconds if seconds >= 0 else PROGRESS_AFTER  # NaN compares false: the default too


def short_name(nodeid: str) -> str:
    """The test id without its folders: ``tests/models/test_x.py::test_bert`` -> ``test_x.py::test_bert``."""
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


def describe(name: str, stage: str, elapsed: float) -> str:
    """``export-check test_x.py::test_bert: guards (after 12.3 s)``: the stage that starts, and when."""
    return f"export-check {name}: {stage} (after {elapsed:.1f} s)"


def status_line(name: str, stage: str, elapsed: float, room: int) -> str:
    """The live status put after the dots, at most ``room`` columns wide (one ASCII character a column), its
    leading blank included: the case's name is cut from the left (``...``) where the whole does not fit, and
    where not even the stage fits there is no status (``""``)."""
    name = name.encode("ascii", "replace").decode("ascii")
    text = " " + describe(name, stage, elapsed)
    if len(text) <= room:
        return text
    tail = " " + describe("...", stage, elapsed)
    keep = room - len(tail)
    if keep <= 0:
        return ""
    return " " + describe("..." + name[len(name) - keep:], stage, elapsed)


def mode(config: pytest.Config, summary: str) -> str | None:
    """``"lines"`` (``-v``: a line per stage), ``"live"`` (a terminal: the status after the dots) or ``None``."""
    if hasattr(config, "workerinput") or summary == "off" or config.get_verbosity() < 0:
        return None
    if config.pluginmanager.get_plugin("terminalreporter") is None:  # -p no:terminal
        return None
    if config.get_verbosity() >= 1:
        return "lines"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    tty = reporter.isatty() if callable(reporter.isatty) else reporter.isatty  # a bool before pytest 8.1
    # -s: the test's own output reaches the terminal between two of our writes; erasing would cut it
    return "live" if tty and config.getoption("capture", "fd") != "no" else None


class Progress:
    """The progress display of one pytest run (``Progress.of(config, summary)``: one per config)."""

    def __init__(self, config: pytest.Config, summary: str):
        self.config = config
        self.mode = mode(config, summary)
        self.after = threshold()
        self.shown = 0  # columns of the live status now after the dots (0: none)

    @classmethod
    def of(cls, config: pytest.Config, summary: str) -> Progress:
        if _KEY not in config.stash:
            config.stash[_KEY] = cls(config, summary)
        return config.stash[_KEY]

    @contextlib.contextmanager
    def case(self, nodeid: str) -> Iterator[Callable[[str, float], None] | None]:
        """The runner's ``progress`` callback for one case (``None`` where nothing is shown); the live status is
        gone when the block ends, however it ends (a Ctrl-C included)."""
        if self.mode is None:
            yield None
            return
        name = short_name(nodeid)

        def progress(stage: str, elapsed: float) -> None:
            with self._uncaptured():
                if self.mode == "lines":
                    if stage:
                        self._reporter().write_line("    " + describe(name, stage, elapsed))
                        self._reporter().flush()
                    return
                self._erase()
                if stage and elapsed >= self.after:
                    self._show(status_line(name, stage, elapsed, self._room()))

        try:
            yield progress
        finally:
            if self.shown:
                with self._uncaptured():
                    self._erase()

    def _reporter(self) -> Any:
        return self.config.pluginmanager.get_plugin("terminalreporter")

    def _uncaptured(self) -> contextlib.AbstractContextManager[Any]:
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        return capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()

    def _room(self) -> int:
        """Columns left on the current line, the last one kept free (a write there wraps on some terminals)."""
        tw = self.config.get_terminal_writer()
        used = tw.width_of_current_line
        return 0 if used < 0 else tw.fullwidth - used - 1  # -1: a control character on the line, width unknown

    def _show(self, text: str) -> None:
        """Raw writes: pytest's terminal writer keeps counting the dots line as it was (its width places the
        ``[ 40%]`` at the end of the line)."""
        if not text:
            return
        tw = self.config.get_terminal_writer()
        tw.write_raw(tw.markup(text, cyan=True), flush=True)
        self.shown = len(text)

    def _erase(self) -> None:
        if self.shown:
            back = "\b" * self.shown
            self.config.get_terminal_writer().write_raw(back + " " * self.shown + back, flush=True)
            self.shown = 0


__all__ = ["Progress", "PROGRESS_AFTER", "AFTER_ENV", "threshold", "short_name", "describe", "status_line", "mode"]
