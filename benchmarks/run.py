"""Every benchmark of pytest-export, each printed as a ratio of two things measured side by side in one run.

    python benchmarks/run.py            # all figures
    python benchmarks/run.py --quick    # fewer repeats, no corpus xdist run, memory on BERT-base only
    python benchmarks/run.py --only memory --quick

Figures (goal in brackets):
  load      pytest over a suite without markers, plugin on vs `-p no:export`      [< 30 ms added, no torch]
  harness   `pytest --export-check` over 20 cases vs a plain torch script         [<= 1.15x]
  variants  re-export per check (PyTorch's variant-test style) vs one export per mode, both modes [>= 2.5x]
  xdist     one corpus file (12 cases) and the corpus, each with -n 2 vs -n 0      [corpus >= 1.6x on 2 cores]
  fuzz      fuzz examples/s vs (eager + exported) forward calls/s on the same inputs
  zoo       the zoo's CI slice (real transformers models) through the harness vs the same checks with torch alone
            [<= 1.25x overall, no model over 1.5x; needs the [zoo] extra]
  ranges    long declared ranges (seq to 131,072, images to 1,024 px): wall time, peak RSS, the max size checked
            by shape and by numerics  [seq 131,072 checked by shape to its max in <= 60 s and <= 2 GB]
  onnx      the `onnx` stage's duration vs `export`'s in the same check run, five models with a dynamic batch
            (conversion with torch.onnx and the ONNX Runtime checks); needs the [onnx] extra
  executorch the `executorch` stage's duration vs `export`'s in the same check run, the same five models (lowering
            with XNNPACK and the checks in ExecuTorch's runtime); needs executorch (the [executorch] extra)
  proof     the proof of the programs' guards over every declared size vs each case's own time, the zoo's CI
            slice and two planted refusals  [< 5% of a case's time on the zoo]
  plan      the plan's predicted seconds for the numeric probes of the zoo's CI slice vs their wall seconds, per
            case (bench_prediction.py)  [median and worst case within 0.67x-1.5x]; needs the [zoo] extra
  memory    real-width zoo models (BERT-base, TinyLlama's width at 2 layers, ResNet-50; --quick: BERT-base only):
            peak RSS and wall time of `pytest <case> --export-check` vs the raw floor (export plus one eager and
            one program forward, in a fresh process each), with the case's verdict and per-dim coverage
            [<= 1.3x the raw floor]; needs the [zoo] extra
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable


def _time(cmd: list[str], cwd: Path, env: dict | None = None) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if out.returncode not in (0, 5):
        raise SystemExit(f"benchmark command failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return dt


def _side_by_side(a: list[str], b: list[str], cwd: Path, repeats: int, env: dict | None = None) -> tuple[float, float]:
    """Median wall time of two commands, run interleaved so that machine noise hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(_time(a, cwd, env))
        tb.append(_time(b, cwd, env))
    return statistics.median(ta), statistics.median(tb)


def _import_ms(env: dict) -> float:
    """What importing the plugin's modules costs (after pytest), the least of five fresh interpreters."""
    best = float("inf")
    for _ in range(5):
        out = subprocess.run([PY, "-X", "importtime", "-c", "import pytest; import pytest_export.plugin"],
                             capture_output=True, text=True, env=env)
        for line in out.stderr.splitlines():
            if line.rstrip().endswith("| pytest_export.plugin"):
                best = min(best, int(line.split("|")[1]) / 1000)
    return best


def bench_load(repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for i in range(20):
            (d / f"test_plain_{i}.py").write_text("".join(f"def test_{j}():\n    assert {j} == {j}\n" for j in range(10)))
        (d / "conftest.py").write_text(
            "import sys\n"
            "def pytest_unconfigure(config):\n"
            "    assert 'torch' not in sys.modules, 'torch was imported'\n"
        )
        base = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest"]
        # as installed: with bytecode caches (pip compiles a wheel's modules; an editable checkout under
        # PYTHONDONTWRITEBYTECODE=1 would recompile the plugin's sources on every run)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        _side_by_side(base, base + ["-p", "no:export"], d, 1, env)  # warm-up: writes the caches
        on, off = [], []
        for _ in range(repeats):  # interleaved pairs: machine noise hits both sides alike
            on.append(_time(base, d, env))
            off.append(_time(base + ["-p", "no:export"], d, env))
    diffs = [(a - b) * 1000 for a, b in zip(on, off)]
    added = statistics.median(diffs)
    lo, hi = _bootstrap_ci(diffs)
    imp = _import_ms(env)
    a, b = statistics.median(on), statistics.median(off)
    return {"name": "load", "a": a, "b": b, "ratio": a / b, "added_ms": added,
            "text": f"plugin on {a*1000:.0f} ms vs off {b*1000:.0f} ms: {added:+.0f} ms added (median of {repeats} "
                    f"interleaved pairs, 95% interval {lo:+.0f}..{hi:+.0f} ms; the plugin's imports {imp:.0f} ms), "
                    f"torch not imported (goal < 30 ms)"}


def _bootstrap_ci(xs: list[float], rounds: int = 2000) -> tuple[float, float]:
    """A percentile bootstrap interval of the median: how far machine noise leaves the figure uncertain."""
    import random

    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(rounds))
    return meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]


