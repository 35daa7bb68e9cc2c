"""The breadth slice's table held to raw torch: for a seeded random sample of a report's cases (10% by default;
transformers and torchvision models alike), the same model is exported, run, saved and loaded, and decomposed with torch's own API alone, and each stage's verdict is
compared with the report's (``export``, ``compare``, ``serde``, ``decomp``, and ``guards`` at the declared edges).

    python benchmarks/breadth_truth.py REPORT.json [REPORT.json...] [--fraction 0.1] [--seed 0]

Prints one line per sampled case (the stages that agree and any that do not) and exits 1 on any disagreement.
Outputs are compared as the harness compares them by default: torch.testing's tolerances, or a norm-relative error
of at most 1e-5 (float32) over the whole output (docs/stages.md).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
from pathlib import Path

import torch
import torch.utils._pytree as pytree

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "corpus" / "breadth"))
import vision_models
from breadth_models import Arch, build, builder, example, shapes

HERE = Path(__file__).resolve().parents[1] / "corpus" / "breadth"
ARCHS = {a["model_type"]: Arch(**a) for a in json.loads((HERE / "architectures.json").read_text())["architectures"]}
VISION = {v["name"]: vision_models.Vision(**v) for v in json.loads((HERE / "vision.json").read_text())["models"]}
SCALE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float64: 1e-10}


def close(got, want) -> bool:
    g, w = pytree.tree_leaves(got), pytree.tree_leaves(want)
    if len(g) != len(w):
        return False
    for a, e in zip(g, w):
        if not isinstance(e, torch.Tensor):
            if a != e:
                return False
            continue
        try:
            torch.testing.assert_close(a, e, equal_nan=True)
        except AssertionError:
            if a.shape != e.shape or not e.is_floating_point():
                return False
            err = torch.linalg.vector_norm((a - e).double()) / torch.linalg.vector_norm(e.double())
            if not float(err) <= SCALE.get(e.dtype, 0.0):
                return False
    return True


def _axes(spec) -> list[tuple[dict, int, object]]:
    """(the axis spec, its axis, its Dim) for every declared axis of one input's spec (a dict, or a list of them)."""
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    if any(isinstance(d, dict) for each in specs if each for d in each.values()):  # a **kwargs entry, by keyword
        return [found for each in specs if each for sub in each.values() for found in _axes(sub)]
    return [(each, axis, d) for each in specs if each for axis, d in each.items() if d is not None]


def edges(dynamic_shapes: dict) -> list[dict[str, int]]:
    """Each declared dim at its min and max, the others at their min, and all at their max."""
    dims = {d.__name__: (d.min, d.max) for spec in dynamic_shapes.values() for _, _, d in _axes(spec)}
    out = [{n: lo for n, (lo, _) in dims.items()}, {n: hi for n, (_, hi) in dims.items()}]
    out += [{**out[0], n: hi} for n, (_, hi) in dims.items()]
    return out


def _resized(value, spec, sizes: dict[str, int]):
    """A fresh random input like ``value`` with its declared axes at ``sizes``."""
    if isinstance(value, (list, tuple)):
        return type(value)(_resized(v, s, sizes) for v, s in zip(value, spec))
    shape = list(value.shape)
    for axis, d in (spec or {}).items():
        if d is not None:
            shape[axis] = sizes[d.__name__]
    return torch.rand(shape) if value.min() >= 0 else torch.randn(shape)


class Case:
    """A case of the slice as raw torch sees it: the model, its example inputs, the declaration, inputs at sizes."""

    def __init__(self, nodeid: str):
        name = nodeid.rsplit("[", 1)[1].rstrip("]")
        if name.startswith("torchvision."):
            vision = VISION[name.removeprefix("torchvision.")]
            self.model, self.args, self.kwargs = vision_models.build(vision), vision_models.example(vision), {}
            self.dynamic_shapes = vision_models.shapes(vision)
            self._build = None
        else:
            arch = ARCHS[name]
            self.model, config = build(arch)
            self.args, self.kwargs, self.dynamic_shapes = (), example(arch, config), shapes(arch)
            self._build = builder(arch)
        self.name = name

    def inputs_at(self, sizes: dict[str, int]) -> tuple[tuple, dict]:
        if self._build is not None:
            return self._build(sizes, self.args, self.kwargs)
        names = list(self.dynamic_shapes)
        args = tuple(_resized(a, self.dynamic_shapes.get(n), sizes) for a, n in zip(self.args, names))
        kwargs = {k: _resized(v, self.dynamic_shapes.get(k), sizes) for k, v in self.kwargs.items()}
        return args, kwargs


def raw_verdicts(case: Case) -> dict[str, str]:
    model, args, kwargs = case.model, case.args, case.kwargs
    with torch.no_grad():
        want = model(*args, **kwargs)
        try:
            ep = torch.export.export(model, args, kwargs, dynamic_shapes=case.dynamic_shapes)
        except Exception:  # noqa: BLE001 - the verdict
            return {"export": "failed"}
        try:
            out = {"export": "passed", "compare": "passed" if close(ep.module()(*args, **kwargs), want) else "failed"}
        except Exception:  # noqa: BLE001 - the program raising on the example is the verdict
            out = {"export": "passed", "compare": "failed"}
        buf = io.BytesIO()
        try:
            torch.export.save(ep, buf)
            buf.seek(0)
            out["serde"] = "passed" if close(torch.export.load(buf).module()(*args, **kwargs), want) else "failed"
        except Exception:  # noqa: BLE001
            out["serde"] = "failed"
        try:
            out["decomp"] = "passed" if close(ep.run_decompositions().module()(*args, **kwargs), want) else "failed"
        except Exception:  # noqa: BLE001
            out["decomp"] = "failed"
        ok = True
        for sizes in edges(case.dynamic_shapes):
            torch.manual_seed(0)
            a, k = case.inputs_at(sizes)
            try:
                ok = ok and close(ep.module()(*a, **k), model(*a, **k))
            except Exception:  # noqa: BLE001 - eager raising too is no fault of the program: not counted
                try:
                    model(*a, **k)
                    ok = False
                except Exception:  # noqa: BLE001
                    pass
        out["guards"] = "passed" if ok else "failed"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="REPORT",
                        help="one or more reports; a case in a later one replaces an earlier one's (a re-run)")
    parser.add_argument("--fraction", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    latest = {c["nodeid"]: c for report in args.reports for c in json.loads(Path(report).read_text())["cases"]}
    cases = [c for n, c in sorted(latest.items()) if "test_transformers[" in n or "test_torchvision[" in n]
    sample = random.Random(args.seed).sample(cases, max(1, round(len(cases) * args.fraction)))
    bad = 0
    for case in sorted(sample, key=lambda c: c["nodeid"]):
        name = case["nodeid"].rsplit("[", 1)[1].rstrip("]")
        raw = raw_verdicts(Case(case["nodeid"]))
        verdict = {"passed": "passed", "xpassed": "passed", "failed": "failed", "xfailed": "failed"}  # torch's
        said = {s: verdict[st["status"]] for s, st in case["stages"].items() if s in raw and st["status"] in verdict}
        differ = {s: (said[s], raw[s]) for s in raw if s in said and said[s] != raw[s]}
        bad += bool(differ)
        print(f"{name}: {'agrees' if not differ else 'DIFFERS'} on {', '.join(sorted(set(raw) & set(said)))}"
              + "".join(f"; {s}: report {r}, raw torch {t}" for s, (r, t) in differ.items()))
    print(f"{len(sample) - bad} of {len(sample)} sampled cases agree with raw torch on every stage")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
