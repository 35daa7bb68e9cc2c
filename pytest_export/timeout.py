"""A per-case time limit (``--export-timeout``): a hanging export or check is stopped and reported."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class CaseTimeout(BaseException):
    """Raised inside the running stage when the case's time is up.

    A BaseException, so that ``except Exception`` in model or torch code cannot swallow it.
    """


def supported() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[bool]:
    """Raise CaseTimeout in this thread after ``seconds``; yields whether the limit is enforced."""
    if not seconds or seconds <= 0 or not supported():
        yield False
        return

    def on_alarm(signum, frame):
        raise CaseTimeout(f"exceeded the time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay:
            signal.setitimer(signal.ITIMER_REAL, old_delay, old_interval)
