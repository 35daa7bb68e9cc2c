"""What a case costs, pinned by what it does rather than by a clock (issue #16): the module's state is copied once
per case, not before every forward; save and load run once; the reloaded program is probed at the boundaries only.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import pytest_export
from pytest_export.torchside import modstate


class WideCounter(torch.nn.Module):
    """Large weights and a forward that writes a buffer (a step counter and running sums)."""

    def __init__(self):
        super().__init__()
        self.big = torch.nn.Linear(512, 512)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("total", torch.zeros(512))

    def forward(self, x):
        self.steps.add_(1)
        self.total.add_(x.sum(0))
        return self.big(x) + self.total


def test_state_is_copied_once_per_case_and_put_back_after_every_forward(monkeypatch):
    copies: list[tuple] = []
    original = modstate.StateKeeper.original

    def counting(self, t):
        if self._key(t) not in self._copies:
            copies.append((tuple(t.shape), t.dtype))
        return original(self, t)

    monkeypatch.setattr(modstate.StateKeeper, "original", counting)
    model = WideCounter()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 512)
    res = pytest_export.check(model, (x,), name="cost.py::test_wide", examples=6,
                              dynamic_shapes={"x": {0: Dim("b", min=1, max=16)}})
    assert res.outcome == "passed", res.failure_text()
    # correctness: every program matched eager (buffers included) and the module is as it was given
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    # cost: the 512x512 weight is copied once for the eager module and once per program that holds its own
    # storage (the reloaded one); never once per forward call (guards and fuzz run dozens)
    forwards = res.stages["guards"].data["probes"] + res.stages["fuzz"].data["examples"]
    weight_copies = copies.count(((512, 512), torch.float32))
    assert weight_copies <= 3 < forwards, (weight_copies, forwards)


def test_serde_saves_and_loads_once(monkeypatch):
    calls = {"save": 0, "load": 0}
    save, load = torch.export.save, torch.export.load

    def counted_save(*a, **k):
        calls["save"] += 1
        return save(*a, **k)

    def counted_load(*a, **k):
        calls["load"] += 1
        return load(*a, **k)

    monkeypatch.setattr(torch.export, "save", counted_save)
    monkeypatch.setattr(torch.export, "load", counted_load)
    res = pytest_export.check(torch.nn.Linear(3, 2), (torch.randn(4, 3),), name="cost.py::test_serde",
                              examples=2, dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}})
    assert res.stages["serde"].status == "passed", res.failure_text()
    assert calls == {"save": 1, "load": 1}


def test_the_reloaded_program_is_probed_at_the_boundaries_only(monkeypatch):
    from pytest_export.stages import guards

    seen: list[int] = []
    run_program = guards.run_program

    def spy(ctx, ep, inputs, kwargs=None):
        seen.append(id(ep))
        return run_program(ctx, ep, inputs, kwargs)

    monkeypatch.setattr(guards, "run_program", spy)
    res = pytest_export.check(torch.nn.Linear(3, 2), (torch.randn(4, 3),), name="cost.py::test_reload",
                              examples=2, dynamic_shapes={"input": {0: Dim("b", min=2, max=8)}})
    probes = res.stages["guards"].data["probes"]
    exported = seen.count(seen[0])
    reloaded = len(seen) - exported
    assert exported == probes
    # every dim at its min and at its max, and the max + 1 / min - 1 refusals
    assert 0 < reloaded <= 4 < probes, (reloaded, probes)


@pytest.mark.slow
def test_a_failed_exports_diagnosis_is_timed_apart(monkeypatch):
    import time

    from pytest_export.explain import diagnose

    class DataBranch(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    real = diagnose.diagnose

    def slow(*a, **k):
        time.sleep(5)  # a diagnosis far dearer than the export it explains
        return real(*a, **k)

    monkeypatch.setattr(diagnose, "diagnose", slow)
    res = pytest_export.check(DataBranch(), (torch.ones(3),), name="cost.py::test_diag", examples=1)
    export = res.stages["export"]
    assert export.status == "failed"
    assert export.data["diagnosis_s"] >= 5
    assert export.duration < 5, export.duration  # export's own time: the diagnosis is not in it
