"""Real promises at bounded cost (issue #23): declared ranges checked to their max with fake tensors, numerics
where the predicted cost fits the memory cap and the budget, and the report says which was which.

Each test plants one thing: a clean long-range model, a narrowed one, a program wrong only at sizes numerics
cannot reach, a data-dependent model fake tensors cannot run, the memory cap held (peak RSS in a subprocess),
and a probe far costlier than predicted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.memory import cost
from pytest_export.declare.values import parse_memory
from pytest_export.memory.cost import coverage_line


class Attention(torch.nn.Module):
    """A 2-head attention block (width 32), as the issue measured it."""

    def __init__(self):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(32, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


LONG = {"x": {0: Dim("batch", min=1, max=64), 1: Dim("seq", min=1, max=131072)}}


def _coverage(res) -> dict[str, dict]:
    return {row["dim"]: row for row in res.info["ranges"]["dims"]}


def _probes(res) -> list[dict]:
    return res.stages["guards"].data["probe_list"]


@pytest.mark.slow
def test_a_clean_long_range_case_passes_with_numerics_capped_and_shapes_to_the_max():
    torch.manual_seed(0)
    res = pytest_export.check(Attention(), (torch.randn(2, 16, 32),), dynamic_shapes=LONG, max_memory="64MB",
                              examples=5, name="ranges::clean")
    assert res.outcome == "passed", res.failure_text()
    seq = _coverage(res)["seq"]
    assert seq["shape_max"] == 131072  # the declared max, checked by shape
    assert seq["numeric_max"] is not None and seq["numeric_max"] < 131072  # numerics capped...
    assert seq["numeric_max"] > 16  # ...but above the example: the largest affordable size ran
    assert "max_memory 64 MB" in seq["why"] or "budget" in seq["why"], seq
    modes = {p["probe"]: p["mode"] for p in _probes(res)}
    assert modes["batch=64, seq=131072"] == "fake" and modes["batch=1, seq=1"] == "numeric"
    assert set(modes.values()) == {"fake", "numeric"}  # every probe says how it ran
    line = [ln for ln in res.coverage_lines() if ln.startswith("seq:")][0]
    assert line.startswith("seq: shapes checked to 131072 (max); numerics to "), line
    assert all(d["mode"] in ("fake", "numeric") for d in res.stages["fuzz"].data["drawn"])


class Narrowed(torch.nn.Module):
    """Computes something else past 8,192 tokens: export keeps only one branch, so it narrows the range."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.largest_real = 0

    def forward(self, x):
        if not isinstance(x, torch._subclasses.fake_tensor.FakeTensor) and not torch.compiler.is_exporting():
            self.largest_real = max(self.largest_real, x.numel() * x.element_size())
        if x.shape[1] <= 8192:
            return self.lin(x)
        return self.lin(x).flip(1)


def test_a_model_narrowed_at_8192_fails_guards_and_allocates_nothing_past_the_cap():
    model = Narrowed()
    cap = 16 * 2**20  # seq 131072 (a 4 MB input) needs ~20 MB: fake
    res = pytest_export.check(model, (torch.randn(2, 16, 8),), name="ranges::narrowed", max_memory=cap, examples=5,
                              dynamic_shapes={"x": {0: Dim.AUTO(min=1, max=64), 1: Dim.AUTO(min=1, max=131072)}})
    assert res.stages["guards"].status == "failed", res.failure_text()
    assert "8192" in res.stages["guards"].message
    refused = [p for p in _probes(res) if p["kind"] == "in-range" and p["program"] == "refused"]
    assert refused and all(p["mode"] == "fake" for p in refused if "131072" in p["probe"])
    assert 0 < model.largest_real <= cap  # no real input past the cap, ever
    assert "coverage of the declared ranges" in res.failure_text()


class TokenCap(torch.nn.Module):
    """Refuses more than 2**22 tokens per batch: a relation between two dims, which export keeps as a guard but not
    in the dims' ranges (both stay whole). Only a probe at batch x seq > 2**22 finds it; numerics cannot get there."""

    def forward(self, x):
        if torch.compiler.is_exporting():
            torch._check(x.shape[0] * x.shape[1] <= 2**22)
        return x * 2


