"""Stage ``aoti`` (off by default): AOTInductor compiles the program into a package that loads and computes right.

``torch._inductor.aoti_compile_and_package`` writes the package under the case's own temp dir, with inductor's
caches (``TORCHINDUCTOR_CACHE_DIR``) and the loader's extraction dir (``TMPDIR``) under the run's temp dir, not
the user's ``/tmp``; both variables are restored afterwards. ``aoti_load_package`` loads it; the compiled model
must match eager (or the exported program where ``compare`` failed) on the example and the exported program on
the boundary sizes of the declared ranges (``strategies``/``shapes`` through the guards' in-range probes), and, with
``AOTI_RUNTIME_CHECK_INPUTS=1`` (read once per compiled model, at its first call: set for the stage), refuse
every out-of-range size: max + 1, min - 1, a wrong static size, a broken relation between axes. An input that
runs to completion is a failure; one refused by a size assertion inside the model rather than by the input
checks is a warning (``raised_inside``). Compile and load times are reported.

Run it with ``--export-aoti`` or the marker keyword ``aoti=True``; one compile costs seconds to tens of seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..context import Context, Stage, StageFailure
from ..probes.choose import NUMERIC, in_range_inputs, out_of_range_inputs, plan_for
from ..torchside.compare import Mismatch
from ..torchside.observe import (RUN_SEED, Observation, clone_inputs, compare_observations, random_note, seed_all,
                                 without_random)
from ..torchside.ops import random_outputs


def _numeric(ctx: Context, probe: Any) -> bool:
    """Whether the compiled model can run this probe: real inputs within the memory cap. The budget does not
    decide here: the compile before it may have spent it, and these are a few fixed sizes."""
    probe.budgeted = False
    return plan_for(ctx, probe).mode == NUMERIC
from ..results import FAILED, XFAILED
from ..util import describe_exception, environment, plural

REFUSAL = ("input_handles[", "dim value is too", "unmatched dim value", "unmatched dtype", "unmatched device")
MAX_SIZE_CHECKS = 8


def cache_dir(ctx: Context) -> Path:
    """Inductor's caches for this run: the session's temp dir (shared by its cases), else the case's workdir."""
    root = ctx.session.run_tmp_dir() if ctx.session is not None else None
    path = (root or ctx.workdir) / "inductor-cache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _call(model: Any, args: tuple, kwargs: dict) -> Observation:
    a, k = clone_inputs((args, kwargs))
    seed_all(RUN_SEED)
    out = model(*a, **k)
    return Observation(out, (a, k), {})


def run(ctx: Context) -> dict[str, Any]:
    out_dir = ctx.workdir / "aoti"
    tmp = out_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    cache = cache_dir(ctx)
    # inductor sets TORCHINDUCTOR_CACHE_DIR itself (to /tmp/torchinductor_<user>) the first time it looks it up
    # unset, also while loading: the whole stage runs inside the set-up environment, restored after
    with environment(TORCHINDUCTOR_CACHE_DIR=str(cache), TMPDIR=str(tmp), AOTI_RUNTIME_CHECK_INPUTS="1"):
        return _compile_load_check(ctx, out_dir, cache)


def _compile_load_check(ctx: Context, out_dir: Path, cache: Path) -> dict[str, Any]:
    import torch
    import torch._inductor

    t0 = time.perf_counter()
    try:
        path = torch._inductor.aoti_compile_and_package(ctx.ep, package_path=str(out_dir / "model.pt2"))
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"aoti_compile_and_package raised: {describe_exception(exc)}", exception=type(exc).__name__,
                           compile_s=round(time.perf_counter() - t0, 3))
    data: dict[str, Any] = {"compile_s": round(time.perf_counter() - t0, 3),
                            "package_bytes": os.path.getsize(path), "cache_dir": str(cache)}
    t1 = time.perf_counter()
    try:
        model = torch._inductor.aoti_load_package(path)
    except Exception as exc:  # noqa: BLE001
        raise StageFailure(f"aoti_load_package raised: {describe_exception(exc)}", **data)
    data["load_s"] = round(time.perf_counter() - t1, 3)
    return _check(ctx, model, data)


