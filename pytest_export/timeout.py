"""Time limits: the per-case one (``--export-timeout``), and the inner ones a case sets on a part of itself (one
numeric probe, the ``draft_export`` diagnosis). A hanging export or check is stopped and reported.

Limits nest: an inner limit raises its own exception (``Expired`` with a label, unless told otherwise) and,
when it ends, the outer limit's alarm is put back with the time the inner block took taken off it, so an inner
limit never lengthens the case's.

On the main thread an alarm (SIGALRM) enforces a limit. Where none can (another thread, a platform without
SIGALRM) a watchdog does (issue #32): a timer that raises the limit's exception in the limited thread when it runs
out (CPython's asynchronous exception, delivered, like the alarm's, at the thread's next Python instruction), so
no limit is silently off. ``in_thread`` runs a part of a case on a thread of its own under the caller's limits and
stops it when the caller leaves early: no work of a case outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
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
    """Whether an alarm can enforce a limit here (SIGALRM, the main thread); elsewhere a watchdog does."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def _async_exc() -> Callable[..., int] | None:
    return getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)


class _Limit:
    """One running limit: its deadline (``time.monotonic``) and the exception class it raises."""

    def __init__(self, seconds: float, error: Callable[[str], BaseException], at: float | None = None):
        self.seconds, self.at = seconds, time.monotonic() + seconds if at is None else at
        self.text = f"exceeded the time limit of {seconds:g} s"
        self.error = error
        self.fired = False

    def left(self) -> float:
        return self.at - time.monotonic()

    def exception_class(self) -> type[BaseException]:
        """A class whose instance made without arguments carries the text: an asynchronous exception is raised as
        ``cls()``."""
        base = self.error if isinstance(self.error, type) else type(self.error(self.text))
        text = self.text

        def __init__(exc: BaseException, *args: object) -> None:
            base.__init__(exc, *(args or (text,)))

        return type(base.__name__, (base,), {"__init__": __init__, "__module__": base.__module__,
                                             "__qualname__": base.__qualname__})


_ALARMS: list[_Limit] = []  # the main thread's limits an alarm enforces, outermost first (``in_thread`` carries them)
_local = threading.local()  # ``watched``: this thread's limits a watchdog enforces, outermost first
_LOCK = threading.Lock()


def _watched() -> list[_Limit]:
    if not hasattr(_local, "watched"):
        _local.watched = []
    return _local.watched


def _raise_in(ident: int, cls: type[BaseException] | None) -> None:
    """Raise ``cls`` in thread ``ident`` at its next Python instruction (None: drop one still pending)."""
    set_exc = _async_exc()
    if set_exc is not None:
        set_exc(ctypes.c_ulong(ident), ctypes.py_object(cls) if cls is not None else None)


@contextlib.contextmanager
def _watchdog(limit: _Limit) -> Iterator[None]:
    ident, stack = threading.get_ident(), _watched()

    def fire() -> None:
        with _LOCK:
            if limit in stack and not limit.fired:
                limit.fired = True
                _raise_in(ident, limit.exception_class())

    timer = threading.Timer(max(limit.left(), 0.0), fire)
    timer.daemon = True
    with _LOCK:
        stack.append(limit)
    timer.start()
    try:
        yield
    finally:
        with _LOCK:
            stack.remove(limit)
            if limit.fired:  # ended while its exception may still be pending: drop it, keep an outer one that fired
                _raise_in(ident, None)
                for outer in reversed(stack):
                    if outer.fired:
                        _raise_in(ident, outer.exception_class())
                        break
        timer.cancel()
        timer.join()


@contextlib.contextmanager
def time_limit(seconds: float | None,
               error: Callable[[str], BaseException] = CaseTimeout) -> Iterator[bool]:
    """Raise ``error(text)`` in this thread after ``seconds``; yields whether the limit is enforced (by the alarm on
    the main thread, by a watchdog elsewhere; False only where neither is possible).

    Inside an enclosing limit that ends first, the enclosing one fires (its own exception), not this one."""
    if not seconds or seconds <= 0:
        yield False
        return
    if not supported():
        if _async_exc() is None:
            yield False
            return
        with _watchdog(_Limit(seconds, error)):
            yield True
        return

    def on_alarm(signum, frame):
        raise error(f"exceeded the time limit of {seconds:g} s")

    start = time.monotonic()
    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    if old_delay and old_delay <= seconds:
        yield True  # the enclosing limit ends first: it stays in charge
        return
    previous = signal.getsignal(signal.SIGALRM)
    mine = _Limit(seconds, error)
    try:
        # inside the try: an enclosing alarm that fires between these two calls still gets its handler back
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
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
                # the enclosing limit ran out while this one was in charge: raise it now, as its alarm would have
                previous(signal.SIGALRM, None) if callable(previous) else None
            else:
                signal.setitimer(signal.ITIMER_REAL, left, old_interval)


class CaseEnded(CaseTimeout):
    """Raised in a thread of ``in_thread`` whose caller has left: the case it worked for has ended."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the case this thread worked for has ended",)))


def in_thread(work: Callable[[], None], name: str, grace: float = 2.0,
              left: Callable[[str], None] | None = None) -> None:
    """Run ``work`` on a daemon thread of its own, under every time limit of the caller (a watchdog's there), and
    raise what it raised. A caller that leaves while it waits (its own limit ran out, Ctrl-C) stops the thread first:
    ``CaseEnded`` is raised there, and the caller waits up to ``grace`` seconds for it to end; ``left(text)`` hears
    of a thread still running after that (stuck in one long call, it stops at its next Python instruction)."""
    carried = [_Limit(lim.seconds, lim.error, at=lim.at) for lim in [*(_ALARMS if supported() else ()), *_watched()]]
    outcome: list[BaseException] = []
    done = threading.Event()  # not Thread.join: a join a signal interrupts marks the thread stopped (Python 3.11)

    def target() -> None:
        try:
            with contextlib.ExitStack() as stack:
                if _async_exc() is not None:
                    for lim in carried:
                        stack.enter_context(_watchdog(lim))
                work()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            outcome.append(exc)
        finally:
            with _LOCK:  # told to stop as it ended: what is still pending is dropped
                done.set()
                _raise_in(threading.get_ident(), None)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        done.wait()
    except BaseException:
        for _ in range(3):  # raised again if it lands where the thread's own code swallows it
            with _LOCK:
                if not done.is_set():
                    _raise_in(thread.ident, CaseEnded)
            if done.wait(grace / 3):
                break
        if not done.is_set() and left is not None:
            left(f"the thread {name!r} was still running {grace:g} s after it was told to stop (inside one long call); "
                 "it stops at its next Python instruction")
        raise
    if outcome:
        raise outcome[0]
