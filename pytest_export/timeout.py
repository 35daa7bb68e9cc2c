"""Time limits: the per-case one (``--export-timeout``), and the inner ones a case sets on a part of itself (one
numeric probe, the ``draft_export`` diagnosis). A hanging export or check is stopped and reported.

Limits nest: an inner limit raises its own exception (``Expired`` with a label, unless told otherwise) and,
when it ends, the outer limit's alarm is put back with the time the inner block took taken off it, so an inner
limit never lengthens the case's.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Callable, Iterator


class CaseTimeout(BaseException):
    """Raised inside the running stage when the case's time is up.

    A BaseException, so that ``except Exception`` in model or torch code cannot swallow it.
    """


class Expired(BaseException):
    """An inner limit ran out (a probe, the diagnosis): the caller that set it catches it and says what was cut."""


def supported() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float | None,
               error: Callable[[str], BaseException] = CaseTimeout) -> Iterator[bool]:
    """Raise ``error(text)`` in this thread after ``seconds``; yields whether the limit is enforced.

    Inside an enclosing limit that ends first, the enclosing one fires (its own exception), not this one."""
    if not seconds or seconds <= 0 or not supported():
        yield False
        return

    def on_alarm(signum, frame):
        raise error(f"exceeded the time limit of {seconds:g} s")

    start = time.monotonic()
    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    if old_delay and old_delay <= seconds:
        yield True  # the enclosing limit ends first: it stays in charge
        return
    previous = signal.getsignal(signal.SIGALRM)
    try:
        # inside the try: an enclosing alarm that fires between these two calls still gets its handler back
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if old_delay:
            left = old_delay - (time.monotonic() - start)
            if left <= 0:
                # the enclosing limit ran out while this one was in charge: raise it now, as its alarm would have
                previous(signal.SIGALRM, None) if callable(previous) else None
            else:
                signal.setitimer(signal.ITIMER_REAL, left, old_interval)
