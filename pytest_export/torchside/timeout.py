"""Time limits: the per-case one (``--export-timeout``), and the inner ones a case sets on a part of itself (one
numeric probe, the ``draft_export`` diagnosis). A hanging export or check is stopped and reported.

A limit counts the process's own CPU time (every thread of it), not the wall clock (issue #51): the same work
reaches it at the same point on an idle machine and on a loaded one, so no verdict depends on the load. A block
that waits instead of working (a sleep, a lock, a hang: under a tenth of one core over its whole time) is stopped
once its wall time reaches the limit too, so no limit is ever unbounded.

Limits nest: an inner limit raises its own exception (``Expired`` with a label, unless told otherwise) and,
when it ends, the outer limit's alarm is put back with the time the inner block took taken off it, so an inner
limit never lengthens the case's.

On the main thread an alarm (SIGALRM) enforces a limit. Where none can (another thread, a platform without
SIGALRM) the limit is checked at the harness's checkpoints (issue #32): ``checkpoint()``, called before every
forward call the harness makes (``observe``) and every fuzz example, raises the limit's exception once it has run
out, so no limit is silently off. ``in_thread`` runs a part of a case on a thread of its own under the caller's
limits and tells it to stop when the caller leaves early: it stops at its next checkpoint, and a thread still
inside one long call after a short grace is named. (Not CPython's asynchronous exceptions: on Python 3.11 one
aimed at a thread leaves the interpreter's eval breaker set for every thread, which made later Hypothesis
searches crawl.)
"""

from __future__ import annotations

import contextlib
import os
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
    """Whether an alarm can enforce a limit here (SIGALRM, the main thread); elsewhere ``checkpoint`` does."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


WAITING_SHARE = 0.1  # a block that used under this share of one core over its whole wall time is waiting, not working
MIN_CHECK_S = 0.05  # the shortest wait between two looks at a limit's clocks


def cpu_seconds() -> float:
    """The process's CPU time so far, every thread's (what a limit counts)."""
    return time.process_time()


class _Limit:
    """One running limit of ``seconds``: its starts on both clocks, the exception class it raises, and whether the
    thread it holds was told to stop (its caller left: ``in_thread``)."""

    def __init__(self, seconds: float, error: Callable[[str], BaseException],
                 starts: tuple[float, float] | None = None):
        self.seconds = seconds
        self.starts = starts or (cpu_seconds(), time.monotonic())
        self.error = error
        self.stopped = False

    def used(self) -> tuple[float, float]:
        """(CPU seconds, wall seconds) since the limit began."""
        return cpu_seconds() - self.starts[0], time.monotonic() - self.starts[1]

    def expired(self) -> str:
        """Why the limit has run out ("" where it has not): its CPU time used, or its wall time spent waiting."""
        cpu, wall = self.used()
        if cpu >= self.seconds:
            return f"exceeded the time limit of {self.seconds:g} s: used {self.seconds:g} s of CPU time"
        if wall >= self.seconds and cpu < WAITING_SHARE * wall:
            return (f"exceeded the time limit of {self.seconds:g} s waiting (wall time, {cpu:.2g} s of CPU: a sleep, "
                    "a lock or a hang)")
        return ""

    def left(self) -> float:
        """CPU seconds left to the limit."""
        return self.seconds - self.used()[0]

    def next_look(self) -> float:
        """Wall seconds until the limit could first run out: its CPU time at most every core's rate, its waiting
        time once the wall clock reaches it."""
        cpu, wall = self.used()
        ahead = (self.seconds - cpu) / max(1, os.cpu_count() or 1)
        ahead = min(ahead, self.seconds - wall) if wall < self.seconds else min(ahead, max(1.0, self.seconds / 8))
        return max(MIN_CHECK_S, ahead)


_ALARMS: list[_Limit] = []  # the main thread's limits an alarm enforces, outermost first (``in_thread`` carries them)
_local = threading.local()  # ``watched``: this thread's limits ``checkpoint`` enforces, outermost first


def _watched() -> list[_Limit]:
    if not hasattr(_local, "watched"):
        _local.watched = []
    return _local.watched


def checkpoint() -> None:
    """Raise the exception of this thread's first limit that ran out (outermost first, as an enclosing alarm that
    ends first fires), or ``CaseEnded`` where the caller of ``in_thread`` has left; nothing where no checked limit
    holds this thread (the main thread's alarms raise by themselves)."""
    for limit in list(getattr(_local, "watched", ())):
        if limit.stopped:
            raise CaseEnded()
        why = limit.expired()
        if why:
            raise limit.error(why)


@contextlib.contextmanager
def _checked(limit: _Limit) -> Iterator[None]:
    stack = _watched()
    stack.append(limit)
    try:
        yield
    finally:
        stack.remove(limit)


@contextlib.contextmanager
def time_limit(seconds: float | None,
               error: Callable[[str], BaseException] = CaseTimeout) -> Iterator[bool]:
    """Raise ``error(text)`` in this thread once it has used ``seconds`` of CPU time, or spent them waiting
    (``_Limit.expired``); yields whether the limit is enforced (by an alarm that looks at both clocks on the main
    thread, at the harness's checkpoints elsewhere; False only for no limit).

    Inside an enclosing limit that ends first, the enclosing one fires (its own exception), not this one."""
    if not seconds or seconds <= 0:
        yield False
        return
    if not supported():
        with _checked(_Limit(seconds, error)):
            yield True
        return
    mine = _Limit(seconds, error)

    def on_alarm(signum, frame):
        why = mine.expired()
        if why:
            raise error(why)
        signal.setitimer(signal.ITIMER_REAL, mine.next_look())  # working, on a busy machine: look again later

    start = time.monotonic()
    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    if _ALARMS and _ALARMS[-1].left() <= seconds:
        yield True  # the enclosing limit of ours ends first: it stays in charge
        return
    if old_delay and not _ALARMS and old_delay <= seconds:
        yield True  # another alarm (pytest-timeout's) ends first: it stays in charge
        return
    previous = signal.getsignal(signal.SIGALRM)
    try:
        # inside the try: an enclosing alarm that fires between these two calls still gets its handler back
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, mine.next_look())
        _ALARMS.append(mine)
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if mine in _ALARMS:
            _ALARMS.remove(mine)
        if old_delay:
            left = old_delay - (time.monotonic() - start)
            if left <= 0:
                # the enclosing alarm was due while this one was in charge: it looks now (ours raise or look again
                # later; another's raises), as its alarm would have
                previous(signal.SIGALRM, None) if callable(previous) else None
            else:
                signal.setitimer(signal.ITIMER_REAL, left, old_interval)


