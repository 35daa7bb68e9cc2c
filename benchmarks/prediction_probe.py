"""A pytest plugin for ``bench_prediction.py``: each numeric probe's measured memory and time beside its prediction.

Loaded with ``-p prediction_probe`` (``benchmarks/`` on ``PYTHONPATH``); writes one JSON line per numeric probe to
``$PREDICTION_LOG``: the case, the probe's sizes, its predicted bytes (``Plan.bytes``: eager's forward, then the
program's while eager's outputs are held; ``counted``: from its own fake count, not bounded by a larger
probe's) and what the process's resident memory rose by, from before the probe's
first real call (its inputs made inside it) to the high-water mark after its last one. The high-water mark is
reset, after glibc has handed freed heap back, before each probe's first call (``calibration.resident_mark``),
as the harness does for ``ranges.largest``. Each line also holds the probe's predicted seconds (``Plan.seconds``:
eager's forward and the program's together, at the nominal rates) and the wall seconds of that one numeric call
(``seconds``), so a probe's calls add up to its measured time. It slows probing; it is for this benchmark only.
"""

from __future__ import annotations

import json
import os
import time


def pytest_configure(config):
    import itertools

    from pytest_export.probes import sizing
    from pytest_export.memory.calibration import resident_high, resident_mark

    log, numeric, ids = os.environ["PREDICTION_LOG"], sizing._numeric, itertools.count()

    def measured(ctx, sized, call, instead):
        if getattr(sized, "bench_base", None) is None:
            sized.bench_base, sized.bench_id = resident_mark(), next(ids)
        if sized.bench_base is None:  # not measurable here
            return numeric(ctx, sized, call, instead)
        t0 = time.perf_counter()
        try:
            return numeric(ctx, sized, call, instead)
        finally:
            seconds = time.perf_counter() - t0
            m = sized._measured[0] if sized._measured else None
            with open(log, "a") as f:
                f.write(json.dumps({"case": ctx.nodeid, "probe": sized.bench_id, "sizes": dict(sized.values),
                                    "in_range": sized.in_range, "predicted": sized.plan.bytes,
                                    # its own fake count (else a larger probe's, which bounds it: ``_bounded``)
                                    "counted": bool(sized._measured and sized._measured[0] is not None),
                                    "measured": resident_high() - sized.bench_base,
                                    "predicted_s": sized.plan.seconds, "seconds": seconds,
                                    **({"flops": m.flops, "conv_flops": m.conv_flops, "bytes_made": m.total, "ops": m.ops}
                                       if m else {})}) + "\n")

    sizing._numeric = measured
