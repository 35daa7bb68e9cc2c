"""Files this tool writes: always JSON (never pickle), always atomically (an interrupted write keeps the old file)."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

REPORT_VERSION = 1


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Strict JSON: Python writes ``inf``/``nan`` as ``Infinity``/``NaN`` by default, which ``jq``, browsers and
    most other parsers reject, so non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"`` and
    ``allow_nan=False`` makes a missed one an error here instead of a file nobody else can read."""
    text = json.dumps(strict_json(data), indent=2, sort_keys=False, default=_default, allow_nan=False)
    return write_text_atomic(path, text + "\n")


def strict_json(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by its string (``"inf"``, ``"-inf"``, ``"nan"``) and sets
    as sorted lists, ready for ``json.dumps(..., allow_nan=False)``."""
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        try:
            items = sorted(obj)
        except TypeError:  # mixed types: still a stable order
            items = sorted(obj, key=repr)
        return [strict_json(v) for v in items]
    return obj


def _default(obj: Any) -> Any:
    return str(obj)  # anything else JSON does not know (a path, a dtype) is written as its text


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return True


def build_report(cases: list[dict[str, Any]], torch_version: str | None, **extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"version": REPORT_VERSION, "torch": torch_version}
    data.update(extra)
    data["cases"] = sorted(cases, key=lambda c: c["nodeid"])
    return data


def read_report(path: str | os.PathLike) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or data.get("version") != REPORT_VERSION or not isinstance(data.get("cases"), list):
        raise ValueError(f"{path}: not a pytest-export report (version {REPORT_VERSION} JSON with a 'cases' list)")
    return data