class CaseEnded(CaseTimeout):
    """Raised in a thread of ``in_thread`` whose caller has left: the case it worked for has ended."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the case this thread worked for has ended",)))


def in_thread(work: Callable[[], None], name: str, grace: float = 2.0,
              left: Callable[[str], None] | None = None) -> None:
    """Run ``work`` on a daemon thread of its own, under every time limit of the caller (checked at its
    checkpoints), and raise what it raised. A caller that leaves while it waits (its own limit ran out, Ctrl-C)
    tells the thread to stop (``CaseEnded`` at its next checkpoint) and waits up to ``grace`` seconds for it;
    ``left(text)`` hears of a thread still running after that (inside one long call)."""
    carried = [_Limit(lim.seconds, lim.error, starts=lim.starts)
               for lim in [*(_ALARMS if supported() else ()), *_watched()]]
    outcome: list[BaseException] = []
    done = threading.Event()  # not Thread.join: a join a signal interrupts marks the thread stopped (Python 3.11)

    def target() -> None:
        _local.watched = list(carried)
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            outcome.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        done.wait()
    except BaseException:
        for limit in carried:
            limit.stopped = True
        if not done.wait(grace) and left is not None:
            left(f"the thread {name!r} was still running {grace:g} s after it was told to stop (inside one long call); "
                 "it stops at its next checkpoint")
        raise
    if outcome:
        raise outcome[0]


def ignore_shutdown_interrupt() -> None:
    """An xdist worker whose results are sent ignores SIGINT from then on (issue #32). The controller closes a
    finished worker's gateway, and execnet sends SIGINT to a worker still tearing down 5 s later: it lands in
    whatever finalizer pytest's last garbage collection runs, and a green run prints a
    ``PytestUnraisableExceptionWarning`` with a ``KeyboardInterrupt``. A worker stuck past that is still ended by
    execnet (``os._exit`` 10 s later); a Ctrl-C before the results are sent still stops the worker."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