def _check(ctx: Context, model: Any, data: dict[str, Any]) -> dict[str, Any]:
    # only a failed compare moves the reference off eager; one skipped on request does not (issue #24)
    exported_ok = ctx.result.stage_status("compare") not in (FAILED, XFAILED)
    against = "eager" if exported_ok else "the exported program (compare failed)"

    def reference(args: tuple, kwargs: dict) -> Observation:
        if exported_ok:
            return ctx.eager_on(args, kwargs)
        return ctx.program_on(ctx.ep, args, kwargs)

    # values fed by random ops: Inductor's random stream is not eager's (nor the program's), so they are held to
    # their structure, shapes and dtypes only, never called wrong (issue #24)
    random = random_outputs(ctx.ep)
    note = random_note(random, "Inductor")

    def outputs_only(obs: Observation) -> Observation:
        # the compiled model returns outputs; mutated inputs and buffers are not part of its interface
        return without_random(Observation(obs.outputs, obs.inputs, {}), random)

    def check(label: str, args: tuple, kwargs: dict, example: bool) -> dict[str, float]:
        try:
            got = _call(model, args, kwargs)
        except Exception as exc:  # noqa: BLE001
            raise StageFailure(f"the AOTInductor model raised on {label}: {describe_exception(exc)}", **data)
        # at other sizes the reference is the compiled program: its own defects there are guards' and fuzz's
        ref, what = (reference, against) if example else (lambda a, k: ctx.program_on(ctx.ep, a, k), "the exported program")
        raw = ref(args, kwargs)
        want = outputs_only(raw)
        try:
            return compare_observations(outputs_only(Observation(got.outputs, raw.inputs, {})), want, ctx.options)
        except Mismatch as exc:
            raise StageFailure(f"the AOTInductor model disagrees with {what} on {label}:\n{exc}",
                               errors=exc.errors, **exc.worst(), **data)

    worst = check("the example inputs", ctx.case.args, ctx.case.kwargs, True)
    sizes = 0
    # the compiled model runs real tensors only: the sizes numerics can afford (issue #23)
    for named, probe in [p for p in in_range_inputs(ctx) if p[0] and _numeric(ctx, p[1])][:MAX_SIZE_CHECKS]:
        a, k = probe.real()
        label = "sizes " + ", ".join(f"{n}={v}" for n, v in named.items())
        try:
            ctx.program_on(ctx.ep, a, k)
        except Exception:  # noqa: BLE001 - the exported program refuses these sizes: guards reports it
            continue
        errs = check(label, a, k, False)
        worst = {key: max(worst[key], errs[key]) for key in worst}
        sizes += 1
    refused = 0
    raised: list[str] = []
    for description, probe in out_of_range_inputs(ctx):
        if not _numeric(ctx, probe):
            continue
        a, k = probe.real()
        try:
            _call(model, a, k)
        except Exception as exc:  # noqa: BLE001
            refused += 1
            if not any(r in str(exc) for r in REFUSAL):
                # not the input checks but a size assertion inside the model (torch 2.13: a broken relation
                # between two inputs' axes is not among the input checks); it still returns nothing wrong
                first = describe_exception(exc, 300).splitlines()[0]
                raised.append(f"{description}: {first}")
            continue
        raise StageFailure(f"the AOTInductor model accepted out-of-range sizes {description} with "
                           "AOTI_RUNTIME_CHECK_INPUTS=1: its input checks do not enforce the declared range", **data)
    for r in raised:
        ctx.result.warnings.append(f"aoti: out-of-range sizes raised inside the compiled model, not at its input "
                                   f"checks: {r}")
    data.update(worst)
    data.update(sizes_checked=sizes, refused=refused, raised_inside=raised)
    data["message"] = (f"compiled in {data['compile_s']:.1f} s; matches {against} on the example and the exported "
                       f"program on {plural(sizes, 'boundary size')}; refused {plural(refused, 'out-of-range input')}"
                       + (f"; {note}" if note else ""))
    if note:
        data.update(random_ops=random["ops"], not_compared=note)
    return data


def _enabled(ctx: Context) -> bool:
    return ctx.options.aoti


STAGE = Stage("aoti", run, needs=("eager", "export"), enabled=_enabled)
