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


__all__ = ["repaired_torch_logs", "SERDE_LOGGERS"]