def bench_harness(repeats: int) -> dict:
    harness = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--export-check",
               "test_bench_cases.py", *EXTRA_HARNESS_ARGS]
    plain = [PY, "plain.py"]
    h, p = _side_by_side(harness, plain, HERE, repeats)
    return {"name": "harness", "a": h, "b": p, "ratio": h / p,
            "text": f"pytest --export-check {h:.2f} s vs plain torch script {p:.2f} s: {h/p:.2f}x (goal <= 1.15x)"}


# the plain script does the core checks (eager twice, export, compare, save/load twice, decompositions):
# the harness runs exactly those, the dynamic-shape and deployment stages are measured on their own (fuzz)
EXTRA_HARNESS_ARGS: list[str] = ["--export-skip-stages", "guards,fuzz,retrace", "-W", "ignore"]


def bench_variants(repeats: int) -> dict:
    """In one process, both tracing modes: our one export per mode vs PyTorch's variant tests, which export again
    for every check; plus the least any one-export design can cost (the same checks done directly with torch)."""
    import io

    import torch

    import warnings

    import pytest_export
    from cases import make_cases
    from pytest_export.declare.options import SessionOptions

    warnings.filterwarnings("ignore")
    cases = make_cases()
    modes = (False, True)  # non-strict and strict: PyTorch runs its serdes/retrace/decomposition variants in both
    # per mode the same checks on both sides: compare, serde, retrace (one more export, by definition) and
    # decompositions; guards and fuzz have no variant counterpart. Our side also runs `unflatten`, which the
    # variants do not: the figure errs against us.
    session = SessionOptions(check=True, skip_stages=("guards", "fuzz"))
    decomp_s = [0.0]

    def one_export():
        for name, module, args in cases:
            for strict in modes:
                r = pytest_export.check(module, args, name=name, session=session, strict=strict)
                assert r.outcome == "passed", r.failure_text()

    def variants():
        # PyTorch's export tests run each check as its own variant of the test, exporting again each time
        for name, module, args in cases:
            ref = module(*args)
            for strict in modes:
                ep = torch.export.export(module, args, strict=strict)                 # plain
                torch.testing.assert_close(ep.module()(*args), ref)
                ep = torch.export.export(module, args, strict=strict)                 # serdes variant
                buf = io.BytesIO()
                torch.export.save(ep, buf)
                buf.seek(0)
                torch.testing.assert_close(torch.export.load(buf).module()(*args), ref)
                ep = torch.export.export(module, args, strict=strict)                 # retraceability variant
                ep2 = torch.export.export(ep.module(), args, strict=strict)
                torch.testing.assert_close(ep2.module()(*args), ref)
                ep = torch.export.export(module, args, strict=strict)                 # decomposition variant
                torch.testing.assert_close(ep.run_decompositions().module()(*args), ref)

    def ceiling():
        # one export per mode and the same checks, with no harness at all
        for name, module, args in cases:
            ref = module(*args)
            for strict in modes:
                ep = torch.export.export(module, args, strict=strict)
                torch.testing.assert_close(ep.module()(*args), ref)
                buf = io.BytesIO()
                torch.export.save(ep, buf)
                buf.seek(0)
                torch.testing.assert_close(torch.export.load(buf).module()(*args), ref)
                ep2 = torch.export.export(ep.module(), args, strict=strict)
                torch.testing.assert_close(ep2.module()(*args), ref)
                t0 = time.perf_counter()
                dec = ep.run_decompositions()
                decomp_s[0] += time.perf_counter() - t0
                torch.testing.assert_close(dec.module()(*args), ref)

    full = cases
    cases = full[:1]
    one_export()  # warm up every path on one case (the first export pays the imports)
    variants()
    ceiling()
    cases = full
    t_one, t_var, t_min, t_dec = [], [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter(); variants(); t_var.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); one_export(); t_one.append(time.perf_counter() - t0)
        decomp_s[0] = 0.0
        t0 = time.perf_counter(); ceiling(); t_min.append(time.perf_counter() - t0)
        t_dec.append(decomp_s[0])
    v, o, m, d = (statistics.median(t) for t in (t_var, t_one, t_min, t_dec))
    return {"name": "variants", "a": v, "b": o, "ratio": v / o,
            "text": f"re-export per check {v:.2f} s vs one export per mode {o:.2f} s: {v/o:.2f}x faster "
                    f"(goal >= 2.5x); the least a one-export run can cost is {m:.2f} s ({v/m:.2f}x), of which "
                    f"run_decompositions() is {d:.2f} s ({d/m:.0%}), paid once per mode on both sides"}


