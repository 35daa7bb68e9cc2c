"""torch's own log records, made safe to emit under pytest's log capture; torch's output during a case, captured.

torch 2.13's ``torch.export.load`` logs "Fallback to weights_only=False succeeded. Loaded object of type %s after
initial failure: %s" with one argument (``torch/_export/serde/serialize.py``) whenever the saved example inputs
hold a namedtuple or a dataclass. Plain logging prints "--- Logging error ---" and carries on; pytest's log
capture re-raises, so the load fails with "TypeError: not enough arguments for format string" although the
program loads fine. The record is repaired (its text kept) and the defect noted as a warning of the case.

``captured_torch_output`` (issue #26) keeps what torch prints while a case runs out of the user's terminal and in
the case's report (``torch_output``): warnings attributed to torch, the standard library or the harness (never the
model's own code), records of torch's loggers at WARNING and above, and what torch's own code writes to
``sys.stderr``. The model's own output (its prints to stdout or stderr) is the model's: it reaches pytest's capture,
and the terminal under ``-s`` (issue #32).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import logging
import os
import sys
import sysconfig
import warnings
from typing import Any, Iterator

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
            if _SINKS:  # torch's defect, nothing the user can act on: the case's torch_output (#26)
                _SINKS[-1].add(note)
            elif note not in self.found:
                self.found.append(note)
            record.msg, record.args = text, ()
        return True


@contextlib.contextmanager
def repaired_torch_logs(found: list[str], names: tuple[str, ...] = SERDE_LOGGERS) -> Iterator[None]:
    """While active, a record from ``names`` that cannot be formatted is repaired and described in ``found`` (in
    the case's ``torch_output`` instead while ``captured_torch_output`` runs)."""
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


# ---- torch's output during a case, captured into its report (issue #26) -------------------------------

MAX_LINES, MAX_CHARS, LINE_CHARS = 50, 8192, 300
_SINKS: list["_Sink"] = []  # the capture running now, innermost last


class _Sink:
    """Short distinct lines, at most ``MAX_LINES`` and ``MAX_CHARS`` of them; the rest counted."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.seen: set[str] = set()
        self.size = self.dropped = 0

    def add(self, text: str) -> None:
        for raw in str(text).splitlines():
            line = raw.rstrip()
            if not line.strip() or line in self.seen:
                continue
            self.seen.add(line)
            if len(line) > LINE_CHARS:
                line = line[: LINE_CHARS - 3] + "..."
            if len(self.lines) >= MAX_LINES or self.size + len(line) > MAX_CHARS:
                self.dropped += 1
                continue
            self.lines.append(line)
            self.size += len(line)

    def result(self) -> list[str]:
        if not self.dropped:
            return list(self.lines)
        return self.lines + [f"... and {self.dropped} more line{'s' if self.dropped != 1 else ''} (not kept)"]


class _StderrLines(io.TextIOBase):
    """``sys.stderr`` while a case runs: what torch's own code writes goes to the sink, line by line; any other
    write (the model's ``print(..., file=sys.stderr)``, a library's) to the stream it would have reached
    (``Origins.torch_writes``)."""

    def __init__(self, sink: _Sink, real: Any, origins: "Origins"):
        self.sink, self.real, self.origins, self.partial = sink, real, origins, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not self.origins.torch_writes(sys._getframe(1)):
            return self.real.write(text)
        head, sep, self.partial = (self.partial + str(text)).rpartition("\n")
        if sep:
            self.sink.add(head)
        return len(text)

    def flush(self) -> None:
        if self.partial:
            self.sink.add(self.partial)
            self.partial = ""

    def fileno(self) -> int:  # a library that writes to the descriptor writes where it did before
        return self.real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", None) or "utf-8"


class _TorchRecords(logging.Filter):
    """On every handler of torch's loggers: a record of ``torch.*`` at WARNING or above goes to the sink, not out."""

    def __init__(self, sink: _Sink):
        super().__init__()
        self.sink = sink

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not (record.name == "torch" or record.name.startswith("torch.")):
            return True
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is still torch's output
            text = f"{record.msg} (args: {record.args!r})"
        self.sink.add(f"{record.levelname} {record.name}: {text}")
        return False


TOOLCHAINS = ("executorch", "torchao", "onnx", "onnxscript", "onnxruntime")  # what deployment stages drive


@functools.cache
def _toolchains() -> tuple[str, ...]:
    """The folders of the installed toolchains the deployment stages drive: their warnings and writes are the
    harness's, like torch's, never the model's (found without importing them)."""
    out = []
    for name in TOOLCHAINS:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None:  # a namespace package (executorch) has no origin, only its folders
            out += list(spec.submodule_search_locations or ([os.path.dirname(spec.origin)] if spec.origin else []))
    return tuple(out)


class Origins:
    """Where a warning comes from: torch, the deployment toolchains (executorch, onnx, ...) and the harness
    (``own``), the standard library (``stdlib``) and the installed libraries inside it (``libraries``:
    site-packages, a venv's or the interpreter's)."""

    def __init__(self) -> None:
        import torch

        def folders(*paths: str) -> tuple[str, ...]:
            return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)

        paths = sysconfig.get_paths()
        self.torch = folders(os.path.dirname(torch.__file__))[0]
        self.harness = folders(os.path.dirname(os.path.dirname(__file__)))[0]  # the package's folder, above torchside/
        self.own = (self.torch, self.harness, *folders(*_toolchains()))
        self.paths: dict[str, str] = {}  # a frame's file, resolved once
        self.stdlib = folders(paths["stdlib"], paths["platstdlib"])
        self.libraries = folders(paths["purelib"], paths["platlib"],
                                 *(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))

    def is_torchs(self, category: type, filename: str) -> bool:
        """Whether a warning is torch's own: attributed to a file of torch, of the harness or of the standard
        library (torch's internals; the ``copy`` machinery torch's classes go through), not to the model's code or
        a library it uses. A torch API that warns about its caller (``stacklevel=2``) names the model's line: that
        warning is the model's. pytest's and the harness's own warning classes always pass."""
        if (getattr(category, "__module__", "") or "").split(".")[0] in ("pytest", "_pytest", "pytest_export"):
            return False
        if filename.startswith("<frozen "):
            return True
        path = os.path.realpath(filename)
        if path.startswith(self.own):
            return True
        return path.startswith(self.stdlib) and not path.startswith(self.libraries)

    def torch_writes(self, frame: Any) -> bool:
        """Whether a write to ``sys.stderr`` made from ``frame`` is torch's: the nearest calling frame outside the
        standard library and the harness (its stream wrappers) is in torch. ``print`` from the model's code, or a
        traceback the model prints, is the model's; a library's (tqdm, transformers) is the library's."""
        for _ in range(64):
            if frame is None:
                return False
            name = frame.f_code.co_filename
            path = self.paths.get(name)
            if path is None:
                path = self.paths[name] = name if name.startswith("<") else os.path.realpath(name)
            if path.startswith(self.own) and not path.startswith(self.harness):  # torch, a deployment toolchain
                return True
            in_stdlib = path.startswith(self.stdlib) and not path.startswith(self.libraries)
            if not (in_stdlib or path.startswith(self.harness) or path.startswith("<frozen ")):
                return False
            frame = frame.f_back
        return False

    def short(self, filename: str) -> str:
        path = os.path.realpath(filename)
        if path.startswith(self.torch):
            return "torch/" + path[len(self.torch):]
        return os.path.basename(filename)