def test_a_program_refusing_sizes_numerics_cannot_reach_is_found_by_a_fake_probe():
    res = pytest_export.check(TokenCap(), (torch.randn(2, 16, 4),), name="ranges::cap", max_memory="8MB",
                              dynamic_shapes=LONG, examples=5)
    assert res.stages["guards"].status == "failed", res.failure_text()
    msg = res.stages["guards"].message
    assert "refused in-range sizes batch=64, seq=131072 (fake tensors" in msg, msg
    assert "x.size()[1] * x.size()[0] <= 4194304" in msg
    bad = [p for p in _probes(res) if "finding" in p]
    assert bad and all(p["mode"] == "fake" for p in bad)
    # export kept both ranges whole (the audit alone would not see it); the probes mark the refusal
    assert [r["achieved_range"] for r in res.info["shapes"]] == [[1, 64], [1, 131072]]
    assert {r["status"] for r in res.info["shapes"]} == {"refused-in-range"}
    assert _coverage(res)["seq"]["numeric_max"] * 2 < 2**22  # numerics could not have found it


class DataDependent(torch.nn.Module):
    """Reads a tensor's value as a size: fake tensors cannot run it."""

    def forward(self, x, n):
        k = n.sum().item()
        torch._check(k >= 0)
        torch._check(k <= 4)
        return x[:, :k] * 2


def test_a_data_dependent_model_falls_back_to_numerics_with_its_reason():
    res = pytest_export.check(DataDependent(), (torch.randn(2, 8), torch.tensor([1, 2])), name="ranges::dd",
                              dynamic_shapes={"x": {0: Dim("b", min=1, max=16)}, "n": None}, examples=5)
    assert res.outcome == "passed", res.failure_text()
    cov = res.info["ranges"]
    assert "data-dependent" in cov["fake_problem"].lower() or "item" in cov["fake_problem"].lower() \
        or "local_scalar_dense" in cov["fake_problem"], cov
    assert {p["mode"] for p in _probes(res)} == {"numeric"}  # the fallback: never a failure of the model
    assert any("fake tensors cannot run this model" in ln for ln in res.coverage_lines())


def test_fuzz_examples_not_checked_say_why_in_the_stage_and_the_coverage_line():
    """Issue #32: fuzz said "20 examples" and the coverage line stopped at the last numeric size, with no reason,
    when fake tensors cannot run the model and its large sizes exceed the memory cap."""
    res = pytest_export.check(DataDependent(), (torch.randn(2, 8), torch.tensor([1, 2])), name="ranges::dd-capped",
                              dynamic_shapes={"x": {0: Dim("b", min=1, max=1 << 24)}, "n": None}, examples=12,
                              max_memory="2MB")
    assert res.outcome == "passed", res.failure_text()
    fuzz = res.stages["fuzz"]
    assert fuzz.data["unchecked"] >= 1  # b=16777216, a boundary, at least
    why = fuzz.data["unchecked_why"]
    assert why.startswith("b=") and "fake tensors cannot run it" in why and "max_memory 2 MB" in why, why
    assert f"{fuzz.data['unchecked']} of them not checked (" in fuzz.message and "max_memory 2 MB" in fuzz.message
    b = _coverage(res)["b"]
    assert b["numeric_max"] < 1 << 24 and "fake tensors cannot run it" in b["why"] and "max_memory 2 MB" in b["why"]
    line = [ln for ln in res.coverage_lines() if ln.startswith("b:")][0]
    assert "max_memory 2 MB" in line, line


MEMORY_SCRIPT = textwrap.dedent('''
    import json, resource, sys, torch
    from torch.export import Dim
    import pytest_export

    class Wide(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(256, 256)
        def forward(self, x):
            return torch.relu(self.lin(x)) + x

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res = pytest_export.check(Wide(), (torch.randn(2, 16, 256),), name="ranges::memory", max_memory=sys.argv[1],
                              examples=5, dynamic_shapes={"x": {1: Dim("seq", min=1, max=1 << 20)}})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"outcome": res.outcome, "before": before, "peak": peak, "ranges": res.info["ranges"]}))
''')


