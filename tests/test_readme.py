"""The README renders as written: every table is whole (no blank line cuts rows off it, every row has the header's
cells), and the Quick start holds the two commands `.ci/run` runs."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _cells(line: str) -> list[str]:
    """A table row's cells: split on pipes outside code spans (`a | b` is one cell)."""
    cells, cell, code = [], "", False
    for ch in line.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
    return cells + [cell]


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each run of table lines, outside fenced code."""
    out, run, start, fenced = [], [], 0, False
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        is_row = not fenced and line.startswith("|")
        if is_row:
            if not run:
                start = no
            run.append(line)
        elif run:
            out.append((start, run))
            run = []
    if run:
        out.append((start, run))
    return out


def test_every_table_is_whole():
    problems = []
    for start, rows in _blocks(README.read_text(encoding="utf-8")):
        if len(rows) < 2 or not re.fullmatch(r"\|?(\s*:?-{3,}:?\s*\|)+\s*:?-{0,}:?\s*\|?", rows[1].strip()):
            problems.append(f"line {start}: table rows without a header and a --- line (cut off by a blank line?)")
            continue
        width = len(_cells(rows[0]))
        for i, row in enumerate(rows[2:], 2):
            if len(_cells(row)) != width:
                problems.append(f"line {start + i}: {len(_cells(row))} cells, the header has {width}")
    assert not problems, "\n".join(problems)


def test_quick_start_holds_the_two_commands_ci_runs():
    quick = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first, second = re.findall(r"```bash\n(.*?)\n```", quick, re.S)
    assert "pip install" in first and "pytest corpus --export-check" in first
    assert second.startswith(". .venv/bin/activate && ") and "pytest" in second  # works from a new shell
    ci = (README.parent / ".ci" / "run").read_text()
    assert "readme_command 0" in ci and "readme_command 1" in ci
