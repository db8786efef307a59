"""The multi-process harness itself (tests/mp.py): a rank's traceback reaches the
parent, and a hang, a teardown hang and a silent death each fail with a message
instead of passing or stalling CI. No process group: these are about the harness."""

import atexit
import os
import time

import pytest

from tests import mp


def returns_rank(rank, p):
    return rank * 10


def raises_on_last(rank, p):
    if rank == p - 1:
        raise ValueError(f"rank {rank} was told to fail")
    return rank


def hangs_on_last(rank, p):
    if rank == p - 1:
        time.sleep(3600)
    return rank


def hangs_at_exit_on_last(rank, p):
    if rank == p - 1:
        atexit.register(time.sleep, 3600)
    return rank


def dies_on_last(rank, p):
    if rank == p - 1:
        os._exit(3)
    return rank


def aborts_on_last(rank, p):
    if rank == p - 1:
        os.abort()  # as glibc does when it finds the heap corrupted
    return rank


def aborts_at_exit_on_last(rank, p):
    if rank == p - 1:
        atexit.register(os.abort)  # a crash in teardown, after the result went home
    return rank


def test_results_come_home():
    assert mp.run_world(3, returns_rank, init_backend=None, timeout=60) == [0, 10, 20]


def test_traceback_comes_home():
    with pytest.raises(AssertionError, match=r"(?s)--- rank 2 ---.*ValueError: rank 2 was told"):
        mp.run_world(3, raises_on_last, init_backend=None, timeout=60)


def test_hang_is_killed_and_named():
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)ranks \[1\] did not finish within 8 s.*"
                                             r"rank 1's threads"):
        mp.run_world(2, hangs_on_last, init_backend=None, timeout=8)
    assert time.monotonic() - t0 < 150  # killed, not waited for (gdb may take a while)


def test_teardown_hang_is_named():
    """A rank that returned but does not exit (a hang in destroy_process_group, say)
    has its result delivered and still fails the test."""
    with pytest.raises(AssertionError, match=r"ranks \[1\] returned but did not exit within 3 s"):
        mp.run_world(2, hangs_at_exit_on_last, init_backend=None, timeout=60, exit_grace_s=3)


def test_silent_death_is_named():
    with pytest.raises(AssertionError, match=r"rank 1 exited with code 3 without reporting"):
        mp.run_world(2, dies_on_last, init_backend=None, timeout=60)
    assert mp.run_world(2, dies_on_last, init_backend=None, timeout=60, may_exit={1}) == [0, None]


def test_death_by_a_signal_names_it_and_where():
    """CI's summary shows the failure's message, not the rank's stderr: a rank killed by
    a signal says which, and the Python line it was on."""
    with pytest.raises(AssertionError, match=r"(?s)rank 1 was killed by SIGABRT without "
                                             r"reporting; its Python stacks.*aborts_on_last"):
        mp.run_world(2, aborts_on_last, init_backend=None, timeout=60)


def test_a_crash_after_the_result_is_named():
    """A rank that returned its result and then crashed (in destroy_process_group, at
    exit) fails the world: the harness checks every rank's exit, not only its report."""
    with pytest.raises(AssertionError, match=r"rank 1 was killed by SIGABRT after it "
                                             r"returned its result"):
        mp.run_world(2, aborts_at_exit_on_last, init_backend=None, timeout=60)
