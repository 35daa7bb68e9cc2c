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

# planted models several test files share (their source goes into pytester's test files)
HANGS = '''
import time

class Hangs(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            while True:
                time.sleep(0.05)
        return x + 1
'''
"""A forward that hangs only while exporting: ``--export-timeout`` stops the `export` stage (an ``error``)."""

SHORTCUT = '''
import os

class Shortcut(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting() or os.environ.get("FIXED"):
            return x * 2
        return x + x + 1e-3
'''
"""A forward that computes something else while exporting (and, with FIXED set, always): ``compare`` fails."""

LIN = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(3, 3)
    def forward(self, x):
        return self.l(x)
'''
"""A one-layer model (seed the weights in the case)."""



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
