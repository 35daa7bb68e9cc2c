"""The breadth slice: every ``transformers`` model class that builds from its configuration at tiny width (random
weights, no download), through the plugin with the dynamic axes such a model has: batch and sequence for text,
batch for images and audio features, batch and samples for raw audio.

``architectures.json`` lists the architectures (``python corpus/breadth/breadth_models.py --list`` writes it from
the installed ``transformers``: a new architecture enters the slice with a commit, not with an upgrade).
``expected.json`` holds, per torch version, each architecture's expected stage failures: they run as ``xfail``
(strict), so a fixed one shows as an XPASS and a new one fails the run; ``docs/conformance.md`` is the table of
the whole slice (``python -m pytest_export table``). A run of the corpus keeps the CI sample (tag ``breadth-ci``);
``--export-tags breadth`` or naming ``corpus/breadth`` runs the whole slice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the breadth slice needs transformers: pip install -e '.[zoo]'")

from breadth_models import Arch, build, builder, example, expected_failures, shapes  # noqa: E402

LISTED = json.loads((Path(__file__).resolve().parent / "architectures.json").read_text(encoding="utf-8"))
ARCHS = [Arch(**a) for a in LISTED["architectures"]]
EXPECTED = expected_failures()


def _case(arch: Arch):
    tags = ["breadth", f"reads-{arch.reads}"] + (["breadth-ci"] if arch.model_type in LISTED["ci_sample"] else [])
    mark = pytest.mark.exportable(dynamic_shapes=shapes(arch), input_builder=builder(arch), tags=tags,
                                  xfail=EXPECTED.get(arch.model_type, {}))
    return pytest.param(arch, marks=mark, id=arch.model_type)


@pytest.mark.parametrize("arch", [_case(a) for a in ARCHS])
def test_transformers(arch):
    model, config = build(arch)
    return model, (), example(arch, config)
