"""The breadth slice's torchvision half: every classification, detection, segmentation and video model of
``torchvision.models`` that builds without weights, at small images, with its batch and (where the architecture
takes any) its height and width declared in multiples of 32 (``vision_models.py`` says how each is set up).

``vision.json`` lists the models (``python corpus/breadth/vision_models.py --list`` writes it from the installed
torchvision); ``expected.json`` holds, per torch version, each model's expected stage failures, run as strict
``xfail`` as in ``test_breadth.py``. Where torchvision is not installed the file is skipped, with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="the breadth slice's vision models need torchvision: pip install "
                                          "torchvision (tested: torchvision==0.29.1 with torch==2.14.1)")

from breadth_models import expected_failures  # noqa: E402
from vision_models import Vision, build, example, shapes  # noqa: E402

LISTED = json.loads((Path(__file__).resolve().parent / "vision.json").read_text(encoding="utf-8"))
MODELS = [Vision(**v) for v in LISTED["models"]]
EXPECTED = expected_failures()


def _case(vision: Vision):
    case_id = f"torchvision.{vision.name}"
    tags = ["breadth", f"vision-{vision.task}"] + (["breadth-ci"] if vision.name in LISTED["ci_sample"] else [])
    mark = pytest.mark.exportable(dynamic_shapes=shapes(vision), tags=tags, xfail=EXPECTED.get(case_id, {}))
    return pytest.param(vision, marks=mark, id=case_id)


@pytest.mark.parametrize("vision", [_case(v) for v in MODELS])
def test_torchvision(vision):
    return build(vision), example(vision)
