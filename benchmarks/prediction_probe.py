"""A pytest plugin for ``bench_prediction.py``: each numeric probe's measured memory beside its prediction.

Loaded with ``-p prediction_probe`` (``benchmarks/`` on ``PYTHONPATH``); writes one JSON line per numeric probe to
``$PREDICTION_LOG``: the case, the probe's sizes, its predicted bytes (``Plan.bytes``: eager's forward, then the
program's while eager's outputs are held; ``counted``: from its own fake count, not bounded by a larger
probe's) and what the process's resident memory rose by, from before the probe's
first real call (its inputs made inside it) to the high-water mark after its last one. The high-water mark is
reset, after glibc has handed freed heap back, before each probe's first call (``calibration.resident_mark``),
as the harness does for ``ranges.largest``. It slows probing; it is for this benchmark only.
"""

from __future__ import annotations

import json
import os


def pytest_configure(config):
    import itertools

    from pytest_export.probes import sizing
    from pytest_export.probes.calibration import resident_high, resident_mark

    log, numeric, ids = os.environ["PREDICTION_LOG"], sizing._numeric, itertools.count()

    def measured(ctx, sized, call, instead):
        if getattr(sized, "bench_base", None) is None:
            sized.bench_base, sized.bench_id = resident_mark(), next(ids)
        if sized.bench_base is None:  # not measurable here
            return numeric(ctx, sized, call, instead)
        try:
            return numeric(ctx, sized, call, instead)
        finally:
            with open(log, "a") as f:
                f.write(json.dumps({"case": ctx.nodeid, "probe": sized.bench_id, "sizes": dict(sized.values),
                                    "in_range": sized.in_range, "predicted": sized.plan.bytes,
                                    # its own fake count (else a larger probe's, which bounds it: ``_bounded``)
                                    "counted": bool(sized._measured and sized._measured[0] is not None),
                                    "measured": resident_high() - sized.bench_base}) + "\n")

    sizing._numeric = measured
