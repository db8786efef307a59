"""How a waiting rank waits (csrc/transport/doorbell.h, docs/WAITING.md): it hands its
core to a rank of its own group that needs it, and to nobody else.

The policy's effect on speed is measured by benchmarks/cpu_wait.py, not here; these
tests check the mechanism by its counters (_C.wait_stats): which waits yielded, and
to whom, with the ranks placed on the CPUs on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import ringcoll
from ringcoll import _C, ops
from tests import mp

CPUS = sorted(os.sched_getaffinity(0))


def _allreduces(rank, p, cpus, yield_policy, calls=300, n=2):
    """`calls` small all-reduces with rank r on cpus[r]; the exact sum each time, and
    this process's wait counters over them."""
    os.sched_setaffinity(0, {cpus[rank]})
    g = dist.new_group(backend="ringcoll",
                       pg_options=ringcoll.Options(yield_policy=yield_policy, spin_us=2000))
    x = torch.zeros(n)
    for _ in range(20):
        ops.all_reduce_(x, group=g)
    _C.wait_stats(True)
    wrong = 0
    for i in range(calls):
        x.fill_(rank + 1 + i)
        ops.all_reduce_(x, group=g)
        wrong += int((x != sum(r + 1 + i for r in range(p))).sum())
    return {"wrong": wrong, **_C.wait_stats(False)}


@pytest.mark.alone  # it places ranks on CPUs: nothing else may run beside it
@pytest.mark.parametrize("p", [2, 3])
def test_ranks_on_one_cpu_yield_to_each_other(p):
    # Every rank on one CPU: a waiting rank finds its peers there (not asleep, not
    # running: it is) and yields to them, under the default policy and under always.
    for policy in ("peers", "always"):
        res = mp.run_world(p, _allreduces, [CPUS[0]] * p, policy, transport="shm")
        assert all(r["wrong"] == 0 for r in res), res
        assert sum(r["yields"] for r in res) > 0, (policy, res)


@pytest.mark.alone
@pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs: one per rank")
def test_no_yield_to_a_busy_process_beside_a_rank():
    # Each rank on a CPU of its own, a busy process on each of those CPUs: a waiting
    # rank's peer is never on its CPU, so under the default policy it yields to
    # nobody (a yield would hand the busy process a scheduler slice); under always,
    # the old policy, it does.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda c=c: os.sched_setaffinity(0, {c}))
            for c in CPUS[:2]]
    try:
        peers = mp.run_world(2, _allreduces, CPUS[:2], "peers", transport="shm")
        always = mp.run_world(2, _allreduces, CPUS[:2], "always", transport="shm")
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert all(r["wrong"] == 0 for r in peers + always), (peers, always)
    assert sum(r["waits"] for r in peers) > 0, peers  # they did wait for each other
    assert sum(r["yields"] for r in peers) == 0, peers
    assert sum(r["yields"] for r in always) > 0, always


def _start_together(rank, p, calls=400):
    """Both ranks start on the first CPU, then may run anywhere: with a busy process
    per CPU the scheduler has no reason to part them."""
    os.sched_setaffinity(0, {CPUS[0]})
    g = dist.new_group(backend="ringcoll")
    x = torch.zeros(2)
    for _ in range(20):
        ops.all_reduce_(x, group=g)
    os.sched_setaffinity(0, CPUS)
    _C.wait_stats(True)
    wrong = 0
    for i in range(calls):
        x.fill_(rank + i)
        ops.all_reduce_(x, group=g)
        wrong += int((x != float(sum(r + i for r in range(p)))).sum())
    return {"wrong": wrong, "mask": sorted(os.sched_getaffinity(0)), **_C.wait_stats(False)}


@pytest.mark.alone
@pytest.mark.skipif(len(CPUS) < 2, reason="needs 2 CPUs")
def test_two_ranks_kept_on_one_cpu_part():
    # Both ranks on the first CPU, two busy processes held on the second: the
    # scheduler sees two tasks a CPU and has no reason to part the ranks. The higher
    # rank moves itself to the other CPU (its mask is given back as it was); the
    # lower one stays.
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                             preexec_fn=lambda: os.sched_setaffinity(0, {CPUS[1]}))
            for _ in range(2)]
    try:
        res = mp.run_world(2, _start_together, transport="shm")
    finally:
        for b in busy:
            b.kill()
            b.wait()
    assert all(r["wrong"] == 0 for r in res), res
    assert all(r["mask"] == CPUS for r in res), res
    assert res[0]["moves"] == 0 and res[1]["moves"] >= 1, res


def _spin_zero(rank, p):
    # RINGCOLL_SPIN_US=0: a waiter sleeps at once, and the calls still complete.
    g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(spin_us=0))
    # The counters are the process's: the world group (which spins) must be done
    # first, new_group's own barrier included (one such wait, counted after the
    # reset, failed this test once on torch 2.15).
    dist.barrier()
    x = torch.zeros(3)
    _C.wait_stats(True)
    for i in range(50):
        x.fill_(rank + i)
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.full((3,), float(sum(r + i for r in range(p))))), x
    return _C.wait_stats(False)


def test_spin_zero_sleeps_at_once():
    res = mp.run_world(2, _spin_zero, transport="shm")
    assert all(r["spun"] == 0 and r["spin_ns"] == 0 for r in res), res


@pytest.mark.parametrize("name,value,why", [
    ("RINGCOLL_YIELD", "sometimes", "expected peers, never or always"),
    ("RINGCOLL_SPIN_US", "-1", "RINGCOLL_SPIN_US='-1' is not a whole number of microseconds"),
])
def test_bad_wait_knobs_are_refused(name, value, why):
    with pytest.raises(RuntimeError, match=why):  # as every knob's bad value (test_errors)
        _C.knobs({name: value})


def test_wait_knobs_are_described():
    text = _C.knobs({"RINGCOLL_SPIN_US": "250", "RINGCOLL_YIELD": "never"})
    assert "RINGCOLL_SPIN_US=250" in text and "RINGCOLL_YIELD=never" in text, text
