"""Work whose memory must go back when it ends, run in a forked child held to the memory cap (issue #42).

ExecuTorch's lowering of a BERT-base program grew the process by 0.78 GB, and about 0.5 GB of it stayed after
every Python object of it was gone (held by the allocator: ``malloc_trim`` gave none of it back), so the runtime's
own plan then came on top of it. Forked, the child shares the parent's pages (the weights, torch) copy-on-write: it
pays only for what it makes, and all of it goes back when it exits.

``in_child(fn, cap, seconds, what)`` runs ``fn()`` in the child and returns what it returned (JSON through a pipe:
the package unpickles nothing, so ``fn`` returns builtins). The child's own memory (its private pages: what it made or wrote) is watched while it runs: past ``cap`` it
is killed and the work is an error naming ``--export-max-memory`` (the harness could not decide; the machine is
never run past the cap). A ``StageFailure`` or ``HarnessError`` it raises is raised again here; anything else
it raises, or its death, is a ``HarnessError`` that says what it was doing. Past ``seconds`` of its CPU time (or
of wall time spent waiting without working, as every limit counts: ``timeout``) it is killed, so its time is
bounded even where the case has no time limit, and the load of the machine decides nothing. Where ``os.fork`` is missing, ``fn`` runs in-process.

torch is imported where it is used; nothing here knows about stages or pytest.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import time
import warnings
from typing import Any, Callable

from ..context import StageFailure
from ..memory.cost import format_bytes
from ..results import HarnessError
from ..torchside.timeout import WAITING_SHARE
from ..util import describe_exception

POLL_S = 0.05  # how often the child's memory is read: a page-granular watch, 20 times a second


def private_bytes(pid: int) -> int | None:
    """The pages ``pid`` owns alone (``Private_Clean`` + ``Private_Dirty``): what a forked child made or wrote,
    not the parent's pages it still shares. None where the kernel does not say (no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith(("Private_Clean", "Private_Dirty")))
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds_of(pid: int) -> float | None:
    """The CPU time (user and system) process ``pid`` has used so far; None where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command's name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _over(pid: int, seconds: float, wall: float) -> str:
    """Why the child has run past ``seconds`` ("" where it has not): its CPU time, as every limit counts
    (``timeout``: the same on an idle and a loaded machine), or its wall time where it waits without working."""
    cpu = cpu_seconds_of(pid)
    if cpu is None:
        return f"did not finish in {seconds:.0f} s" if wall > seconds else ""
    if cpu >= seconds:
        return f"used {seconds:.0f} s of CPU time without finishing"
    if wall >= seconds and cpu < WAITING_SHARE * wall:
        return f"waited {wall:.0f} s without working ({cpu:.2g} s of CPU time: a lock or a hang)"
    return ""


class Watched:
    """What ``in_child`` saw of the child: its private memory's peak (``peak``, bytes) and its time."""

    def __init__(self) -> None:
        self.peak = 0
        self.seconds = 0.0


def in_child(fn: Callable[[], Any], cap: int, seconds: float, what: str, watched: Watched | None = None) -> Any:
    """``fn()`` run in a forked child under ``cap`` bytes of its own memory and ``seconds`` of time (module doc)."""
    watched = watched if watched is not None else Watched()
    if not hasattr(os, "fork"):
        return fn()
    read, write = os.pipe()
    # the parent's objects out of the collector's reach: a collection in the child would write to every one of them
    # and copy every page they are on (``gc.freeze``'s purpose)
    gc.freeze()
    pid = -1
    try:
        with warnings.catch_warnings():  # Python 3.12 warns of forking with threads: the child runs only this thread
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    finally:
        if pid != 0:
            gc.unfreeze()
    if pid == 0:  # the child: never returns into the parent's code (no atexit, no pytest finalizers)
        os.close(read)
        status = 0
        try:
            _child(fn, write)
        except BaseException:  # noqa: BLE001 - the parent reads what happened from the pipe's end
            status = 1
        finally:
            os._exit(status)
    os.close(write)
    t0 = time.monotonic()
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([read], [], [], POLL_S)
            if ready:
                chunk = os.read(read, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            mine = private_bytes(pid) or 0
            watched.peak = max(watched.peak, mine)
            if mine > cap:
                raise HarnessError(f"{what} needed more than max_memory {format_bytes(cap)} (it had reached "
                                   f"{format_bytes(mine)} when it was stopped); raise --export-max-memory "
                                   "(max_memory=) to check it")
            over = _over(pid, seconds, time.monotonic() - t0)
            if over:
                raise HarnessError(f"{what} {over}; it was stopped")
    finally:
        watched.seconds = time.monotonic() - t0
        os.close(read)
        _reap(pid)
    return _result(b"".join(chunks), what)


def _child(fn: Callable[[], Any], write: int) -> None:
    try:
        import torch

        torch.set_num_threads(1)  # the parent's OpenMP pool does not survive a fork: one thread, as DataLoader's workers
    except ImportError:
        pass
    try:
        out: tuple = ("ok", fn())
    except StageFailure as exc:
        out = ("failure", str(exc), exc.kind, exc.data)
    except HarnessError as exc:
        out = ("harness", str(exc))
    except BaseException as exc:  # noqa: BLE001 - told to the parent as what the child was doing went wrong
        out = ("raised", describe_exception(exc, 1500))
    try:
        blob = json.dumps(out).encode()
    except Exception as exc:  # noqa: BLE001 - a result that cannot travel is the harness's own error
        blob = json.dumps(("raised", f"its result could not be sent back: {describe_exception(exc, 300)}")).encode()
    view = memoryview(blob)
    while view:
        view = view[os.write(write, view):]
    os.close(write)


def _reap(pid: int) -> None:
    """The child waited for; killed first where it is still running (the parent left early: a limit, a timeout)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _result(blob: bytes, what: str) -> Any:
    if not blob:
        raise HarnessError(f"{what} ended without a result (the child process died: out of memory, or a crash in "
                           "native code)")
    out = json.loads(blob)
    if out[0] == "ok":
        return out[1]
    if out[0] == "failure":
        raise StageFailure(out[1], kind=out[2], **out[3])
    if out[0] == "harness":
        raise HarnessError(out[1])
    raise HarnessError(f"{what} raised {out[1]}")


__all__ = ["in_child", "private_bytes", "Watched"]
