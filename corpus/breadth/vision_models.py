"""The breadth slice's torchvision models: every classification, detection, segmentation and video model of
``torchvision.models`` that builds without weights (``weights=None``, ``weights_backbone=None``: nothing is
downloaded), at small images, with its batch and, where the architecture takes any, its height and width declared.

Height and width are multiples of 32 (the stride of the backbones) from the example's size to 64 pixels above it,
each on its own; a model that runs eagerly only at one size (a ViT's position embeddings, MaxViT's window
partition, MViT's fixed clip) keeps batch alone, at the smallest size it runs at. Detection models read a list of
images (one, its height and width declared); their own transform resizes it to ``min_size``, set small here.
``python corpus/breadth/vision_models.py --list`` writes ``vision.json`` from the installed torchvision.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from typing import Any

import torch
from torch.export import Dim

TASKS = ("classification", "detection", "segmentation", "video")
# what a family needs to run at small images (a model not named runs at its own defaults)
KWARGS: dict[str, dict[str, Any]] = {
    "vit_b_16": {"image_size": 64}, "vit_b_32": {"image_size": 64}, "vit_l_16": {"image_size": 64},
    "vit_l_32": {"image_size": 64}, "vit_h_14": {"image_size": 112},
}
DETECTION_KWARGS = {"min_size": 128, "max_size": 128}  # the two-stage and one-stage detectors' own resize
SIZES = {"classification": (64, 96, 112, 128, 224), "segmentation": (64, 96, 128, 224), "detection": (128, 224, 320),
         "video": (64, 128, 224)}
FRAMES = (8, 16)  # a video model's clip length: the first it runs at
STRIDE = 32
BATCH = {"classification": 8, "segmentation": 4, "video": 2}  # the declared batch's max (detection: one image)
CI_SAMPLE = 3  # models a run of the corpus keeps: a fixed pick by the hash of their names, among the small ones
CI_PARAMS = 5_000_000  # "small": fewer parameters than this


@dataclasses.dataclass
class Vision:
    """One torchvision model: its builder's name, its task, and the sizes it runs at."""

    name: str
    task: str
    size: int  # the example's height and width
    frames: int = 0  # a video model's clip length
    hw: bool = False  # height and width declared dynamic (size to size + 64, multiples of 32)
    input: str = "x"  # the name of ``forward``'s input
    params: int = 0


def models() -> list[tuple[str, str]]:
    """Every (task, builder name) of ``torchvision.models`` in the four tasks."""
    from torchvision import models as tv

    modules = {"classification": tv, "detection": tv.detection, "segmentation": tv.segmentation, "video": tv.video}
    return [(task, name) for task in TASKS for name in sorted(tv.list_models(module=modules[task]))]


def build(vision: Vision) -> torch.nn.Module:
    """The model (eval, random weights, seeded, nothing downloaded)."""
    from torchvision import models as tv

    torch.manual_seed(0)
    kwargs = dict(KWARGS.get(vision.name, {}))
    if vision.task in ("detection", "segmentation"):
        kwargs["weights_backbone"] = None
    if vision.task == "detection" and not vision.name.startswith("ssd"):
        kwargs.update(DETECTION_KWARGS)
    return tv.get_model(vision.name, weights=None, **kwargs).eval()


def _image(vision: Vision, height: int, width: int, batch: int = 2) -> Any:
    torch.manual_seed(1)
    if vision.task == "detection":
        return [torch.rand(3, height, width)]
    if vision.task == "video":
        return torch.randn(batch, 3, vision.frames, height, width)
    return torch.randn(batch, 3, height, width)


def example(vision: Vision) -> tuple[Any, ...]:
    """The example's positional inputs: a batch of 2 images (clips), or a list of one image for a detector."""
    return (_image(vision, vision.size, vision.size),)


def shapes(vision: Vision) -> dict[str, Any]:
    """The declared dynamic axes: batch (not for a detector's list), and height and width where ``vision.hw``."""
    low = vision.size // STRIDE
    height = STRIDE * Dim(f"kh{low}", min=low, max=low + 2) if vision.hw else None
    width = STRIDE * Dim(f"kw{low}", min=low, max=low + 2) if vision.hw else None
    if vision.task == "detection":
        return {vision.input: [{1: height, 2: width} if vision.hw else None]}
    axes: dict[int, Any] = {0: Dim("batch", min=1, max=BATCH[vision.task])}
    first = 3 if vision.task == "video" else 2
    if vision.hw:
        axes.update({first: height, first + 1: width})
    return {vision.input: axes}


def _runs(model: torch.nn.Module, vision: Vision, height: int, width: int) -> bool:
    try:
        with torch.no_grad():
            model(_image(vision, height, width, batch=1))
        return True
    except Exception:  # noqa: BLE001 - it does not run at this size
        return False


def settle(task: str, name: str) -> Vision:
    """The smallest example size (and clip length) the model runs at, and whether it runs at the other sizes of
    the declared height and width (each on its own) too."""
    for frames in (FRAMES if task == "video" else (0,)):
        for size in SIZES[task]:
            vision = Vision(name, task, size, frames)
            model = build(vision)
            if not _runs(model, vision, size, size):
                continue
            vision.params = sum(p.numel() for p in model.parameters())
            vision.input = next(iter(inspect.signature(model.forward).parameters))
            vision.hw = size % STRIDE == 0 and all(
                _runs(model, vision, h, w) for h, w in ((size + 32, size + 64), (size + 64, size + 32)))
            return vision
    raise RuntimeError(f"runs at none of the sizes {SIZES[task]}")


def listing(path: str) -> None:
    """Write ``vision.json``: every model that builds and runs, how, the CI sample, and those that do not."""
    import json
    import sys
    import warnings

    warnings.filterwarnings("ignore")
    built, skipped = [], {}
    for task, name in models():
        try:
            built.append(dataclasses.asdict(settle(task, name)))
        except Exception as exc:  # noqa: BLE001 - recorded: it is not in the slice
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        print(task, name, "built" if built and built[-1]["name"] == name else skipped.get(name), file=sys.stderr)
    small = [v["name"] for v in built if v["params"] < CI_PARAMS]
    sample = sorted(sorted(small, key=lambda n: hashlib.sha256(n.encode()).hexdigest())[:CI_SAMPLE])
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"models": built, "ci_sample": sample, "not_built": skipped}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if sys.argv[1:2] == ["--list"]:
        listing(sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parent / "vision.json"))
    else:
        raise SystemExit("usage: python corpus/breadth/vision_models.py --list [PATH]")