# where -n starts to pay: a small repository (one corpus file) and the whole corpus, each -n 0 vs -n 2
XDIST_SETS = {"small": ["corpus/test_basics.py"], "corpus": ["corpus"]}


def bench_xdist(repeats: int) -> dict:
    parts, out = [], {}
    for label, paths in XDIST_SETS.items():
        base = [PY, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "--export-check"]
        n2, n0 = _side_by_side(base + ["-n", "2"], base + ["-n", "0"], ROOT, repeats)
        out[label] = (n0, n2)
        parts.append(f"{label} ({' '.join(paths)}) -n 0 {n0:.1f} s vs -n 2 {n2:.1f} s: {n0/n2:.2f}x")
    n0, n2 = out["corpus"]
    return {"name": "xdist", "a": n0, "b": n2, "ratio": n0 / n2,
            "text": "; ".join(parts) + " (goal for the corpus >= 1.6x on 2 cores)"}


def bench_fuzz(repeats: int) -> dict | None:
    try:
        import bench_fuzz  # the fuzz stage's own benchmark
    except ImportError:
        return None
    return bench_fuzz.measure(repeats)


def bench_zoo(repeats: int) -> dict | None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    import bench_zoo

    return bench_zoo.measure(1)


def bench_ranges(repeats: int) -> dict | None:
    import bench_ranges

    return bench_ranges.measure()


def bench_onnx(repeats: int) -> dict | None:
    import bench_onnx  # the onnx stage's own benchmark

    return bench_onnx.measure(repeats)


def bench_executorch(repeats: int) -> dict | None:
    import bench_executorch  # the executorch stage's own benchmark

    return bench_executorch.measure(repeats)


def bench_proof(repeats: int) -> dict | None:
    import bench_proof  # what deciding the guards over the declared box costs per case (issue #41)

    return bench_proof.measure()


def bench_plan(repeats: int) -> dict | None:
    """Predicted vs wall seconds of the zoo slice's numeric probes, per case (issue #50)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return None
    import bench_prediction

    calls = bench_prediction.measure(["corpus/zoo"], ["--export-tags", "zoo-ci"], calls=True)
    lines, ratios = bench_prediction.time_table(calls)
    if not ratios:
        return None
    return {"text": bench_prediction.time_summary(ratios) + "\n" + "\n".join("          " + ln for ln in lines),
            "ratios": ratios}


def bench_memory(quick: bool) -> dict | None:
    import bench_memory  # real-width models: the harness's peak memory vs the raw floor's

    return bench_memory.measure(bench_memory.QUICK if quick else tuple(bench_memory.MODELS))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no corpus xdist run, memory on BERT-base only")
    ap.add_argument("--only", help="comma-separated subset: load,harness,variants,xdist,fuzz,zoo,ranges,onnx,executorch,"
                    "proof,plan,memory")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    repeats = 1 if args.quick else 3
    wanted = set((args.only or "load,harness,variants,xdist,fuzz,zoo,ranges,onnx,executorch,proof,plan,memory").split(","))
    if args.quick:
        wanted.discard("xdist")
    runs = {"load": lambda: bench_load(repeats * 10), "harness": lambda: bench_harness(repeats),
            "variants": lambda: bench_variants(repeats), "xdist": lambda: bench_xdist(1), "fuzz": lambda: bench_fuzz(repeats),
            "zoo": lambda: bench_zoo(repeats), "ranges": lambda: bench_ranges(repeats),
            "onnx": lambda: bench_onnx(repeats), "executorch": lambda: bench_executorch(repeats),
            "proof": lambda: bench_proof(repeats), "plan": lambda: bench_plan(repeats),
            "memory": lambda: bench_memory(args.quick)}
    print(f"pytest-export benchmarks (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    for name, fn in runs.items():
        if name not in wanted:
            continue
        res = fn()
        if res is None:
            print(f"{name:9s} (not available)")
            continue
        print(f"{name:9s} {res['text']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
