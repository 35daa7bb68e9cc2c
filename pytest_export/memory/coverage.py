"""How far each declared dim was checked (issue #23): one row per dim, by shape (``shape_max``) and by numerics
(``numeric_max``), with why numerics stopped where they did; and the lines the report and the terminal print of
those rows. ``cost.Costs`` keeps the rows of one case.

Nothing here imports torch or the package.
"""

from __future__ import annotations

from typing import Any

FAKE, NUMERIC = "fake", "numeric"


def format_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def format_seconds(s: float) -> str:
    return f"{s:.3g} s" if s < 120 else f"{s / 60:.3g} min"


def _row(coverage: dict[str, dict[str, Any]], name: str, lo: int | None, hi: int | None) -> dict[str, Any]:
    return coverage.setdefault(name, {"dim": name, "declared": [lo, hi], "shape_max": None, "numeric_max": None,
                                      "why": "", "_not": [], "_numeric": []})


def _why(row: dict[str, Any], hi: int | None) -> None:
    """Why numerics stop: the first size past the numeric max that did not run numeric; the max's own reason too
    (#31)."""
    past = [n for n in row["_not"] if n[0] > (row["numeric_max"] or 0)]
    top = [text for n, text in past if n == hi and text != min(past)[1]]
    row["why"] = (min(past)[1] if past else "") + (f"; at the max: {top[0]}" if top else "")


def record(coverage: dict[str, dict[str, Any]], dims: dict[str, tuple[int, int | None, int | None]],
           mode: str | None, why: str = "") -> None:
    """A probe ran (``mode``) in range at sizes ``dims``: name -> (size, declared min, declared max). ``mode``
    None: neither fake nor numeric could run it; it checked nothing, and ``why`` is the dim's reason (#32)."""
    at = ", ".join(f"{n}={size}" for n, (size, _, _) in dims.items())
    for name, (size, lo, hi) in dims.items():
        row = _row(coverage, name, lo, hi)
        if mode is not None:
            row["shape_max"] = max(size, row["shape_max"] or size)
        if mode == NUMERIC:
            row["_numeric"].append(size)
            row["numeric_max"] = max(row["_numeric"])
        elif why:
            row["_not"].append((size, f"{at} {why}"))
        _why(row, hi)


def unrecord(coverage: dict[str, dict[str, Any]], dims: dict[str, tuple[int, int | None, int | None]],
             why: str) -> None:
    """A probe recorded numeric did not run numeric after all (the memory guard stopped it, issue #43): its sizes
    no longer count as numerics reached, and ``why`` is the reason there."""
    at = ", ".join(f"{n}={size}" for n, (size, _, _) in dims.items())
    for name, (size, lo, hi) in dims.items():
        row = _row(coverage, name, lo, hi)
        if size in row["_numeric"]:
            row["_numeric"].remove(size)
        row["numeric_max"] = max(row["_numeric"], default=None)
        row["_not"].append((size, f"{at} {why}"))
        _why(row, hi)


def short_of_max(ranges: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The coverage rows (the report's ``ranges``) of declared dims whose numerics fell short of the declared max,
    or never ran; an unbounded dim promises no max."""
    return [row for row in (ranges or {}).get("dims", [])
            if row["declared"][1] is not None and row.get("numeric_max") != row["declared"][1]]


def short_text(rows: list[dict[str, Any]]) -> str:
    """``seq: numerics to 16 of 512 (batch=2, seq=32 the budget was spent)``, the dims joined by ``; ``."""
    parts = []
    for row in rows:
        reach = "no numerics" if row.get("numeric_max") is None else f"numerics to {row['numeric_max']}"
        parts.append(f"{row['dim']}: {reach} of {row['declared'][1]}" + (f" ({row['why']})" if row.get("why") else ""))
    return "; ".join(parts)


def coverage_line(row: dict[str, Any]) -> str:
    """``seq: shapes checked to 131072 (max); numerics to 2048 (seq=4096 needs ~17 GB > max_memory 6 GB)``."""
    lo, hi = row["declared"]
    shape_max, numeric_max = row.get("shape_max"), row.get("numeric_max")
    top = "" if hi is None else " (max)" if shape_max == hi else f" of {hi}"
    text = f"{row['dim']}: shapes checked to {shape_max}{top}" if shape_max is not None else f"{row['dim']}: no size checked"
    text += "; no numerics" if numeric_max is None else f"; numerics to {numeric_max}" + (" (max)" if numeric_max == hi else "")
    if row.get("why") and numeric_max != hi:
        text += f" ({row['why']})"
    return text


def opaque_line(opaque: dict[str, Any]) -> str:
    """The report's ``ranges.opaque`` as one line (issue #43): which ops the memory count could not see into, how
    each was predicted, the guard's limit and what it stopped."""
    ops = []
    for name, op in (opaque.get("ops") or {}).items():
        how = (f"calibrated: {format_bytes(op['hidden_bytes'])} inside at {format_bytes(op['at_input_bytes'])} of "
               "inputs, scaled by their growth squared" if op.get("predicted") == "calibrated"
               else "not calibrated: predicted by its outputs alone")
        ops.append(f"{name} ({how})")
    text = (f"ops the memory count cannot see into: {', '.join(ops)}; numeric probes guarded at "
            f"{format_bytes(opaque.get('guard_bytes') or 0)} of growth")
    stopped = opaque.get("stopped") or []
    return text + (f"; the guard stopped {len(stopped)} probe{'s' * (len(stopped) != 1)}: {stopped[0]}"
                   if stopped else "")


__all__ = ["FAKE", "NUMERIC", "format_bytes", "opaque_line", "record", "unrecord", "short_of_max", "short_text", "coverage_line"]
