"""Files this tool writes: always JSON (never pickle), always atomically (an interrupted write keeps the old file)."""

from __future__ import annotations

import json
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
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=_default) + "\n")


def _default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, float) and obj != obj:
        return None
    return str(obj)


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
