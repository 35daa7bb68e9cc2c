"""The stages, one module each, named after the stage. ``REGISTRY`` holds them in their one run order,
``declare.options.ORDER``: nothing depends on import order, and a stage added to ``ORDER`` without its module (or a
module whose ``STAGE`` has another name) fails at import.
"""

from __future__ import annotations

import importlib

from ..context import Stage
from ..declare.options import ORDER


def _load(name: str) -> Stage:
    stage = importlib.import_module(f"{__name__}.{name}").STAGE
    assert stage.name == name, f"stages/{name}.py defines the stage {stage.name!r}"
    return stage


REGISTRY: tuple[Stage, ...] = tuple(_load(name) for name in ORDER)

__all__ = ["REGISTRY"]
