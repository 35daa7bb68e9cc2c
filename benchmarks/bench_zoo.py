"""Real models: the harness on the zoo's CI slice against the floor, the same checks written directly with torch.

For each model tagged ``zoo-ci`` in ``corpus/zoo``: ``pytest_export.check`` with the case's marker keywords (the
harness), then the floor: the same work done with torch and nothing else (export; eager twice; the program, the
reloaded program (one save and one load), the decomposed program and the re-exported program on the example; the
re-exported program on four boundary sizes; the exported program on every `guards` probe and eager where it
accepted, the reloaded program on the boundary probes; the exported program and eager on every size `fuzz`
drew). The floor's inputs are built before its clock starts, by the harness's own probe and input builders: what
is timed is torch's work alone. Goal: overall harness/floor <= 1.25x, no model over 1.5x.
"""

from __future__ import annotations

import importlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ZOO = Path(__file__).resolve().parent.parent / "corpus" / "zoo"


def zoo_cases(tag: str = "zoo-ci") -> list[tuple[str, Any, dict[str, Any]]]:
    """(name, the test function, its marker keywords) of every zoo case carrying ``tag``."""
    sys.path.insert(0, str(ZOO))
    out = []
    for path in sorted(ZOO.glob("test_zoo_*.py")):
        module = importlib.import_module(path.stem)
        for name in sorted(dir(module)):
            fn = getattr(module, name)
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "exportable"]
            if name.startswith("test_") and marks and tag in marks[0].kwargs.get("tags", ()):
                out.append((name.removeprefix("test_"), fn, dict(marks[0].kwargs)))
    return out


def _split(value: Any) -> tuple[Any, tuple, dict]:
    module, args = value[0], tuple(value[1])
    return module, args, dict(value[2]) if len(value) == 3 else {}


def _prepare(module: Any, args: tuple, kwargs: dict, keywords: dict, result: Any, workdir: Path) -> dict:
    """The floor's inputs, built with the harness's own builders before the floor's clock starts."""
    import torch

    from pytest_export.context import Context
    from pytest_export.declare.case import Case
    from pytest_export.declare.options import SessionOptions, merge
    from pytest_export.probes.choose import Probe, in_range_probes, out_of_range_probes, probe_inputs
    from pytest_export.runtimes.checks import _PAIR
    from pytest_export.probes.strategies import build_inputs, fake_inputs
    from pytest_export.stages.fuzz import value_seed
    from torch._subclasses.fake_tensor import FakeTensorMode

    options = merge(SessionOptions(check=True), {k: v for k, v in keywords.items() if k != "tags"})
    ctx = Context(Case(module, args, kwargs), options, "floor", workdir)
    ctx.read_declaration()
    ctx.ep = torch.export.export(module, args, kwargs, dynamic_shapes=ctx.export_dynamic_shapes(),
                                 strict=options.strict)
    model = ctx.require_audit().model
    # the harness ran each probe fake or numeric (issue #23): the floor runs each the same way
    guards = result.stages.get("guards")
    modes = {r["probe"]: r.get("mode") for r in (guards.data.get("probe_list", []) if guards is not None else [])}
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)

    def inputs(p: Any, builder: Any) -> tuple[str | None, tuple]:
        mode = modes.get(p.description, "numeric")
        if mode == "fake":
            return mode, fake_inputs(fake_mode, model, p.values, args, kwargs, p.override, p.inputs, builder)
        return mode, probe_inputs(ctx, model, p, builder)

    in_range = [p for p in in_range_probes(ctx, model)]
    # the probes guards added once its tiers were planned (the largest affordable size, a proof's witness): by name
    known, symbol_of = {p.description for p in in_range}, {n: v.symbol for v in model.vars for n in v.names}
    for rec in guards.data.get("probe_list", []) if guards is not None else []:
        values = {symbol_of[n]: int(x) for n, x in _PAIR.findall(rec["probe"]) if n in symbol_of}
        if rec["kind"] == "in-range" and rec["probe"] not in known and len(values) == len(model.vars):
            in_range.append(Probe(rec["probe"], values, {}, "in-range"))
    out_range = [p for p in out_of_range_probes(ctx, model)]
    probes = [inputs(p, options.input_builder if p.in_range else None) for p in in_range + out_range]
    boundary = [i for i, p in enumerate(in_range + out_range) if p.kind in ("max", "min")] + [
        i for i, p in enumerate(in_range + out_range) if p.kind == "in-range"][:2]
    drawn = []
    by_name = {n: v.symbol for v in model.vars for n in v.names}
    fuzz = result.stages.get("fuzz")
    for named in (fuzz.data.get("drawn", []) if fuzz is not None else []):
        named = dict(named)
        mode = named.pop("mode", "numeric")
        values = {by_name[n]: size for n, size in named.items() if n in by_name}
        if mode == "fake":
            drawn.append((mode, fake_inputs(fake_mode, model, values, args, kwargs, builder=options.input_builder)))
        elif mode == "numeric":
            drawn.append((mode, build_inputs(model, values, args, kwargs, value_seed(values), options.input_builder,
                                             named)))
    retrace = [inputs(p, options.input_builder) for p in in_range if p.kind == "in-range"][:4]
    return {"ds": ctx.export_dynamic_shapes(), "strict": options.strict, "probes": probes,
            "boundary": boundary, "drawn": drawn, "retrace": retrace, "fake_mode": fake_mode}


