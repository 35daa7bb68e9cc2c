"""pytest-export: export every marked case with torch.export once and check the program every way.

Importing this package does not import torch, nor (until one of its names is used) the harness itself:
pytest loads the plugin module in every run, including runs that never use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["check", "CaseResult", "StageResult", "ExportCheckFailure", "UsageError", "ExportWarning", "STAGES", "__version__"]

_WHERE = {"check": "api", "STAGES": "declare.options", "ExportWarning": "declare.options",
          "UsageError": "declare.options", "CaseResult": "results", "ExportCheckFailure": "results",
          "StageResult": "results"}

if TYPE_CHECKING:
    from .api import check
    from .declare.options import STAGES, ExportWarning, UsageError
    from .results import CaseResult, ExportCheckFailure, StageResult


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
