"""``forked.in_child``: work whose memory must go back when it ends (ExecuTorch's lowering, issue #42), run in a
forked child held to the memory cap and to a time limit; what it returns or raises comes back."""

from __future__ import annotations

import os
import time

import pytest

from pytest_export.context import StageFailure
from pytest_export.results import HarnessError
from pytest_export.runtimes.forked import Watched, in_child, private_bytes

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or private_bytes(os.getpid()) is None,
                                reason="needs os.fork and /proc/<pid>/smaps_rollup")


def test_what_the_child_returns_comes_back_and_its_memory_is_given_back():
    before = private_bytes(os.getpid())
    watched = Watched()

    def work() -> tuple[int, int]:
        block = bytearray(64 * 2**20)  # written: 64 MB of the child's own pages
        block[::4096] = b"x" * len(block[::4096])
        time.sleep(0.3)  # held while the watch reads it
        return os.getpid(), len(block)

    pid, n = in_child(work, 1 << 30, 60, "a test's work", watched)
    assert pid != os.getpid() and n == 64 * 2**20
    assert 64 * 2**20 <= watched.peak < 1 << 30  # what the child made, seen by the watch
    assert private_bytes(os.getpid()) - before < 32 * 2**20  # the parent did not grow by the child's 64 MB


def test_a_finding_raised_in_the_child_is_raised_again_with_its_kind_and_data():
    def work() -> None:
        raise StageFailure("the runtime has no kernel for `foo.out`", kind="unsupported-op", unsupported_op="foo.out")

    with pytest.raises(StageFailure) as info:
        in_child(work, 1 << 30, 60, "a test's work")
    assert str(info.value) == "the runtime has no kernel for `foo.out`"
    assert info.value.kind == "unsupported-op" and info.value.data == {"unsupported_op": "foo.out"}


def test_anything_else_the_child_raises_is_the_harness_error_of_what_it_was_doing():
    def work() -> None:
        raise ValueError("bad")

    with pytest.raises(HarnessError, match=r"ExecuTorch's lowering raised ValueError: bad"):
        in_child(work, 1 << 30, 60, "ExecuTorch's lowering")


def test_a_child_past_the_cap_is_stopped_and_says_which_option_to_raise():
    def work() -> None:
        blocks = []
        for _ in range(40):  # 40 x 16 MB, each written, one a tenth of a second: the watch sees it grow
            block = bytearray(16 * 2**20)
            block[::4096] = b"x" * len(block[::4096])
            blocks.append(block)
            time.sleep(0.1)

    t0 = time.monotonic()
    with pytest.raises(HarnessError, match=r"needed more than max_memory 67.1 MB .*raise --export-max-memory"):
        in_child(work, 64 * 2**20, 60, "the lowering")
    assert time.monotonic() - t0 < 4  # stopped at the cap, not after all 640 MB


def test_a_child_past_its_time_is_stopped():
    """Its CPU time counts, as every limit's does (the load of the machine decides nothing); a child that waits
    without working is stopped when its wall time reaches the limit."""
    def work():
        t0 = time.process_time()
        while time.process_time() - t0 < 30:
            pass

    with pytest.raises(HarnessError, match=r"the lowering used 1 s of CPU time without finishing; it was stopped"):
        in_child(work, 1 << 30, 1, "the lowering")
    with pytest.raises(HarnessError, match=r"the lowering waited \d s without working .*; it was stopped"):
        in_child(lambda: time.sleep(30), 1 << 30, 1, "the lowering")


def test_a_child_that_dies_says_so():
    with pytest.raises(HarnessError, match=r"ended without a result \(the child process died"):
        in_child(lambda: os._exit(3), 1 << 30, 60, "the lowering")
