"""torch's own log records, made safe to emit under pytest's log capture.

torch 2.13's ``torch.export.load`` logs "Fallback to weights_only=False succeeded. Loaded object of type %s after
initial failure: %s" with one argument (``torch/_export/serde/serialize.py``) whenever the saved example inputs
hold a namedtuple or a dataclass. Plain logging prints "--- Logging error ---" and carries on; pytest's log
capture re-raises, so the load fails with "TypeError: not enough arguments for format string" although the
program loads fine. The record is repaired (its text kept) and the defect noted as a warning of the case.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

SERDE_LOGGERS = ("torch._export.serde.serialize",)


class _RepairMalformed(logging.Filter):
    def __init__(self, found: list[str]):
        super().__init__()
        self.found = found

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.getMessage()
        except Exception as exc:  # noqa: BLE001 - any formatting error is the record's, never the stage's
            text = f"{record.msg} (args: {record.args!r})"
            note = f"torch logged a malformed record from {record.name} ({type(exc).__name__}: {exc}): {text}"
            if note not in self.found:
                self.found.append(note)
            record.msg, record.args = text, ()
        return True


@contextlib.contextmanager
def repaired_torch_logs(found: list[str], names: tuple[str, ...] = SERDE_LOGGERS) -> Iterator[None]:
    """While active, a record from ``names`` that cannot be formatted is repaired and described in ``found``."""
    flt = _RepairMalformed(found)
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)




@contextlib.contextmanager
def quiet_trace_logs():
    """torch.export logs structured-trace records at DEBUG; keep them out of pytest's captured log.

    torch's own logging set-up makes this logger non-propagating, but only once it first runs, which can be
    in the middle of the first export; set the intended state up front. pytest (9) also attaches its capture
    handlers to every non-propagating logger directly. torch builds a trace record (graph dumps, stacks)
    whenever the logger has any handler, so those handlers are detached while a case runs: no record is
    built for nobody. torch's own trace handlers (``TORCH_TRACE``; draft_export adds its own) stay.
    """
    # private: torch's trace handler class has no public name, and it is the one handler that must stay
    from torch._logging._internal import LazyTraceHandler

    logger = logging.getLogger("torch.__trace")
    logger.propagate = False
    detached = [h for h in logger.handlers if not isinstance(h, LazyTraceHandler)]
    for h in detached:
        logger.removeHandler(h)
    try:
        yield
    finally:
        for h in detached:
            if h not in logger.handlers:
                logger.addHandler(h)


@contextlib.contextmanager
def quiet_fake_logs():
    """A fake-tensor run that raises (a probe at sizes the model rejects) logs the meta kernel's traceback at
    ERROR before it raises; the probe's verdict carries the error, so the record is noise in the user's log."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was


__all__ = ["repaired_torch_logs", "quiet_trace_logs", "quiet_fake_logs"]
