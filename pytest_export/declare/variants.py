"""Tracing modes and devices: which items a marked case becomes (``--export-modes``, ``--export-devices``).

A case runs once per (mode, device) pair, each as its own item. The item id carries an axis only where that
axis was asked for, so that a plain run keeps its node ids: ``--export-modes`` adds ``non-strict`` / ``strict``;
``--export-devices`` adds the device; with neither, the default device list is ``cpu`` plus ``cuda`` where
``torch.cuda.is_available()``, and only a machine with CUDA gets ``[cpu]`` / ``[cuda]`` ids. Mode comes first:
``test_x[strict-cuda]``; a test's own parameters come before both: ``test_x[3-strict-cpu]``.

No torch import here at module level.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from ..util import comma_list

MODES = ("non-strict", "strict")
"""Tracing modes: ``strict=False`` (the default of torch.export) and ``strict=True`` (TorchDynamo)."""

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


@dataclasses.dataclass(frozen=True)
class Variant:
    mode: str | None  # None: the marker's own ``strict`` keyword decides
    device: str | None  # None: cpu, and the id does not say so

    @property
    def id(self) -> str:
        return "-".join(p for p in (self.mode, self.device) if p)

    @property
    def on_cuda(self) -> bool:
        return bool(self.device and self.device.startswith("cuda"))


def parse_list(value: Any, option: str, valid: Callable[[str], bool], choices: str) -> tuple[str, ...] | None:
    """``a,b`` (repeatable) -> ("a", "b"); None when not given; ValueError naming the option and the choices."""
    if value in (None, "", []):
        return None
    parts = comma_list(value)
    if not parts:
        raise ValueError(f"{option} needs at least one value ({choices})")
    for p in parts:
        if not valid(p):
            raise ValueError(f"{option}: unknown value {p!r}; valid: {choices}")
    return tuple(parts)


def parse_modes(value: Any) -> tuple[str, ...] | None:
    return parse_list(value, "--export-modes", lambda p: p in MODES, ", ".join(MODES))


def parse_devices(value: Any) -> tuple[str, ...] | None:
    return parse_list(value, "--export-devices", is_device, "cpu, cuda, cuda:N")


def is_device(value: Any) -> bool:
    """``cpu``, ``cuda`` or ``cuda:N``: the devices a case can be exported and compared on."""
    return isinstance(value, str) and bool(_DEVICE.match(value))


def variants(modes: tuple[str, ...] | None, devices: tuple[str, ...] | None,
             cuda_available: Callable[[], bool]) -> list[Variant]:
    """The items of one case; empty means one item with the test's own id (no parametrization)."""
    mode_axis: tuple[str | None, ...] = modes or (None,)
    if devices:
        device_axis: tuple[str | None, ...] = devices
    else:
        device_axis = ("cpu", "cuda") if cuda_available() else (None,)
    if mode_axis == (None,) and device_axis == (None,):
        return []
    return [Variant(m, d) for m in mode_axis for d in device_axis]


__all__ = ["MODES", "Variant", "parse_modes", "parse_devices", "is_device", "variants"]
