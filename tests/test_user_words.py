"""Messages in the user's words (issue #54): a specialization's cause found in draft_export's record of the guard
(the model's line, and the module whose kernel does it), never guessed; torch's shape symbols (``s24``) never in a
message. Each cause is checked against raw torch in the test."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
import torch
from torch.export import Dim

import pytest_export

pytestmark = pytest.mark.slow  # each case exports, fails, and runs draft_export (3-10 s)

TORCH_SYMBOL = re.compile(r"(?<![\w.#])s\d+\b")


class Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 16, batch_first=True)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] == 20:
            return x * 2
        return x


class Stride32(torch.nn.Module):
    """MobileNetV3's shape: five stride-2 stages with squeeze-excitation, a global pool and a head. At H = 32 the
    last feature map is 1x1, which a program traced at 224 refuses; torch suggests no fix for it."""

    def __init__(self):
        super().__init__()
        layers, c = [], 3
        for _ in range(5):
            layers += [torch.nn.Conv2d(c, 8, 3, stride=2, padding=1), torch.nn.Hardswish(), Excite(8)]
            c = 8
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class Excite(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc = torch.nn.Conv2d(c, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc(x.mean((2, 3), keepdim=True)))


SEQ = {"x": {1: Dim("seq", min=2, max=64)}}


def _guard_lines(module) -> list[str]:
    """Raw torch: the lines of the model draft_export records for the guards it added."""
    ep = torch.export.draft_export(module, (torch.randn(2, 20, 8),), dynamic_shapes=SEQ)
    return [f.data["user_stack"][-1]["loc"] for f in ep._report.failures if f.failure_type.name == "GUARD_ADDED"]


def test_a_module_that_specializes_a_dim_is_named_with_the_line_that_calls_it():
    with pytest.raises(Exception, match=r"specialized it to be a constant \(20\)"):  # raw torch: export refuses
        torch.export.export(Recurrent().eval(), (torch.randn(2, 20, 8),), dynamic_shapes=SEQ)
    assert "out, _ = self.lstm(x)" in _guard_lines(Recurrent().eval())
    res = pytest_export.check(Recurrent().eval(), (torch.randn(2, 20, 8),), dynamic_shapes=SEQ, name="lstm")
    export = res.stages["export"]
    assert export.status == "failed"
    assert "specialized inside `lstm` (nn.LSTM) at test_user_words.py:" in export.message, export.message
    assert ("export specializes it to 20 inside `lstm` (nn.LSTM), called at test_user_words.py:" in export.message
            and "`out, _ = self.lstm(x)`" in export.message)
    assert "(a branch, an assert or int() on it)" not in export.message  # the guess is gone
    assert "Eq(seq, 20) where seq = x.shape[1]" in export.message
    assert export.data["diagnosis"]["specialized_by"] == "`lstm` (nn.LSTM)"
    assert not TORCH_SYMBOL.search(export.message)


def test_a_branch_on_the_size_is_named_by_its_line_and_no_module_is_blamed():
    assert "if x.shape[1] == 20:" in _guard_lines(Branch())
    res = pytest_export.check(Branch(), (torch.randn(2, 20, 8),), dynamic_shapes=SEQ, name="branch")
    msg = res.stages["export"].message
    assert "the model needs that size exactly at test_user_words.py:" in msg and "`if x.shape[1] == 20:`" in msg
    assert "specialized_by" not in res.stages["export"].data["diagnosis"]


def test_where_torch_suggests_no_fix_the_guards_give_one_that_says_it_narrows_and_why():
    hw = {"x": {2: Dim("H", min=32, max=512), 3: Dim("W", min=32, max=512)}}
    x = torch.randn(1, 3, 224, 224)
    with pytest.raises(Exception, match="Constraints violated") as raw:  # raw torch: the declaration fails...
        torch.export.export(Stride32().eval(), (x,), dynamic_shapes=hw)
    assert "Suggested fixes" not in str(raw.value)  # ... and torch suggests nothing
    res = pytest_export.check(Stride32().eval(), (x,), dynamic_shapes=hw, name="stride32")
    diagnosis = res.stages["export"].data["diagnosis"]
    assert diagnosis["dynamic_shapes_fix"] == ("from torch.export import Dim\nH = Dim('H', min=33, max=512)\n"
                                               "W = Dim('W', min=33, max=512)\ndynamic_shapes = {'x': {2: H, 3: W}}")
    msg = res.stages["export"].message
    assert "corrected dynamic_shapes (derived from the guards torch generated; torch suggested no fix)" in msg
    assert "it narrows the declared ranges to what the program accepts: H: min=33; W: min=33" in msg
    assert "at W = 32, (((W - 1)//32)) + 1 is 1" in msg
    # raw torch: the fix pasted back exports, and its program runs at the new bounds and refuses 32
    fixed = {"x": {2: Dim("H", min=33, max=512), 3: Dim("W", min=33, max=512)}}
    ep = torch.export.export(Stride32().eval(), (x,), dynamic_shapes=fixed)
    for h, w in [(33, 33), (512, 33), (33, 512)]:
        torch.testing.assert_close(ep.module()(torch.randn(1, 3, h, w)).shape, torch.Size([1, 10]))
    with pytest.raises(Exception):
        ep.module()(torch.randn(1, 3, 32, 64))


def test_no_torch_symbol_reaches_any_message_serially_or_under_xdist(pytester):
    pytester.makepyfile(test_cases=textwrap.dedent('''
        import pytest
        import torch
        from torch.export import Dim

        class Recurrent(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(4, 4, batch_first=True)
            def forward(self, x):
                return self.lstm(x)[0]

        class Even(torch.nn.Module):
            def forward(self, x):
                return x.reshape(x.shape[0], -1, 2).sum(-1)

        class Not37(torch.nn.Module):
            def forward(self, x):
                if x.shape[0] == 37:
                    return x[:1] * 0
                return x * 2

        class Pair(torch.nn.Module):
            def forward(self, a, b):
                if a.shape[0] > b.shape[0]:
                    return a[: b.shape[0]] + b
                return a.sum() + b.sum()

        class Grid(torch.nn.Module):
            def forward(self, x):
                b, h, w = x.shape[0], x.shape[1], x.shape[2]
                torch._check(b * h * w != h * w)
                return x * 2

        @pytest.mark.exportable(dynamic_shapes={"x": {1: Dim("seq", min=2, max=32)}})
        def test_lstm():
            return Recurrent(), (torch.randn(2, 9, 4),)

        @pytest.mark.exportable(dynamic_shapes={"x": {1: Dim("n", min=2, max=64)}})
        def test_even():
            return Even(), (torch.randn(2, 8),)

        @pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("rows", min=2, max=64)}})
        def test_not37():
            return Not37(), (torch.randn(8, 3),)

        @pytest.mark.exportable(dynamic_shapes={"a": {0: Dim("big", min=2, max=32)}, "b": {0: Dim("small", min=2, max=32)}})
        def test_pair():
            return Pair(), (torch.randn(8, 3), torch.randn(4, 3))

        @pytest.mark.exportable(dynamic_shapes={"x": {0: Dim("batch", min=1, max=8), 1: Dim("h", min=2, max=8), 2: Dim("w", min=2, max=8)}})
        def test_grid():
            return Grid(), (torch.randn(2, 4, 4),)
    '''))
    for extra in ([], ["-n", "2"]):
        pytester.runpytest("--export-check", "--export-report=report.json", "-p", "no:cacheprovider", *extra)
        cases = json.loads((pytester.path / "report.json").read_text())["cases"]
        assert len(cases) == 5
        texts = [(c["nodeid"], t) for c in cases for t in
                 [s.get("message") or "" for s in c["stages"].values()] + c.get("warnings", []) + [c.get("error", "")]]
        assert sum("x.shape" in t or "seq" in t for _, t in texts) >= 3  # the messages name the axes
        found = [f"{n}: {TORCH_SYMBOL.search(t).group(0)} in {t[:300]}" for n, t in texts if TORCH_SYMBOL.search(t)]
        assert not found, "\n".join(found)