def floor(module: Any, args: tuple, kwargs: dict, prep: dict, workdir: Path) -> float:
    """The same checks, with torch alone."""
    import torch

    import contextlib

    fake_mode = prep["fake_mode"]

    def call(fn: Any, a: tuple, k: dict, mode: str | None = "numeric") -> Any:
        try:
            with fake_mode if mode == "fake" else contextlib.nullcontext():
                return fn(*a, **k)
        except Exception:  # noqa: BLE001 - a refusal is an outcome, as in the harness
            return None

    def close(x: Any, y: Any, mode: str | None = "numeric") -> None:
        try:
            if mode == "fake":  # shapes and dtypes only, as the harness compares fake runs
                assert [(t.shape, t.dtype) for t in torch.utils._pytree.tree_leaves(x)] == [
                    (t.shape, t.dtype) for t in torch.utils._pytree.tree_leaves(y)]
            else:
                torch.testing.assert_close(x, y)
        except Exception:  # noqa: BLE001 - the floor compares; a difference is not its concern
            pass

    t0 = time.perf_counter()
    ref = module(*args, **kwargs)
    close(module(*args, **kwargs), ref)
    ep = torch.export.export(module, args, kwargs, dynamic_shapes=prep["ds"], strict=prep["strict"])
    prog = ep.module()
    close(prog(*args, **kwargs), ref)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    path = workdir / "floor.pt2"
    path.write_bytes(buf.getvalue())
    loaded = torch.export.load(path).module()
    close(loaded(*args, **kwargs), ref)
    close(ep.run_decompositions().module()(*args, **kwargs), ref)
    again = torch.export.export(prog, args, kwargs, dynamic_shapes=prep["ds"], strict=prep["strict"]).module()
    close(again(*args, **kwargs), ref)
    for mode, (a, k) in prep["retrace"]:
        close(call(again, a, k, mode), call(prog, a, k, mode), mode)
    for mode, (a, k) in prep["probes"]:
        got = call(prog, a, k, mode)
        if got is not None:
            close(got, call(module, a, k, mode), mode)
    for i in prep["boundary"]:
        mode, (a, k) = prep["probes"][i]
        call(loaded, a, k, mode)
    for mode, (a, k) in prep["drawn"]:
        close(call(prog, a, k, mode), call(module, a, k, mode), mode)
    return time.perf_counter() - t0


def measure(repeats: int = 1) -> dict:
    import torch

    import pytest_export

    torch.set_num_threads(1)
    cases = zoo_cases()
    if not cases:
        return {"name": "zoo", "text": "no zoo-ci case found (is transformers installed? pip install -e '.[zoo]')"}
    # the first export of a process imports torch._dynamo (~3 s): pay it before either side is timed
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn, keywords in cases:
            harness_t, floor_t = [], []
            # warm-up, untimed: the first export and decomposition of a model in a process fill torch's caches
            # (fake-tensor dispatch, decomposition tables); whichever side ran first would pay them
            module, args, kwargs = _split(fn())
            warm = pytest_export.check(module, args, kwargs, name=name, workdir=Path(tmp) / f"{name}-warm",
                                       **{**keywords, "examples": 1})
            module, args, kwargs = _split(fn())
            floor(module, args, kwargs, _prepare(module, args, kwargs, keywords, warm, Path(tmp)), Path(tmp))
            for r in range(repeats):
                module, args, kwargs = _split(fn())
                t0 = time.perf_counter()
                result = pytest_export.check(module, args, kwargs, name=name, workdir=Path(tmp) / f"{name}-{r}",
                                             **keywords)
                harness_t.append(time.perf_counter() - t0)
                module, args, kwargs = _split(fn())
                prep = _prepare(module, args, kwargs, keywords, result, Path(tmp))
                floor_t.append(floor(module, args, kwargs, prep, Path(tmp)))
            h, f = statistics.median(harness_t), statistics.median(floor_t)
            rows.append((name, result.outcome, h, f))
    total_h, total_f = sum(r[2] for r in rows), sum(r[3] for r in rows)
    lines = [f"{'model':14s} {'outcome':8s} {'harness':>8s} {'floor':>8s} {'ratio':>6s}"]
    lines += [f"{n:14s} {o:8s} {h:7.1f}s {f:7.1f}s {h / f:5.2f}x" for n, o, h, f in rows]
    worst = max(h / f for _, _, h, f in rows)
    lines.append(f"{'overall':14s} {'':8s} {total_h:7.1f}s {total_f:7.1f}s {total_h / total_f:5.2f}x "
                 f"(goal <= 1.25x overall, no model over 1.5x; worst {worst:.2f}x)")
    return {"name": "zoo", "a": total_h, "b": total_f, "ratio": total_h / total_f,
            "text": "harness vs floor on the zoo's CI slice\n" + "\n".join("  " + ln for ln in lines)}


if __name__ == "__main__":
    print(measure()["text"])
