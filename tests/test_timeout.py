"""Nested time limits (``pytest_export.timeout``): an inner limit raises its own exception, an enclosing limit
that ends first stays in charge, and an inner block never lengthens the enclosing deadline (issue #23)."""

from __future__ import annotations

import signal
import time

import pytest

from pytest_export.timeout import CaseTimeout, Expired, supported, time_limit

pytestmark = pytest.mark.skipif(not supported(), reason="time limits need SIGALRM and the main thread")


def _wait(seconds: float) -> None:
    """Sleep in short steps for at most ``seconds`` (a limit that fails to fire lets the test fail, not hang)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def _no_alarm_left():
    handler = signal.getsignal(signal.SIGALRM)
    yield
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "a limit left its alarm armed"
    assert signal.getsignal(signal.SIGALRM) is handler, "a limit left its handler installed"


def test_a_limit_fires_case_timeout_by_default():
    t0 = time.monotonic()
    with pytest.raises(CaseTimeout, match="exceeded the time limit of 0.2 s"):
        with time_limit(0.2) as enforced:
            assert enforced
            _wait(3)
    assert 0.15 <= time.monotonic() - t0 < 1.5


def test_an_inner_limit_fires_its_own_exception_and_the_outer_one_goes_on():
    t0 = time.monotonic()
    with time_limit(3):
        with pytest.raises(Expired, match="0.2 s"):
            with time_limit(0.2, error=Expired):
                _wait(2)
        inner = time.monotonic() - t0
        _wait(0.2)  # the outer limit is still armed and has not fired
    assert 0.15 <= inner < 1.0


def test_an_enclosing_limit_that_ends_first_fires_case_timeout():
    t0 = time.monotonic()
    with pytest.raises(CaseTimeout, match="0.3 s"):
        with time_limit(0.3):
            with time_limit(5, error=Expired):
                _wait(3)
    assert 0.25 <= time.monotonic() - t0 < 1.5


def test_a_finished_inner_block_does_not_extend_the_outer_deadline():
    t0 = time.monotonic()
    with pytest.raises(CaseTimeout):
        with time_limit(1.0):
            with time_limit(0.9, error=Expired):
                _wait(0.7)  # ends before the inner limit
            _wait(3)
    # the outer alarm is put back with 0.3 s left, not re-armed with a full second: it fires at 1.0 s, not 1.7 s
    assert 0.9 <= time.monotonic() - t0 < 1.5


def test_an_expired_inner_block_does_not_extend_the_outer_deadline():
    t0 = time.monotonic()
    with pytest.raises(CaseTimeout):
        with time_limit(1.0):
            with pytest.raises(Expired):
                with time_limit(0.7, error=Expired):
                    _wait(3)
            _wait(3)
    assert 0.9 <= time.monotonic() - t0 < 1.5  # not 1.7: the inner 0.7 s came off the outer second


def test_an_outer_deadline_passed_inside_an_inner_block_fires_when_the_block_ends():
    # the block swallows its own limit's exception and runs on past the outer deadline: the outer limit fires as
    # soon as the inner block gives the alarm back
    t0 = time.monotonic()
    with pytest.raises(CaseTimeout):
        with time_limit(0.5):
            with time_limit(0.2, error=Expired):
                try:
                    _wait(3)
                except Expired:
                    _wait(0.5)
            _wait(3)
    assert 0.65 <= time.monotonic() - t0 < 1.2


def test_no_limit_and_a_zero_limit_are_not_enforced():
    for seconds in (None, 0, -1):
        with time_limit(seconds, error=Expired) as enforced:
            assert not enforced
            assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
