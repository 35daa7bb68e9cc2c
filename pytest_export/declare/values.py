"""Values an option or a marker keyword holds, parsed and checked where options are read: a memory size
(``--export-max-memory`` / ``max_memory=``) and a deployment runtime's tolerances (``--export-runtime-tolerance``
/ ``runtime_tolerance=``). Plain Python: no torch, nothing else of this package.
"""

from __future__ import annotations

import math
import re
from typing import Any

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_memory(value: Any, where: str = "--export-max-memory") -> int | None:
    """``"6GB"``, ``"512MiB"``, ``"2.5g"``, or a number of bytes -> bytes; None for no value. ValueError says
    what is accepted."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{where} must be a size such as 4GB, 512MiB or a number of bytes, got {value!r}")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{where} must be a size such as 4GB, 512MiB or a number of bytes, got {value!r}")
        number, unit = float(m.group(1)), m.group(2).lower()
    size = int(number * _UNITS[unit]) if math.isfinite(number) else 0
    if size <= 0:
        raise ValueError(f"{where} must be a positive size such as 4GB, got {value!r}")
    return size


RUNTIMES = ("executorch", "onnx")
"""The deployment runtimes whose tolerances can be set on their own (``runtime_tolerance``)."""

Tolerance = tuple  # (rtol or None, atol or None): None keeps that one's default
_FORM = ("write {runtime: (rtol, atol)} or {runtime: {'rtol': ..., 'atol': ...}} on the marker, "
         "RUNTIME:RTOL:ATOL (e.g. executorch:1e-4:1e-5) on the command line or in the ini file; runtimes: "
         + ", ".join(RUNTIMES))


def _number(value: Any, what: str, where: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value) if not isinstance(value, bool) else -1.0
    except (TypeError, ValueError):
        number = -1.0
    if not number >= 0 or math.isinf(number):  # NaN compares false
        raise ValueError(f"{where}: {what} must be a number >= 0 or None, got {value!r}; {_FORM}")
    return number


def _pair(runtime: Any, value: Any, where: str) -> tuple[str, Tolerance]:
    if runtime not in RUNTIMES:
        raise ValueError(f"{where}: unknown runtime {runtime!r}; {_FORM}")
    if isinstance(value, dict):
        extra = set(value) - {"rtol", "atol"}
        if extra:
            raise ValueError(f"{where}: {runtime}: unknown key {sorted(extra)[0]!r}; {_FORM}")
        value = (value.get("rtol"), value.get("atol"))
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{where}: {runtime}: expected (rtol, atol), got {value!r}; {_FORM}")
    return runtime, (_number(value[0], f"{runtime}'s rtol", where), _number(value[1], f"{runtime}'s atol", where))


def parse_runtime_tolerance(value: Any, where: str = "runtime_tolerance") -> dict[str, Tolerance]:
    """A marker's ``{"executorch": (1e-4, 1e-5)}`` (or ``{"onnx": {"rtol": 1e-3}}``), or the command line's and
    ini file's ``executorch:1e-4:1e-5`` chunks (a list of them, or one string, comma-separated) -> ``{runtime:
    (rtol, atol)}``; ValueError names what is wrong and the forms accepted."""
    if value is None or value == "" or value == []:
        return {}
    if isinstance(value, dict):
        return dict(_pair(k, v, where) for k, v in value.items())
    chunks = [value] if isinstance(value, str) else value
    if not isinstance(chunks, (list, tuple)) or not all(isinstance(c, str) for c in chunks):
        raise ValueError(f"{where}: expected a dict of runtimes, got {value!r}; {_FORM}")
    out: dict[str, Tolerance] = {}
    for chunk in chunks:
        for part in (p.strip() for p in re.split(r"[,\s]+", chunk)):
            if not part:
                continue
            bits = part.split(":")
            if len(bits) != 3:
                raise ValueError(f"{where}: {part!r} is not RUNTIME:RTOL:ATOL; {_FORM}")
            runtime, pair = _pair(bits[0], (bits[1], bits[2]), where)
            out[runtime] = pair
    return out


def runtime_tolerance_problem(value: Any) -> str | None:
    """What is wrong with a marker's ``runtime_tolerance`` (None: nothing)."""
    if value is not None and not isinstance(value, dict):
        return "must be a dict {runtime: (rtol, atol)}"
    try:
        parse_runtime_tolerance(value)
    except ValueError as exc:
        return str(exc).split(": ", 1)[1]
    return None


__all__ = ["parse_memory", "RUNTIMES", "parse_runtime_tolerance", "runtime_tolerance_problem"]