@pytest.mark.slow
def test_the_memory_cap_holds_peak_rss_measured_in_a_subprocess(tmp_path):
    # numerics at the declared max would need ~4 GB (a 1 GiB input, its clone, the outputs of eager and program)
    script = tmp_path / "memory.py"
    script.write_text(MEMORY_SCRIPT)
    out = subprocess.run([sys.executable, str(script), "128MB"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["outcome"] == "passed", got
    seq = {r["dim"]: r for r in got["ranges"]["dims"]}["seq"]
    assert seq["shape_max"] == 1 << 20 and seq["numeric_max"] < 1 << 20
    # what the checks added on top of torch, the model and the export: within the cap (and far below 4 GB)
    grown = got["peak"] - got["before"]
    assert grown < 600 * 2**20, (grown, got)


COND_SCRIPT = textwrap.dedent('''
    import json, resource, sys, torch
    from torch.export import Dim
    import pytest_export

    def spread(x):  # b x b x 32 floats from a matmul of x with its transpose: 4096 times the input at b=8
        return torch.mm(x, x.t()).unsqueeze(-1).expand(-1, -1, 32).cos().sum(-1)

    def spread_sin(x):
        return torch.mm(x, x.t()).unsqueeze(-1).expand(-1, -1, 32).sin().sum(-1)

    class GramCond(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, spread, spread_sin, (x,))

    torch.manual_seed(0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    res = pytest_export.check(GramCond(), (torch.randn(8, 1),), name="ranges::cond", max_memory=sys.argv[1],
                              examples=5, budget=0, dynamic_shapes={"x": {0: Dim("b", min=2, max=1 << 16)}})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"outcome": res.outcome, "before": before, "peak": peak, "ranges": res.info["ranges"],
                      "lines": res.coverage_lines()}))
''')


@pytest.mark.slow
def test_the_memory_cap_holds_for_a_program_with_higher_order_ops(tmp_path):
    """Issue #32: torch's counting modes cannot follow into ``torch.cond``'s branches, and the example's live
    tensors were taken as four times its inputs: under a 64 MB cap this model grew by 2 GB. Its peak is now the
    process's resident high-water mark around the example's real forward, and the cap holds."""
    script = tmp_path / "cond.py"
    script.write_text(COND_SCRIPT)
    out = subprocess.run([sys.executable, str(script), "64MB"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["outcome"] == "passed", got
    b = {r["dim"]: r for r in got["ranges"]["dims"]}["b"]
    assert b["shape_max"] == 1 << 16 and 8 < b["numeric_max"] < 1 << 16, b
    assert "max_memory 64 MB" in b["why"], b  # the coverage line says why numerics stopped
    assert any(ln.startswith("b:") and "max_memory 64 MB" in ln for ln in got["lines"]), got["lines"]
    assert got["ranges"]["example"]["peak_bytes"] >= 64 * 1024  # measured, not four times its 32-byte input
    grown = got["peak"] - got["before"]  # torch, the export and the checks on top of the cap: far below 2 GB
    assert grown < 600 * 2**20, (grown, got)


class Gate(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.cos(), lambda x: x.sin(), (x,))


def test_a_higher_order_program_whose_peak_cannot_be_measured_runs_numerics_at_the_example_size_only(monkeypatch):
    from pytest_export.memory import calibration

    monkeypatch.setattr(calibration, "resident_peak", lambda run: (run(), (0, "cannot be measured here (planted)"))[1])
    res = pytest_export.check(Gate(), (torch.randn(4, 3),), name="ranges::cond-unmeasured", examples=3,
                              dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}})
    assert res.outcome == "passed", res.failure_text()
    assert res.info["ranges"]["peak_problem"] == "cannot be measured here (planted)"
    b = _coverage(res)["b"]
    assert b["shape_max"] == 64 and b["numeric_max"] == 4, b  # the example's size, no guess past it
    assert "past the example's size: cannot be measured here (planted)" in b["why"], b


class SlowPastFour(torch.nn.Module):
    """Costs nothing a fake run can see, and works 3 s (CPU time) on real inputs past size 4: far costlier than
    predicted."""

    def forward(self, x):
        import time

        if (not torch.compiler.is_exporting() and x.shape[0] > 4
                and not isinstance(x, torch._subclasses.fake_tensor.FakeTensor)):
            t0 = time.process_time()
            while time.process_time() - t0 < 3:
                pass
        return x + 1


@pytest.mark.slow
def test_a_probe_far_costlier_than_predicted_is_checked_by_shape_and_said(monkeypatch):
    """Its time limit (CPU time) stops it; the probe is checked by shape instead and the coverage says so: never an
    `error` (issue #51: a loaded runner made one that an idle one did not)."""
    monkeypatch.setattr(cost, "PROBE_TIMEOUT_FLOOR", 0.5)
    shapes = {"x": {0: Dim("b", min=1, max=8)}}
    res = pytest_export.check(SlowPastFour(), (torch.randn(2, 3),), name="ranges::slow", examples=2,
                              dynamic_shapes=shapes)
    assert res.outcome == "passed", res.failure_text()
    stopped = res.info["ranges"]["stopped"]
    assert stopped and "stopped by its time limit: the numeric run used 0.5 s of CPU time" in stopped[0], stopped
    assert "the model is far costlier at these sizes than counted" in stopped[0]
    b = _coverage(res)["b"]
    assert b["shape_max"] == 8 and b["numeric_max"] <= 4, b
    strict = pytest_export.check(SlowPastFour(), (torch.randn(2, 3),), name="ranges::slow", examples=2,
                                 dynamic_shapes=shapes, require_numerics=True)
    assert strict.outcome == "error" and "numerics" in strict.error, strict.error


def test_memory_sizes_parse_and_bad_ones_name_the_option():
    assert parse_memory("6GB") == 6 * 10**9 and parse_memory("512MiB") == 512 * 2**20
    assert parse_memory(1000) == 1000 and parse_memory(None) is None
    for bad in ("lots", "-1GB", "0", True):
        with pytest.raises(ValueError, match="--export-max-memory must be"):
            parse_memory(bad)


def test_the_coverage_line_says_how_far_shapes_and_numerics_went():
    row = {"dim": "seq", "declared": [1, 131072], "shape_max": 131072, "numeric_max": 2048,
           "why": "batch=2, seq=4096 needs ~17 GB > max_memory 6 GB"}
    assert coverage_line(row) == ("seq: shapes checked to 131072 (max); numerics to 2048 "
                                  "(batch=2, seq=4096 needs ~17 GB > max_memory 6 GB)")
    assert coverage_line({**row, "numeric_max": 131072, "why": ""}) == (
        "seq: shapes checked to 131072 (max); numerics to 131072 (max)")


def test_the_default_cap_divides_a_share_of_memory_among_xdist_workers(monkeypatch):
    monkeypatch.setattr(cost, "machine_memory", lambda: 32 * 2**30)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert cost.default_max_memory() == 2 * 2**30
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    assert cost.default_max_memory() == 512 * 2**20


# ---- through pytest: the option, the marker keyword, the report and the Markdown summary -------------------

PLUGIN_CASES = '''
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)
    def forward(self, x):
        return self.l(x)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("seq", min=1, max=1 << 20)}}, examples=4)
def test_long():
    torch.manual_seed(0)
    return Lin(), (torch.randn(16, 8),)

@pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("seq", min=1, max=1 << 20)}}, examples=4, max_memory="1GB")
def test_roomy():
    torch.manual_seed(0)
    return Lin(), (torch.randn(16, 8),)
'''


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_max_memory_option_and_keyword_reach_the_report_and_the_summary(pytester, workers):
    from tests.helpers import run_check, write_cases

    write_cases(pytester, PLUGIN_CASES)
    result, data = run_check(pytester, "--export-max-memory", "1MB", "--export-summary-md", "summary.md",
                             "--hypothesis-seed", "0", *workers)
    result.assert_outcomes(passed=2)
    cases = {c["nodeid"].split("::")[-1]: c for c in data["cases"]}
    long, roomy = cases["test_long"]["ranges"], cases["test_roomy"]["ranges"]
    assert long["max_memory"] == 10**6 and roomy["max_memory"] == 10**9  # the marker's keyword wins
    seq = long["dims"][0]
    assert seq["shape_max"] == 1 << 20 and seq["numeric_max"] < roomy["dims"][0]["numeric_max"]
    assert "max_memory 1 MB" in seq["why"]
    md = (pytester.path / "summary.md").read_text()
    assert "Declared ranges" in md and "seq: shapes checked to 1048576 (max); numerics to" in md


def test_a_bad_max_memory_is_a_usage_error_naming_the_option(pytester):
    from tests.helpers import write_cases

    write_cases(pytester, PLUGIN_CASES)
    result = pytester.runpytest("--export-check", "--export-max-memory", "plenty")
    result.stderr.fnmatch_lines(["*--export-max-memory must be a size such as 4GB*'plenty'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
