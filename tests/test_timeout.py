"""Nested time limits (``pytest_export.torchside.timeout``): an inner limit raises its own exception, an enclosing limit
that ends first stays in charge, and an inner block never lengthens the enclosing deadline (issue #23)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from pytest_export.torchside.timeout import CaseTimeout, Expired, checkpoint, in_thread, supported, time_limit
from tests.helpers import run_check, write_cases

pytestmark = pytest.mark.skipif(not supported(), reason="time limits need SIGALRM and the main thread")


def _wait(seconds: float) -> None:
    """Sleep in short steps for at most ``seconds`` (a limit that fails to fire lets the test fail, not hang)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        checkpoint()  # as the harness does before every forward call
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


# ---- limits count CPU time, so the load of the machine decides no verdict (issue #51) ------------------------

def _work(seconds: float) -> None:
    """Use ``seconds`` of this process's CPU time."""
    t0 = time.process_time()
    while time.process_time() - t0 < seconds:
        pass


def test_work_is_stopped_by_the_cpu_time_it_used():
    t0, c0 = time.monotonic(), time.process_time()
    with pytest.raises(Expired, match=r"exceeded the time limit of 0.3 s: used 0.3 s of CPU time"):
        with time_limit(0.3, error=Expired):
            _work(5)
    assert 0.3 <= time.process_time() - c0 < 1.0 and time.monotonic() - t0 < 3


def test_work_slowed_by_a_busy_machine_is_not_stopped_by_the_wall_clock():
    """A loaded machine gives the process a share of a core: the block takes twice its limit on the wall clock,
    but uses less CPU time than the limit, so it finishes (it had been stopped, an `error` only load made)."""
    t0 = time.monotonic()
    with time_limit(0.5, error=Expired):
        for _ in range(10):  # 40% of a core: 0.4 s of work over about 1 s
            _work(0.04)
            time.sleep(0.06)
    assert time.monotonic() - t0 > 0.5


def test_a_block_that_only_waits_is_stopped_by_the_wall_clock():
    t0 = time.monotonic()
    with pytest.raises(Expired, match="exceeded the time limit of 0.3 s waiting .*a sleep, a lock or a hang"):
        with time_limit(0.3, error=Expired):
            time.sleep(5)
    assert 0.3 <= time.monotonic() - t0 < 2


# ---- off the main thread, checkpoints enforce a limit; a case's thread never outlives it (issue #32) ---------

def _in_a_thread(work):
    """Run ``work`` on a thread of its own; return what it returned or raised."""
    out: list = []

    def target():
        try:
            out.append(work())
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            out.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "a limit off the main thread did not fire"
    return out[0]


def test_a_limit_off_the_main_thread_is_enforced_at_checkpoints():
    def work():
        t0 = time.monotonic()
        try:
            with time_limit(0.3, error=Expired) as enforced:
                assert enforced
                _wait(5)
        except Expired as exc:
            return exc, time.monotonic() - t0
        return None

    got = _in_a_thread(work)
    assert got is not None, "the limit was silently off"
    exc, took = got
    assert isinstance(exc, Expired) and "exceeded the time limit of 0.3 s" in str(exc)
    assert 0.25 <= took < 2.0


def test_off_the_main_thread_limits_nest_as_alarms_do():
    def work():
        t0 = time.monotonic()
        with pytest.raises(CaseTimeout, match="0.4 s"):  # the enclosing limit ends first: its exception
            with time_limit(0.4):
                with time_limit(5, error=Expired):
                    _wait(3)
        outer = time.monotonic() - t0
        with time_limit(3):
            with pytest.raises(Expired):
                with time_limit(0.2, error=Expired):
                    _wait(3)
            _wait(0.3)  # the outer limit goes on, and a finished inner one leaves nothing pending
        return outer

    got = _in_a_thread(work)
    assert not isinstance(got, BaseException), got
    assert 0.35 <= got < 2.0


def test_work_on_a_thread_of_its_own_stops_when_the_case_does():
    calls: list[float] = []

    def work():
        while True:
            checkpoint()
            calls.append(time.monotonic())
            time.sleep(0.02)

    t0 = time.monotonic()
    with pytest.raises(CaseTimeout, match="0.5 s"):
        with time_limit(0.5):
            in_thread(work, name="work")
    assert time.monotonic() - t0 < 3
    n = len(calls)
    time.sleep(0.3)
    assert len(calls) == n, "the thread kept working after its caller left"
    assert not any(t.name == "work" for t in threading.enumerate())


def test_work_that_outlives_its_grace_is_said():
    said: list[str] = []
    release = threading.Event()

    def stuck():
        release.wait(5)  # one long call: no checkpoint until it returns

    with pytest.raises(CaseTimeout):
        with time_limit(0.3):
            in_thread(stuck, name="stuck", grace=0.3, left=said.append)
    release.set()
    assert said and "'stuck' was still running 0.3 s after it was told to stop" in said[0]


GIVEN_SLOW = '''
import threading, time
from hypothesis import HealthCheck, given, settings, strategies as st

CALLS = []

class Slow(torch.nn.Module):
    def forward(self, x):
        if threading.current_thread() is not threading.main_thread():  # fuzz's search, on its own thread
            CALLS.append(1)
            t0 = time.process_time()  # work, not a wait: limits count CPU time (issue #51)
            while time.process_time() - t0 < 0.05:
                pass
        return x * 2

@settings(max_examples=1, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.just(0))
def test_given(export_check, _):
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:  # a timeout is an error: it fails the test
        export_check(Slow(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("b", min=2, max=64)}},
                     timeout=4, examples=500, budget=600)
    assert time.monotonic() - t0 < 15
    text = str(failed.value)
    assert "fuzz    | error" in text and "the case exceeded the time limit of 4 s" in text, text
    assert CALLS, "the search never ran on its thread"

def test_after():
    n = len(CALLS)
    time.sleep(1.0)
    assert len(CALLS) == n, f"the model was called {len(CALLS) - n} more times after the case ended"
'''


@pytest.mark.slow
def test_a_search_inside_a_given_test_ends_with_its_case(pytester):
    # export_check in a @given test: fuzz searches on a thread of its own; when the case's time runs out the
    # thread stops too, and its probes ran under limits all along
    write_cases(pytester, GIVEN_SLOW)
    result, _ = run_check(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2)
