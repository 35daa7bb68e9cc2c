"""Shared helpers for the plugin tests (pytester runs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADER = '''
import dataclasses, collections
import pytest, torch
from torch.export import Dim
'''


def write_cases(pytester, body: str, name: str = "test_cases") -> Path:
    return pytester.makepyfile(**{name: HEADER + body})


def run_check(pytester, *args: str, report: str = "report.json", subprocess: bool = False):
    argv = ["--export-check", "--export-report", report, "-p", "no:cacheprovider", *args]
    result = pytester.runpytest_subprocess(*argv) if subprocess else pytester.runpytest(*argv)
    path = Path(pytester.path, report)
    data = json.loads(path.read_text()) if path.exists() else None
    return result, data


def cases_by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["nodeid"].split("::")[-1]: c for c in data["cases"]}


def statuses(case: dict[str, Any]) -> dict[str, str]:
    return {name: s["status"] for name, s in case["stages"].items()}