@contextlib.contextmanager
def captured_torch_output(info: dict[str, Any]) -> Iterator[None]:
    """While a case runs, torch's output goes to ``info["torch_output"]`` (short distinct lines, at most
    ``MAX_LINES`` / ``MAX_CHARS``, what was left out counted): its warnings, its loggers' records at WARNING and
    above, and what its code writes to ``sys.stderr``. Any other warning or write (the model's, a library's) passes
    to pytest unchanged. Enters ``quiet_trace_logs`` too."""
    sink, real = _Sink(), sys.stderr
    origins = Origins()
    records = _TorchRecords(sink)
    manager = logging.Logger.manager
    loggers = [logging.getLogger(n) for n, lg in list(manager.loggerDict.items())
               if isinstance(lg, logging.Logger) and (n == "torch" or n.startswith("torch."))]
    handlers = {id(h): h for lg in loggers for h in lg.handlers}.values()
    stderr = _StderrLines(sink, real, origins)
    with warnings.catch_warnings():
        warnings.filterwarnings("default", module=r"torch(\.|$)")  # torch's own warnings never error in the harness
        shown = warnings.showwarning

        def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if origins.is_torchs(category, filename):
                sink.add(f"{category.__name__}: {message} ({origins.short(filename)}:{lineno})")
                return
            with contextlib.redirect_stderr(real):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        for h in handlers:
            h.addFilter(records)
        _SINKS.append(sink)
        try:
            with contextlib.redirect_stderr(stderr), quiet_trace_logs():
                yield
        finally:
            _SINKS.remove(sink)
            for h in handlers:
                h.removeFilter(records)
            stderr.flush()
            if sink.lines or sink.dropped:
                info["torch_output"] = sink.result()


__all__ = ["repaired_torch_logs", "quiet_trace_logs", "quiet_fake_logs", "captured_torch_output", "Origins"]
