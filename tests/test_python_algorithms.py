"""Algorithms written in Python (ringcoll.schedules), used exactly like built-in ones.

  * the vocabulary is schedule.h's (block and split cut as the extension does);
    examples/pyring.py, the docs' first example, is the built-in ring step for step;
  * registration: listed by ringcoll.algorithms(), selectable by RINGCOLL_ALGO and
    per collective; a built-in name, `auto` or a name the selector could not parse
    is refused;
  * the tools take them: ringcoll.check, ringcoll.sim and the cost model give the
    Python ring what they give the built-in one, and their command lines import
    RINGCOLL_ALGO_MODULES;
  * preparation (what the backend does once per call's Params): every rank's
    schedule proved, digested alike on every rank and differently for another
    definition; each way a schedule breaks schedule.h is refused naming the
    algorithm, collective, rank and step; an exception in the function names it;
  * in real processes, against exact references: pyring and pymirror (tests/
    pyalgos.py: every collective) on shared memory, gloo and the stream emulation;
    an exception on one rank fails every rank at once naming it, a refused schedule
    raises on every rank before any byte moves, ranks whose definitions of a name
    differ are caught by the fingerprint; a blocking op that holds the GIL while
    the worker runs the schedule does not deadlock; the function runs once per
    Params; torchrun with RINGCOLL_ALGO_MODULES, RINGCOLL_DEBUG and RINGCOLL_TRACE;
    the benchmark with a Python algorithm beside the built-in one;
  * swing, bruck and twolevel (ringcoll/schedules): proved for p = 1..64 (twolevel
    on several host layouts), shaped as their papers say, simulated at 1024 ranks,
    run against exact references at a few world sizes (twolevel across two
    pretended hosts too) and leaving every rank the same bits;
  * docs/ALGORITHMS.md's walk: its example is examples/pyring.py and its check and
    sim commands print what it shows.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ringcoll
import ringcoll.ops
from ringcoll import _C, check, model, schedules, sim
from ringcoll.schedules import (AlgorithmError, Params, Schedule, Transfer, recv_copy, reduced,
                                register, send)
from tests import mp
from tests.test_algorithms import algorithms_matrix

REPO = Path(__file__).resolve().parents[1]
PYRING = str(REPO / "examples" / "pyring.py")
MODULES = f"{PYRING},tests.pyalgos"
# pyring and pymirror are registered in this process too (they are correct, and
# other test files list only the built-in and shipped algorithms); the broken and
# test-only ones are registered only in the worlds' processes (_register_world's),
# or tested as bare definitions (_definition), so that no later test of this
# process meets them among the registered algorithms (auto's candidates).
schedules.load_modules(MODULES)
import pyring  # noqa: E402  (examples/pyring.py, imported by load_modules)

PY_ALGOS = {a: _C.provides(a) for a in ("pyring", "pymirror")}


def _definition(name, fn, collective="all_reduce"):
    """What register() makes of fn, not registered."""
    return schedules._Definition(name, "", {collective: fn})


# --------------------------------------------------------------------------------
# the vocabulary and registration


def test_block_and_split_cut_as_the_extension_does():
    for n in (0, 1, 5, 16, 101):
        for k in range(1, 9):
            for i in range(k):
                assert schedules.block(n, k, i) == _C.block_range(n, k, i)
                assert schedules.split((3, 3 + n), k, i) == _C.split(3, 3 + n, k, i)
    prm = Params(rank=1, size=3, n=7)
    assert prm.order == (0, 1, 2) and prm.hosts == (0, 0, 0)


@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter", "all_gather"])
def test_pyring_is_the_built_in_ring(collective):
    for p in range(1, 10):
        orders = [None] + ([[(2 * i) % p for i in range(p)]] if p % 2 else [])
        for order in orders:
            for n in sorted({0, 1, p - 1, p + 1, 3 * p, 4 * p + 2}):
                if collective != "all_reduce" and n % p:
                    continue
                mine = check.schedules("pyring", collective, p, n, order=order)
                ring = check.schedules("ring", collective, p, n, order=order)
                for r, (a, b) in enumerate(zip(mine, ring)):
                    assert (a["steps"], a["result"], a["scratch"]) == \
                        (b["steps"], b["result"], b["scratch"]), (collective, p, n, order, r)


def test_listed_provided_and_selectable():
    names = ringcoll.algorithms()
    assert names[:7] == ["ring", "rhd", "tree", "twoshot", "oneshot", "direct", "biring"]
    assert "pyring" in names and "pymirror" in names
    assert _C.provides("pyring") == ["allreduce", "reducescatter", "allgather", "barrier"]
    assert _C.select("pyring", "all_reduce", 100)[0] == "pyring"
    assert _C.select("pyring", "broadcast", 100)[0] == "ring"  # not provided: the default
    assert _C.select("allreduce=pyring:0-1K,ring", "all_reduce", 100)[0] == "pyring"
    with pytest.raises(ValueError, match="'pyring' does not provide broadcast"):
        _C.select("broadcast=pyring", "broadcast", 100)
    assert "RINGCOLL_ALGO=pyring" in _C.knobs({"RINGCOLL_ALGO": "pyring"})


@pytest.mark.parametrize("name, fragment", [
    ("ring", "'ring' is a built-in algorithm"),
    ("auto", "'auto' is RINGCOLL_ALGO's word"),
    ("my ring", "is not letters, digits"),
    ("a;b", "is not letters, digits"),
])
def test_bad_names_are_refused(name, fragment):
    with pytest.raises(ValueError, match=fragment):
        register(name, "all_reduce")(pyring.all_reduce)
    assert name not in ringcoll.algorithms() or name == "ring"
    assert name not in schedules._DEFINED


def test_unknown_collective_is_refused():
    with pytest.raises(ValueError, match="unknown collective 'allreduse'"):
        register("pyring2", "allreduse")


# --------------------------------------------------------------------------------
# the tools


def test_check_sim_and_model_take_python_algorithms():
    assert check.check_all("pyring", max_p=6) > 0
    assert check.check_all("pymirror", max_p=4) > 0
    topo = sim.Topology(2, 4, sim.INTRA, sim.INTER, gamma=sim.GAMMA)
    for c in ("all_reduce", "reduce_scatter", "all_gather"):
        assert sim.simulate("pyring", c, topo, 1 << 20).seconds == \
            sim.simulate("ring", c, topo, 1 << 20).seconds
        cal = model.load()
        assert model.predict("pyring", c, 4, 1 << 16, "shm", cal) == \
            model.predict("ring", c, 4, 1 << 16, "shm", cal)
    assert "pyring" in model.providers("all_reduce")


def _tool(args, modules=MODULES):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    if modules:
        env["RINGCOLL_ALGO_MODULES"] = modules
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=240, env=env, cwd=REPO)


def test_command_lines_import_ringcoll_algo_modules():
    out = _tool(["ringcoll.check", "pyring", "--max-p", "4"])
    assert out.returncode == 0, out.stderr
    assert "RuntimeWarning" not in out.stderr, out.stderr  # runpy's, when check ran twice
    assert "pyring (all_reduce, reduce_scatter, all_gather, barrier)" in out.stdout
    out = _tool(["ringcoll.sim", "--algo", "pyring", "--hosts", "2", "--per-host", "4",
                 "--size", "64K"])
    assert out.returncode == 0 and "pyring all_reduce 65536 B on 2 x 4" in out.stdout, out.stderr
    out = _tool(["ringcoll.check", "pyring", "--max-p", "2"], modules=None)
    assert out.returncode != 0 and "unknown algorithm 'pyring'" in out.stderr, out.stderr
    out = _tool(["ringcoll.check", "pyring"], modules="no/such/file.py")
    assert out.returncode != 0, out.stdout
    assert "RINGCOLL_ALGO_MODULES: cannot import 'no/such/file.py'" in out.stderr, out.stderr


def test_load_modules_names_what_failed():
    with pytest.raises(ImportError, match="cannot import 'tests.no_such_module'"):
        schedules.load_modules("tests.no_such_module")
    schedules.load_modules(f" {PYRING} , ")  # again, and blanks: nothing new
    assert sys.modules["pyring"] is pyring


# --------------------------------------------------------------------------------
# preparation: proved, digested, refused with a name


def _prepare(definition, collective, rank, p, n, root=0, counts=None):
    send = list(counts[rank]) if counts else []
    recv = [row[rank] for row in counts] if counts else []
    return definition.prepare(collective, rank, p, n, root, [], [], send, recv)


def test_every_rank_digests_alike_and_another_definition_differs():
    p, n = 4, 21
    ring = schedules._DEFINED["pyring"]
    digests = {_prepare(ring, "all_reduce", r, p, n)[1] for r in range(p)}
    assert len(digests) == 1 and 0 not in digests
    assert _prepare(_definition("pyring", _reversed_ring), "all_reduce", 0, p, n)[1] \
        not in digests
    counts = [[1, 0, 2], [3, 3, 1], [0, 5, 2]]
    mirror = schedules._DEFINED["pymirror"]
    a2a = {_prepare(mirror, "all_to_all", r, 3, 0, counts=counts)[1] for r in range(3)}
    assert len(a2a) == 1


def _reversed_ring(prm):
    """The ring the other way round: valid, and different bytes on the wire."""
    p = prm.size
    back = Params(prm.rank, p, prm.n, prm.root, tuple(reversed(prm.order)))
    return pyring.all_reduce(back)


def _mutated(how):
    def schedule(prm):
        s = pyring.all_reduce(prm)
        p, steps = prm.size, s.steps
        if how == "peer":
            steps[0][0] = send(p, steps[0][0][2:])
        elif how == "overlap":
            steps[0].append(recv_copy(steps[0][1].peer, steps[0][1][2:]))
        elif how == "sizes":
            k, q, b, e = steps[0][0]
            steps[0][0] = send(q, (b, e - 1))
        elif how == "twice":
            # step 1 sends again what step 0 sent, which the receiver has counted
            steps[1][0] = send(steps[1][0].peer, steps[0][0][2:])
            steps[1][1] = type(steps[1][1])("recv_reduce", steps[1][1].peer, *steps[0][1][2:])
        elif how == "result":
            del steps[-1]
        elif how == "deadlock" and prm.rank == 0:
            steps.insert(0, [])  # rank 0's steps one later than its peers'
        elif how == "raises":
            return 1 // (prm.rank - prm.rank)
        elif how == "not_a_schedule":
            return steps
        elif how == "bad_item":
            steps[0].append(("send", 1, 0, 1))
        return s
    return schedule


BAD = {
    "peer": "step 0 rank 0: send with peer 3",
    "overlap": "step 0 rank 0: writes",
    "sizes": "step 0: rank 0 sends sizes [2] to rank 1, which receives sizes [3]",
    "twice": "step 1 rank 0: element 6 from rank 2 counts ranks [2] twice",
    "result": "rank 0 at the end (after step 2): element",
    "deadlock": "p=3 n=9: deadlock: rank 1 receives [0, 3) from rank 0 in step 0, but rank 0 "
                "sends the transfer that pairs with it ([0, 3)) in step 1: a send and its "
                "receive must be in one step (rank 0 in step 1 and rank 1 in step 0 would "
                "each wait for the other",
    "raises": "for rank 0 (p=3, n=9): the function raised ZeroDivisionError: integer division",
    "not_a_schedule": "for rank 0 (p=3, n=9): the function returned list, not a",
    "bad_item": "for rank 0 (p=3, n=9) step 0: ('send', 1, 0, 1) is not send(peer, range)",
}


@pytest.mark.parametrize("how", list(BAD))
def test_bad_algorithms_are_refused_naming_algorithm_collective_rank_and_step(how):
    name = f"pybad_{how}"
    with pytest.raises(AlgorithmError) as err:
        _prepare(_definition(name, _mutated(how)), "all_reduce", 0, 3, 9)
    msg = str(err.value)
    assert f"algorithm '{name}' all_reduce" in msg and BAD[how] in msg, msg
    if how == "raises":
        assert "test_python_algorithms.py:" in msg and "in schedule" in msg, msg
    elif how not in ("not_a_schedule", "bad_item"):
        assert "refused by ringcoll.check before anything was sent" in msg, msg


# --------------------------------------------------------------------------------
# in real processes


def _env(transport):
    env = {"RINGCOLL_ALGO_MODULES": MODULES}
    if transport == "stream":
        env["RINGCOLL_STREAM_DELAY_US"] = "20"
    return env


# The full grid (every dtype and op, counts 0, 1, p-1, p+1, large, every root, tiny
# segments) up to 4 ranks; one world of 5.
GRID = [(1, "shm"), (2, "shm"), (2, "gloo"), (2, "stream"), (3, "shm"), (3, "stream"),
        (4, "stream"), (5, "shm")]


@pytest.mark.parametrize("world_size, transport", GRID)
def test_python_algorithms_against_references(world_size, transport):
    mp.run_checks(world_size, algorithms_matrix, PY_ALGOS, timeout=600, transport=transport,
                  env=_env(transport))


def _attempt(call):
    t0 = time.monotonic()
    try:
        call()
        return "no error", None, time.monotonic() - t0
    except Exception as e:  # noqa: BLE001 - the type is checked by the test
        return str(e), type(e).__name__, time.monotonic() - t0


_FAILING_RANK = -1  # the process whose pyflaky raises (set by failing_world)


def _flaky(prm):
    if dist.is_initialized() and dist.get_rank() == _FAILING_RANK:
        raise KeyError("no chunk for this rank")
    return pyring.all_reduce(prm)


def _register_world():
    """The test-only algorithms, in a world's process."""
    register("pyflaky", "all_reduce")(_flaky)
    register("pybad_sizes", "all_reduce")(_mutated("sizes"))
    register("pycount", "all_reduce")(_counted)


def failing_world(rank, p, algo, failing_rank, drift):
    global _FAILING_RANK
    _FAILING_RANK = failing_rank
    _register_world()
    if drift:  # this rank's definition of pydrift differs from the others'
        register("pydrift", "all_reduce")(_reversed_ring if rank == 1 else pyring.all_reduce)
    g = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30),
                       pg_options=ringcoll.Options(algo=algo))
    x = torch.full((9,), float(rank + 1))
    before = x.clone()
    dist.barrier(group=mp.GLOO)
    msg, kind, elapsed = _attempt(lambda: dist.all_reduce(x, group=g))
    after, _, _ = _attempt(lambda: dist.all_reduce(torch.ones(3), group=g))
    return {"msg": msg, "kind": kind, "elapsed": elapsed, "after": after,
            "intact": torch.equal(x, before)}


@pytest.mark.parametrize("transport", ["shm", "stream"])
def test_exception_on_one_rank_fails_every_rank_naming_it(transport):
    res = mp.run_world(3, failing_world, "pyflaky", 1, False, transport=transport,
                       env=_env(transport), timeout=120)
    for rank, r in enumerate(res):
        assert "algorithm 'pyflaky' all_reduce" in r["msg"], (rank, r)
        assert "KeyError: 'no chunk for this rank'" in r["msg"], (rank, r)
        assert "test_python_algorithms.py:" in r["msg"], (rank, r)
        assert r["elapsed"] < 5, (rank, r)  # the report, not the 30 s timeout
        assert r["intact"], (rank, r)
        assert "unusable after an earlier failure" in r["after"], (rank, r["after"])
    assert "rank 1" in res[0]["msg"], res[0]["msg"]


@pytest.mark.parametrize("transport", ["shm", "stream"])
def test_refused_schedule_raises_on_every_rank_before_any_byte_moves(transport):
    res = mp.run_world(3, failing_world, "pybad_sizes", -1, False, transport=transport,
                       env=_env(transport), timeout=120)
    for rank, r in enumerate(res):
        assert BAD["sizes"] in r["msg"], (rank, r)
        assert "algorithm 'pybad_sizes' all_reduce" in r["msg"], (rank, r)
        assert r["intact"] and r["elapsed"] < 5, (rank, r)


@pytest.mark.parametrize("transport", ["shm", "stream"])
def test_ranks_whose_definitions_differ_disagree(transport):
    res = mp.run_world(3, failing_world, "pydrift", -1, True, transport=transport,
                       env=_env(transport), timeout=120)
    for rank, r in enumerate(res):
        assert r["kind"] == "DistBackendError", (rank, r)
        assert "ranks disagree about collective #1" in r["msg"], (rank, r)
        assert "pydrift schedule #" in r["msg"], (rank, r)
        assert r["intact"] and r["elapsed"] < 5, (rank, r)


def _powers_of_two_only(prm):
    if prm.size & (prm.size - 1):
        raise ValueError(f"powers of two only, not {prm.size}")
    return pyring.all_reduce(prm)


def auto_beside_an_algorithm_that_raises_world(rank, p):
    """Every rank registers an all-reduce that raises for this p; auto (resolved on
    rank 0 while the others wait on the store) must leave it out, not fail."""
    register("pypow2", "all_reduce")(_powers_of_two_only)
    register("pypow2", "all_gather")(pyring.all_gather)
    g = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30),
                       pg_options=ringcoll.Options(algo="auto"))
    failures = []
    for n in (0, 1, p + 1, 1000, 300000):
        x = torch.full((n,), float(rank + 1))
        dist.all_reduce(x, group=g)
        if not torch.equal(x, torch.full((n,), float(p * (p + 1) // 2))):
            failures.append(f"all_reduce n={n}: {x[:4].tolist()}")
        out = torch.zeros(n * p)
        dist.all_gather_into_tensor(out, torch.full((n,), float(rank)), group=g)
        if not torch.equal(out, torch.arange(p).repeat_interleave(n).float()):
            failures.append(f"all_gather n={n}: {out[:4].tolist()}")
    dist.barrier(group=g)
    return failures


def test_auto_leaves_out_an_algorithm_that_raises_for_this_world(capfd):
    """p = 3 with an all-reduce that serves powers of two only: the group works,
    the algorithm's all-gather (which serves p = 3) stays a candidate, and
    RINGCOLL_DEBUG says on every rank what was left out and why."""
    mp.run_checks(3, auto_beside_an_algorithm_that_raises_world, timeout=180,
                  transport="shm", env={"RINGCOLL_DEBUG": "1"})
    err = capfd.readouterr().err
    for rank in range(3):
        line = [x for x in err.splitlines()
                if x.startswith(f"[ringcoll rank {rank}/3] RINGCOLL_ALGO=auto resolved")]
        assert line, err[-3000:]
        assert "left out of auto's choice: pypow2 for all_reduce (AlgorithmError: algorithm " \
               "'pypow2' all_reduce" in line[0], line[0]
        assert "ValueError: powers of two only, not 3" in line[0], line[0]
        assert "pypow2 for all_gather" not in line[0], line[0]


def auto_with_a_bad_calibration_world(rank, p):
    t0 = time.monotonic()
    try:
        dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30),
                       pg_options=ringcoll.Options(algo="auto"))
        msg = "no error"
    except Exception as e:  # noqa: BLE001 - the message is checked by the test
        msg = str(e)
    return msg, time.monotonic() - t0


def test_auto_error_on_rank_0_fails_every_rank_at_once(tmp_path):
    """Rank 0 resolves auto: an error there (the calibration file it reads is
    missing) reaches the other ranks through the store, not by their timeout."""
    missing = str(tmp_path / "no-such-calibration.json")
    res = mp.run_world(2, auto_with_a_bad_calibration_world, timeout=120,
                       env={"RINGCOLL_MODEL": missing})
    for rank, (msg, elapsed) in enumerate(res):
        assert f"calibration {missing}: cannot read it" in msg, (rank, msg)
        assert elapsed < 20, (rank, elapsed, msg)


def _prepare_from_threads(definition, threads=8, rounds=100):
    """Errors of `threads` threads each preparing `rounds` calls of 6 sizes at once."""
    errors = []

    def worker(i):
        try:
            for k in range(rounds):
                n = (i * 7 + k) % 6 + 1
                sched, _ = _prepare(definition, "all_reduce", 0, 2, n)
                assert sched[1] == (0, n), sched[1]
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(f"{type(e).__name__}: {e}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython lets them
    try:
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
    return errors


class _SlowLookups(collections.OrderedDict):
    """A memo whose lookups let other threads run in the middle (as a thread switch
    there does, rarely): the window in which another thread evicts what was found."""

    def get(self, key, default=None):
        got = super().get(key, default)
        time.sleep(0.0002)
        return got


def test_the_prepared_memo_is_shared_by_threads_safely():
    """Threads that issue collectives at once miss the memo at once: with a memo of
    2 entries and 6 sizes, 8 threads evict each other's entries constantly. Each
    gets its schedule (a lookup racing an eviction raised KeyError: 8 runs of 8
    before the memo's lock, without _SlowLookups about 1 in 2)."""
    d = _definition("pythreads", pyring.all_reduce)
    d._PREPARED = 2
    d._prepared = _SlowLookups()
    errors = _prepare_from_threads(d)
    assert not errors, errors[:5]
    assert len(d._prepared) <= 2


_CALLS = []  # (collective, rank, n) of every pycount schedule this process built


def _counted(prm):
    _CALLS.append((prm.rank, prm.n))
    return pyring.all_reduce(prm)


def gil_world(rank, p):
    """ringcoll.ops.all_reduce_ holds the GIL while it waits; with RINGCOLL_INLINE_BYTES
    0 the worker runs every call. Two threads call at once on two groups. Each
    (n, rank) schedule is built once."""
    failures = []
    _register_world()
    groups = [dist.new_group(backend="ringcoll",
                             pg_options=ringcoll.Options(algo="pycount", inline_bytes=0))
              for _ in range(2)]
    for n in (5, 1000, 5, 1000, 5):
        x = torch.full((n,), float(rank + 1))
        ringcoll.ops.all_reduce_(x, group=groups[0])
        if not torch.equal(x, torch.full((n,), float(p * (p + 1) // 2))):
            failures.append(f"ops.all_reduce_ n={n}: {x[:4].tolist()}")
    built = sorted(set(_CALLS))
    want = sorted((r, n) for r in range(p) for n in (5, 1000))
    if built != want or len(_CALLS) != len(want):
        failures.append(f"schedules built {_CALLS}, want each of {want} once")

    def worker(g, out):
        for i in range(20):
            y = torch.full((300 + i,), 1.0)
            dist.all_reduce(y, group=g)
            out.append(bool(torch.all(y == p)))

    results = [[], []]
    ts = [threading.Thread(target=worker, args=(groups[k], results[k])) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if any(t.is_alive() for t in ts) or not all(results[0] + results[1]) or \
            len(results[0] + results[1]) != 40:
        failures.append(f"two threads: {results}")
    return failures


def test_gil_held_by_a_waiting_caller_and_two_calling_threads():
    mp.run_checks(2, gil_world, timeout=120, transport="shm", env=_env("shm"))


SCRIPT = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    import ringcoll
    dist.init_process_group("ringcoll")
    r, p = dist.get_rank(), dist.get_world_size()
    x = torch.arange(1000, dtype=torch.float32) + r
    dist.all_reduce(x)
    assert torch.equal(x, torch.arange(1000, dtype=torch.float32) * p + p * (p - 1) / 2), x
    print(f"rank {r}: ok", flush=True)
    dist.destroy_process_group()
""")


def test_torchrun_with_a_module_debug_and_trace(tmp_path):
    script, trace = tmp_path / "train.py", tmp_path / "trace"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env.update(OMP_NUM_THREADS="1", RINGCOLL_ALGO="pyring", RINGCOLL_ALGO_MODULES=PYRING,
               RINGCOLL_DEBUG="1", RINGCOLL_TRACE=str(trace))
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--standalone", str(script)],
        capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0: ok" in out.stdout and "rank 1: ok" in out.stdout, out.stdout
    assert "all_reduce 4000 B: pyring (RINGCOLL_ALGO=pyring)" in out.stderr, out.stderr
    merged = subprocess.run([sys.executable, "-m", "ringcoll.trace", str(trace)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert merged.returncode == 0, merged.stderr
    assert "pyring" in merged.stdout, merged.stdout


# --------------------------------------------------------------------------------
# the algorithms ringcoll ships written in Python: swing, bruck, twolevel

SHIPPED = ("swing", "bruck", "twolevel")


@pytest.mark.parametrize("algo", SHIPPED)
def test_shipped_algorithms_proved_for_1_to_64_ranks(algo):
    # every collective each provides, p = 1..64; twolevel also on host layouts of
    # two hosts, hosts of 4 (and of 3, and a host per rank, up to 16 ranks)
    assert check.check_all(algo, max_p=64) > 0


def test_shipped_algorithms_are_registered_and_shaped():
    assert ringcoll.algorithms()[7:10] == list(SHIPPED)
    assert _C.provides("swing") == ["allreduce", "barrier"]
    assert _C.provides("bruck") == ["allgather"]
    assert _C.provides("twolevel") == ["allreduce", "barrier"]
    from ringcoll.schedules import swing

    assert [swing.rho(s) for s in range(5)] == [1, -1, 3, -5, 11]
    for p, steps in ((2, 2), (4, 4), (8, 6), (16, 8), (3, 4), (6, 6), (12, 8)):
        for r, sched in enumerate(check.schedules("swing", "all_reduce", p, 5 * p)):
            assert len(sched["steps"]) == steps, (p, r)
    # step s of the power-of-two core exchanges with r +- rho(s), one message each way
    for r, sched in enumerate(check.schedules("swing", "all_reduce", 8, 40)):
        for s in range(3):
            want = (r + swing.rho(s)) % 8 if r % 2 == 0 else (r - swing.rho(s)) % 8
            assert [t[1] for t in sched["steps"][s]["transfers"]] == [want, want], (r, s)
    # bruck: ceil(log2 p) steps for any p
    for p in (2, 3, 5, 8, 9, 31):
        for sched in check.schedules("bruck", "all_gather", p, 2 * p):
            assert len(sched["steps"]) == (p - 1).bit_length()
    # twolevel, 3 hosts of 2: ring reduce-scatter (1 step), all-reduce across hosts
    # (4 steps), all-gather (1): only the middle steps cross hosts
    hosts = [0, 0, 1, 1, 2, 2]
    for r, sched in enumerate(check.schedules("twolevel", "all_reduce", 6, 60, hosts=hosts)):
        crossing = [s for s, st in enumerate(sched["steps"])
                    if any(hosts[t[1]] != hosts[r] for t in st["transfers"])]
        assert len(sched["steps"]) == 6 and crossing == [1, 2, 3, 4], (r, crossing)


SHIPPED_ALGOS = {a: _C.provides(a) for a in SHIPPED}
# A few worlds each (the checker proves every p above); twolevel also across two
# pretended hosts (RINGCOLL_HOST: gloo between them, Params.hosts of two hosts),
# even and uneven; tests/test_hosts.py runs them on two namespaced hosts.
SHIPPED_GRID = [(3, "shm", None), (4, "stream", None), (5, "gloo", None),
                (4, "auto", ["a", "a", "b", "b"]), (5, "auto", ["a", "a", "a", "b", "b"])]


@pytest.mark.parametrize("world_size, transport, hosts", SHIPPED_GRID)
def test_shipped_algorithms_against_references(world_size, transport, hosts):
    algos = {"twolevel": SHIPPED_ALGOS["twolevel"]} if hosts else SHIPPED_ALGOS
    mp.run_checks(world_size, algorithms_matrix, algos, timeout=600, transport=transport,
                  env=_env(transport), rank_env={"RINGCOLL_HOST": hosts} if hosts else None)


# --------------------------------------------------------------------------------
# the vocabulary: incoming-first reduces, an empty scratch, results and reduced marks
# in the scratch (examples/recdbl.py, tests/pyvocab.py)

RECDBL = str(REPO / "examples" / "recdbl.py")
_VOCAB = f"{RECDBL},tests.pyvocab"


def _swap(prm):
    from tests.pyvocab import swap

    return swap(prm)


def _swap_one_order(prm):
    """pyswap with every fold buffer-first: the two partners fold in opposite orders."""
    s = _swap(prm)
    s.steps = [[Transfer("recv_reduce", *t[1:]) if isinstance(t, Transfer) and
                t.kind == "recv_reduce_first" else t for t in st] for st in s.steps]
    return s


def _reads_empty_scratch(prm):
    """pyswap that sends its scratch in round 0, before anything was written there."""
    s = _swap(prm)
    q = s.steps[0][0].peer
    s.steps[0][:2] = [send(q, (prm.n, 2 * prm.n)), recv_copy(q, (0, prm.n))]
    return s


def _marks_across(prm):
    s = _swap(prm)
    s.steps[-1] = [t for t in s.steps[-1] if not isinstance(t, schedules.Reduced)] + \
        [reduced((prm.n - 1, prm.n + 1))]
    return s


def test_the_vocabulary_is_proved_and_its_mistakes_refused():
    d = _definition("pyswap", _swap)
    for p in (1, 2, 4, 8):
        for n in (0, 1, 5, 64):
            sched, _ = _prepare(d, "all_reduce", 0, p, n)
            rounds = (p - 1).bit_length()
            # the result moves out of the scratch after an odd number of rounds:
            # a last step of one local copy
            moved = rounds % 2 == 1 and n > 0
            assert len(sched[3]) == max(1, 2 * rounds) + moved, (p, n, sched[3])
            assert sched[1] == (0, n) and sched[4] is False  # result in place, empty scratch
            if moved:
                assert sched[3][-1] == ([(0, 0, n, 2 * n), (1, 0, 0, n)], []), sched[3][-1]
    for fn, fragment in ((_swap_one_order, "element 0 is folded as (0 + 1) on rank 1 but as "
                                           "(1 + 0) on rank 0: the ranks would end with "
                                           "different bits"),
                         (_reads_empty_scratch, "step 0: rank 0 sends [9, 18) to rank 1 before "
                                                "it holds all of it"),
                         (_marks_across, "marks [8, 10) reduced, which spans the end of the "
                                         "buffer (9) and its scratch")):
        with pytest.raises(AlgorithmError, match=re.escape(fragment)):
            _prepare(_definition("pybadvocab", fn), "all_reduce", 0, 2, 9)


def test_recursive_doubling_is_proved_for_any_p():
    out = _tool(["ringcoll.check", "recdbl", "recdbl_copyback", "pyswap", "--max-p", "9"],
                modules=_VOCAB)
    assert out.returncode == 0, out.stderr
    for line in ("recdbl (all_reduce, barrier): ", "recdbl_copyback (all_reduce, barrier): ",
                 "pyswap (all_reduce, barrier): ", "pyswap: all_reduce skipped at p = 3, 5-7, 9"):
        assert line in out.stdout, out.stdout
    # one receive and one reduce a round: two steps, where the copy-back takes three
    from ringcoll.schedules import Params

    sys.path.insert(0, str(REPO / "examples"))
    try:
        schedules.load_modules(RECDBL)
        import recdbl
    finally:
        sys.path.pop(0)
    for p, steps, copyback in ((2, 2, 3), (4, 4, 6), (8, 6, 9), (6, 6, 8)):
        assert len(recdbl.all_reduce(Params(0, p, 10)).steps) == steps, p
        assert len(recdbl.all_reduce_copyback(Params(0, p, 10)).steps) == copyback, p


def signed_zeros_world(rank, p, algo):
    """MAX over +0, -0 and NaNs of different payloads, whose result bits depend on the
    operand order: every rank ends with what lower OP upper gives at every round of
    recursive doubling (computed with ringcoll's own reducer), bit for bit."""
    from ringcoll import _C

    def inputs(r):
        bits = [0, -2**31, 0x7fc00000 + r, -4194304 - r, 0, -2**31, 0x7f800001 + r]
        return torch.tensor([bits[(i + r) % len(bits)] for i in range(21)],
                            dtype=torch.int32).view(torch.float32)

    def fold(ranks):  # lower OP upper, halving
        if len(ranks) == 1:
            return inputs(ranks[0])
        half = len(ranks) // 2
        return _C.cpu_reduce(fold(ranks[:half]), fold(ranks[half:]), "max")

    g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo=algo))
    x = inputs(rank)
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=g)
    want = fold(list(range(p)))
    if not torch.equal(x.view(torch.int32), want.view(torch.int32)):
        return [f"{algo}: {x.view(torch.int32).tolist()} != {want.view(torch.int32).tolist()}"]
    return []


@pytest.mark.parametrize("algo", ["recdbl", "pyswap"])
@pytest.mark.parametrize("transport", ["shm", "stream"])
def test_incoming_first_folds_in_the_schedules_order(algo, transport):
    """The engine reduces incoming OP buffer where the schedule says so: on a
    one-buffer-first engine the upper rank of each pair folds upper OP lower and
    its bits differ."""
    mp.run_checks(4, signed_zeros_world, algo, timeout=180, transport=transport,
                  env={"RINGCOLL_ALGO_MODULES": _VOCAB})


VOCAB_ALGOS = {"recdbl": ["allreduce", "barrier"], "recdbl_copyback": ["allreduce", "barrier"],
               "pyswap": ["allreduce", "barrier"]}


@pytest.mark.parametrize("world_size, transport", [(2, "shm"), (2, "gloo"), (4, "shm"),
                                                   (4, "stream"), (3, "shm")])
def test_vocabulary_algorithms_against_references(world_size, transport):
    algos = {a: c for a, c in VOCAB_ALGOS.items() if a != "pyswap" or world_size != 3}
    mp.run_checks(world_size, algorithms_matrix, algos, timeout=600, transport=transport,
                  env={**_env(transport), "RINGCOLL_ALGO_MODULES": _VOCAB})


# --------------------------------------------------------------------------------
# where an algorithm applies (Applies): every tool honours the declaration


def test_a_declaration_is_checked_and_described():
    from ringcoll.schedules import POWERS_OF_TWO, Applies

    assert Applies().describe() == "everywhere"
    assert Applies(world_sizes=POWERS_OF_TWO, min_bytes=1 << 10, max_bytes=64 << 20,
                   count_multiple=8).describe() == \
        "world sizes powers of two; from 1 KiB; below 64 MiB; counts multiples of 8"
    assert Applies(world_sizes=range(4, 1, -1)).world_sizes == (2, 3, 4)
    for bad, fragment in (({"world_sizes": [0]}, "world_sizes [0]"),
                          ({"world_sizes": "odd"}, "world_sizes 'odd'"),
                          ({"min_bytes": -1}, "min_bytes -1"),
                          ({"min_bytes": 8, "max_bytes": 8}, "max_bytes 8"),
                          ({"count_multiple": 0}, "count_multiple 0")):
        with pytest.raises(ValueError, match=re.escape(fragment)):
            Applies(**bad)
    with pytest.raises(TypeError, match="applies must be a ringcoll.schedules.Applies"):
        register("pyapplies2", "all_reduce", applies={"world_sizes": [2]})


_APPLIES = "tests.pyapplies"  # pyring's all-reduce for p = 2 and 4, from 1 KiB


def test_check_and_sim_skip_what_the_algorithm_does_not_serve_and_say_so():
    out = _tool(["ringcoll.check", "pyapplies", "--max-p", "6"], modules=_APPLIES)
    assert out.returncode == 0, out.stderr
    assert "pyapplies: all_reduce skipped at p = 1, 3, 5-6: world sizes 2, 4; from 1 KiB " \
           "(it declares)" in out.stdout, out.stdout
    assert "pyapplies (all_reduce, barrier): " in out.stdout, out.stdout
    out = _tool(["ringcoll.sim", "--algo", "pyapplies", "--per-host", "3", "--size", "64K"],
                modules=_APPLIES)
    assert out.returncode == 0, out.stderr
    assert "pyapplies all_reduce 65536 B on 1 x 3: skipped: algorithm 'pyapplies' does not " \
           "apply to all_reduce at p=3" in out.stdout, out.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env["RINGCOLL_ALGO_MODULES"] = _APPLIES
    out = subprocess.run([sys.executable, "-c", _SIM_SNIPPET], capture_output=True, text=True,
                         timeout=240, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "skipped: algorithm 'pyapplies' does not apply to all_reduce at p=4, n=128 " \
           "(512 bytes): 512 bytes is below 1 KiB" in out.stdout, out.stdout
    assert "65536 B: 6 steps" in out.stdout, out.stdout  # served: simulated


_SIM_SNIPPET = """
from ringcoll import _modules, check, sim
_modules.load_from_environment()
topo = sim.Topology(1, 4, sim.INTRA, sim.INTER, gamma=sim.GAMMA)
for size in (512, 65536):
    try:
        print(f"{size} B: {sim.simulate('pyapplies', 'all_reduce', topo, size).steps} steps")
    except check.NotApplicable as e:
        print(f"{size} B: skipped: {e}")
"""


_AUTO_SNIPPET = """
import json
from ringcoll import _modules, model
from ringcoll.model import auto
_modules.load_from_environment()
out = {}
for p in (2, 3):
    dropped = {}
    t = auto.predictions("all_reduce", p, "shm", model.DEFAULTS, auto.GRID, dropped)
    out[p] = {"priced": {a: [v != float("inf") for v in ts] for a, ts in t.items()},
              "dropped": auto.left_out(dropped)}
print(json.dumps(out))
"""


def test_auto_and_the_model_leave_out_what_the_algorithm_does_not_serve():
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env["RINGCOLL_ALGO_MODULES"] = _APPLIES
    out = subprocess.run([sys.executable, "-c", _AUTO_SNIPPET], capture_output=True, text=True,
                         timeout=300, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    priced = got["2"]["priced"]["pyapplies"]  # only where [size, next size) is >= 1 KiB
    from ringcoll.model import auto

    assert priced == [b >= 1024 for b in auto.GRID], priced
    assert all(got["2"]["priced"]["ring"]) and got["2"]["dropped"] == ""
    assert "pyapplies" not in got["3"]["priced"]
    assert "pyapplies for all_reduce (algorithm 'pyapplies' does not apply to all_reduce at " \
           "p=3: p=3 is not among its world sizes" in got["3"]["dropped"], got["3"]


def refused_world(rank, p):
    """pyapplies (world sizes 2 and 4, all-reduces from 1 KiB) forced on a group."""
    failures = []
    g = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30),
                       pg_options=ringcoll.Options(algo="pyapplies"))
    for n in (64, 1000):
        x = torch.full((n,), float(rank + 1))
        msg, _, elapsed = _attempt(lambda: dist.all_reduce(x, group=g))
        served = p in (2, 4) and n * 4 >= 1024
        if served and (msg != "no error" or not torch.equal(x, torch.full((n,), p * (p + 1) / 2))):
            failures.append(f"n={n}: {msg} {x[:3].tolist()}")
        why = f"p={p} is not among its world sizes" if p not in (2, 4) else \
            f"{n * 4} bytes is below 1 KiB"
        want = (f"ringcoll::allreduce: algorithm 'pyapplies' does not apply to all_reduce at "
                f"p={p}, n={n} ({n * 4} bytes): {why} (pyapplies declares for all_reduce: world "
                "sizes 2, 4; from 1 KiB); RINGCOLL_ALGO (or Options(algo=...)) must name another")
        if not served and (want not in msg or elapsed > 5 or
                           not torch.equal(x, torch.full((n,), float(rank + 1)))):
            failures.append(f"n={n}: {msg!r}, want {want!r}")
    # the group is intact: a barrier (which runs the default where pyapplies does not
    # serve it) and a collective pyapplies does not provide
    dist.barrier(group=g)
    y = torch.arange(5.0) if rank == 0 else torch.zeros(5)
    dist.broadcast(y, src=0, group=g)
    if not torch.equal(y, torch.arange(5.0)):
        failures.append(f"broadcast after: {y.tolist()}")
    return failures


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_call_the_algorithm_does_not_serve_is_refused_on_every_rank(world_size):
    mp.run_checks(world_size, refused_world, timeout=180, transport="shm",
                  env={"RINGCOLL_ALGO_MODULES": _APPLIES})


# --------------------------------------------------------------------------------
# docs/ALGORITHMS.md's walk


def _fenced(doc):
    """The doc's fenced blocks, in order: (language, text)."""
    parts = doc.split("```")
    return [(b.split("\n", 1)[0], b.split("\n", 1)[1] if "\n" in b else "")
            for b in parts[1::2]]


def test_the_docs_walk_shows_the_example_and_its_commands_run():
    doc = (REPO / "docs" / "ALGORITHMS.md").read_text()
    blocks = _fenced(doc)
    assert blocks[0] == ("python", (REPO / "examples" / "pyring.py").read_text()), \
        "docs/ALGORITHMS.md's first example is not examples/pyring.py"
    commands = [c for lang, text in blocks if lang == "bash" for c in text.splitlines()]
    for path in ("examples/pyring.py", "examples/allreduce.py"):
        assert any(path in c for c in commands) and (REPO / path).exists(), path
    # The checker's and the simulator's steps, verbatim, print what the doc shows
    # (the torchrun, trace and benchmark steps run in
    # test_torchrun_with_a_module_debug_and_trace and
    # test_bench_runs_a_python_algorithm_beside_the_built_in).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    ran = 0
    for (lang, text), (after, shown) in zip(blocks, blocks[1:]):
        if lang != "bash" or after != "" or not any(
                t in text for t in ("ringcoll.check", "ringcoll.sim")):
            continue
        out = subprocess.run(text, shell=True, capture_output=True, text=True, timeout=300,
                             env=env, cwd=REPO)
        refused = shown.startswith("FAILED:")  # the broken variant's step
        assert out.returncode == (1 if refused else 0), (text, out.stderr)
        assert "Warning" not in out.stderr, (text, out.stderr)  # runpy's, say
        for line in shown.splitlines():
            printed = out.stderr if refused else out.stdout
            assert line == "..." or line in printed, (text, line, printed)
        ran += 1
    assert ran == 3


def test_the_checker_imports_nothing_above_it():
    """ringcoll.check is the lower room, the vocabulary (ringcoll.schedules) sits above
    it: the checker imports none of it (they imported each other), and the package
    does not import the checker as it loads (python -m ringcoll.check would run a
    second copy of it, with runpy's RuntimeWarning)."""
    import ast

    tree = ast.parse((REPO / "ringcoll" / "check.py").read_text())
    named = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            named |= {node.module or ""} | {f"{node.module or ''}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            named |= {a.name for a in node.names}
    assert not [m for m in named if "schedules" in m], named
    out = subprocess.run([sys.executable, "-c", "import sys, ringcoll; "
                          "print('ringcoll.check' in sys.modules)"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


_NOT_EDITABLE = """
import os, runpy, sys

# As after `pip install .`: no editable finder, the installed copy on sys.path, and
# the checkout (the working directory) first, as `python -m` puts it.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[0] = os.getcwd()
sys.path.append(sys.argv[1])
sys.argv = ["ringcoll.check"] + sys.argv[2:]
runpy.run_module("ringcoll.check", run_name="__main__", alter_sys=True)
"""


def test_the_walk_runs_in_a_checkout_beside_a_non_editable_install(tmp_path):
    """From a checkout's root whose ringcoll/ has no built extension, with ringcoll
    installed elsewhere (pip install .), `python -m ringcoll.check` runs the
    installed copy's modules (it said "ringcoll's C++ extension is not built in
    .../ringcoll"), with no warning."""
    import shutil

    ignore = shutil.ignore_patterns("__pycache__")
    site, checkout = tmp_path / "site-packages", tmp_path / "checkout"
    shutil.copytree(REPO / "ringcoll", site / "ringcoll", ignore=ignore)
    shutil.copy(REPO / "ringcoll_autoload.py", site)
    shutil.copytree(REPO / "ringcoll", checkout / "ringcoll",
                    ignore=shutil.ignore_patterns("__pycache__", "_C.*"))
    (tmp_path / "run.py").write_text(_NOT_EDITABLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", str(tmp_path / "run.py"),
                          str(site), "ring", "--max-p", "2"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=checkout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ring (all_reduce, reduce_scatter, all_gather, broadcast, reduce, barrier): " \
           "73 schedules proved" in out.stdout, out.stdout
    assert "Warning" not in out.stderr, out.stderr


def test_a_name_defined_again_is_what_the_tools_read():
    # (a ring either way round: a correct algorithm left registered in this process)
    register("pyagain", "all_reduce")(pyring.all_reduce)
    before = list(model.terms("pyagain", "all_reduce", 3, 1 << 12, "shm", model.load()))
    model.terms("pyagain", "all_reduce", 3, 1 << 12, "nccl", model.load())  # GPU: layers
    assert model.layers_of.cache_info().currsize > 0
    register("pyagain", "all_reduce")(_reversed_ring)
    assert check.schedules("pyagain", "all_reduce", 3, 9) != check.schedules("pyring",
                                                                             "all_reduce", 3, 9)
    assert model.transfers.cache_info().currsize == 0  # the old tables are gone
    assert model.layers_of.cache_info().currsize == 0
    after = list(model.terms("pyagain", "all_reduce", 3, 1 << 12, "shm", model.load()))
    assert after == before  # the same counts: the ring either way round


def test_bench_runs_a_python_algorithm_beside_the_built_in(tmp_path, capsys, monkeypatch):
    """The walk's last step, small: the benchmark's workers import the module."""
    import json

    from ringcoll.bench import main as bench

    monkeypatch.setenv("RINGCOLL_ALGO_MODULES", PYRING)
    rc = bench(["-b", "8", "-e", "4K", "-f", "512", "--nproc", "2", "--budget", "0.01",
                "-n", "3", "-R", "2", "-w", "1", "--collectives", "all_reduce",
                "--backends", "ringcoll,ringcoll+algo=pyring", "--algo", "ring",
                "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"),
                "--plot", str(tmp_path / "b.png")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "ringcoll+algo=pyring is ringcoll too: above 1, it is slower than ringcoll (ring)" \
        in out, out
    rows = json.loads((tmp_path / "b.json").read_text())["results"]
    assert {r["backend"] for r in rows} == {"ringcoll", "ringcoll+algo=pyring"}
    assert all(r[k]["wrong"] == 0 for r in rows for k in ("oop", "ip") if r[k])


@pytest.mark.parametrize("world_size", [3, 6])
def test_shipped_all_reduces_leave_every_rank_the_same_bits(world_size):
    from tests.test_same_bits import same_bits_world

    mp.run_checks(world_size, same_bits_world, ["swing", "twolevel"], timeout=600,
                  transport="shm", limit=20)


@pytest.mark.parametrize("algo, collective", [("swing", "all_reduce"), ("bruck", "all_gather"),
                                              ("twolevel", "all_reduce")])
def test_shipped_algorithms_simulated_at_1024_ranks(algo, collective):
    topo = sim.Topology(128, 8, sim.INTRA, sim.INTER, gamma=sim.GAMMA)
    r = sim.simulate(algo, collective, topo, 64 << 20)
    assert r.seconds > 0 and "p=64" in r.checked and "8 ranks a host" in r.checked, r
    steps = {"swing": 20, "bruck": 10, "twolevel": 2 * 7 + 2 * 127}[algo]
    assert r.steps == steps, r


# --------------------------------------------------------------------------------
# all-to-all that forwards blocks: equal splits only (examples/bruck_alltoall.py)

BRUCK_A2A = str(REPO / "examples" / "bruck_alltoall.py")


def _bruck_a2a():
    """examples/bruck_alltoall.py, imported (bruck_a2a is registered: it is correct)."""
    schedules.load_modules(BRUCK_A2A)
    return sys.modules["bruck_alltoall"]


def _equal(p, m):
    return [[m] * p for _ in range(p)]


def test_a_forwarding_all_to_all_declaring_equal_splits_is_proved_at_the_calls_counts():
    _bruck_a2a()
    bruck = schedules._DEFINED["bruck_a2a"]
    for p in range(1, 9):
        for m in (0, 1, 3):
            digests = {_prepare(bruck, "all_to_all", r, p, 2 * p * m, counts=_equal(p, m))[1]
                       for r in range(p)}
            assert len(digests) == 1 and 0 not in digests, (p, m)
    # ceil(log2 p) messages a rank: one exchange step a round
    for p in (2, 3, 4, 5, 8):
        for r, sched in enumerate(check.schedules("bruck_a2a", "all_to_all", p, 0,
                                                  counts=_equal(p, 2))):
            peers = [t[1] for st in sched["steps"] for t in st["transfers"] if t[1] != r]
            assert len(peers) == 2 * (p - 1).bit_length(), (p, r, peers)
    assert check.check_all("bruck_a2a", max_p=12) > 0
    # the checker proves it at equal splits and refuses other counts
    with pytest.raises(check.NotApplicable, match="declares all_to_all for equal splits only"):
        check.check("bruck_a2a", "all_to_all", 3, 6, counts=[[1, 2, 3]] * 3)


def test_a_rank_whose_splits_are_not_equal_is_refused_naming_its_counts():
    _bruck_a2a()
    with pytest.raises(AlgorithmError) as err:
        _prepare(schedules._DEFINED["bruck_a2a"], "all_to_all", 1, 3, 0,
                 counts=[[1, 1, 1], [2, 1, 0], [1, 1, 1]])
    assert "algorithm 'bruck_a2a' all_to_all for rank 1 (p=3): it declares equal splits " \
           "only, but this rank sends [2, 1, 0] and receives [1, 1, 1] elements" in \
           str(err.value), err.value
    with pytest.raises(ValueError, match="equal_splits is all_to_all's declaration"):
        register("pyequal", "all_reduce", applies=schedules.Applies(equal_splits=True))


def test_a_refusal_says_which_ranks_schedules_were_built_from_assumed_counts():
    """The same Bruck without its declaration: refused for the counts invented for the
    other ranks, and the message says those counts were assumed, and what to declare."""
    mod = _bruck_a2a()
    plain = _definition("pyforward", mod.all_to_all, "all_to_all")
    with pytest.raises(AlgorithmError) as err:
        _prepare(plain, "all_to_all", 0, 4, 8, counts=_equal(4, 1))
    msg = str(err.value)
    assert "algorithm 'pyforward' all_to_all p=4" in msg, msg
    assert "rank 0's counts are this call's, and the schedules of ranks 1-3 were built from " \
           "assumed counts, ringcoll.check's uneven pattern alltoall_counts(4, 5)" in msg, msg
    assert "Applies(equal_splits=True)" in msg, msg
    out = _tool(["ringcoll.check", "pyforward", "--max-p", "4"], modules="tests.pyforward")
    assert out.returncode == 1, out.stdout
    assert "every rank's counts assumed: ringcoll.check's uneven pattern" in out.stderr, \
        out.stderr


def _uneven(g, counts, rank):
    """all_to_all_single of counts[s][d] elements from s to d, on group g."""
    send, recv = counts[rank], [row[rank] for row in counts]
    x, y = torch.zeros(sum(send)), torch.zeros(sum(recv))
    return _attempt(lambda: dist.all_to_all_single(y, x, recv, send, group=g))


def test_the_checks_failed_line_comes_after_its_progress_lines():
    """stdout and stderr into one pipe, stdout block-buffered (no PYTHONUNBUFFERED):
    the progress lines come first, each whole, and the FAILED line last, on its own
    (it came first, the progress lines after it at exit, or ran into one)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RINGCOLL_") and k != "PYTHONUNBUFFERED"}
    env["RINGCOLL_ALGO_MODULES"] = "tests.pyforward"
    out = subprocess.run([sys.executable, "-m", "ringcoll.check", "pyforward", "--max-p", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=240, env=env, cwd=REPO)
    lines = out.stdout.splitlines()
    assert out.returncode == 1 and len(lines) >= 2, out.stdout
    assert lines[-1].startswith("FAILED: pyforward all_to_all p=2"), out.stdout
    assert all(re.fullmatch(r"pyforward: p = 1\.\.\d+ proved \(\d+ schedules\)", x)
               for x in lines[:-1]), out.stdout


def bruck_a2a_world(rank, p):
    """bruck_a2a against the exact exchange at equal splits of several sizes and
    dtypes; then uneven calls, refused on every rank: in one group every rank's own
    splits are uneven (each refuses its own), in the other only ranks 1 and 2's (rank
    0 and the others learn why through the store, not at their timeout)."""
    failures = []
    opts = ringcoll.Options(algo="alltoall=bruck_a2a")
    g = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30), pg_options=opts)
    for m, dtype in ((1, torch.float32), (5, torch.int64), (1000, torch.float32),
                     (300_000, torch.bfloat16)):
        # element i of the block for rank d: a code of (source, destination, i % 7),
        # below 256 for p <= 4, so exact in every dtype (bfloat16 too)
        x = torch.cat([torch.arange(m) % 7 + 8 * d + 32 * rank for d in range(p)])
        y = torch.full((p * m,), -1, dtype=dtype)
        dist.all_to_all_single(y, x.to(dtype), group=g)
        want = torch.cat([torch.arange(m) % 7 + 8 * rank + 32 * s for s in range(p)])
        if not torch.equal(y, want.to(dtype)):
            bad = (y != want.to(dtype)).nonzero()[:3].flatten().tolist()
            failures.append(f"m={m} {dtype}: wrong at {bad}")
    everyone = dist.new_group(backend="ringcoll", timeout=timedelta(seconds=30),
                              pg_options=opts)
    skewed = [[(s + d) % p for d in range(p)] for s in range(p)]
    some = [[1] * p for _ in range(p)]
    some[1][2], some[2][1] = 2, 0
    for name, group, counts in (("every rank uneven", everyone, skewed),
                                ("ranks 1 and 2 uneven", g, some)):
        msg, _, elapsed = _uneven(group, counts, rank)
        if "it declares equal splits only" not in msg or elapsed > 10:
            failures.append(f"{name}: {msg!r} after {elapsed:.1f} s")
    return failures


@pytest.mark.parametrize("world_size, transport", [(3, "shm"), (4, "shm"), (3, "gloo"),
                                                   (4, "stream")])
def test_bruck_all_to_all_runs_exact_on_every_transport(world_size, transport):
    # Needs an extension built with the all-to-all job's scratch (csrc/engine/
    # collectives/alltoall.cc): without it every call fails with "elements [..) of
    # step 0 are not within one region".
    mp.run_checks(world_size, bruck_a2a_world, timeout=300, transport=transport,
                  env={**_env(transport), "RINGCOLL_ALGO_MODULES": BRUCK_A2A})


# --------------------------------------------------------------------------------
# world sizes as ranges or a predicate, described in a few words


def _composite(p):
    """composite p up to 4096"""
    return 3 < p <= 4096 and any(p % k == 0 for k in range(2, int(p ** 0.5) + 1))


def test_world_sizes_as_ranges_or_a_predicate_are_described_in_a_few_words():
    from ringcoll.schedules import Applies

    assert Applies(world_sizes=range(2, 65537)).describe() == "world sizes 2-65536"
    assert Applies(world_sizes=[range(2, 9), 16, range(32, 65)]).world_sizes == \
        tuple(range(2, 9)) + (16,) + tuple(range(32, 65))
    assert Applies(world_sizes=_composite).describe() == \
        "world sizes composite p up to 4096: 4, 6, 8-10, 12, ..., 4094-4096 (3,531 sizes)"
    assert Applies(world_sizes=lambda p: p % 2 == 0).describe().startswith(
        "world sizes where a predicate holds: 2, 4, 6, 8, ..., 65536 (32,768 sizes)")
    with pytest.raises(ValueError, match=r"predicate 'where _boom\(p\)' raised ZeroDivisionError"):
        Applies(world_sizes=_boom)
    # registered: the extension refuses by the served sizes, and says so in a line
    register("pycomposite", "all_reduce", applies=Applies(world_sizes=_composite))(
        pyring.all_reduce)
    register("pywide", "all_reduce", applies=Applies(world_sizes=range(2, 65537)))(
        pyring.all_reduce)
    assert not check.refusal("pycomposite", "all_reduce", 4096)
    why = check.refusal("pycomposite", "all_reduce", 4099)  # a prime
    assert why == ("algorithm 'pycomposite' does not apply to all_reduce at p=4099: p=4099 "
                   "is not among its world sizes (pycomposite declares for all_reduce: world "
                   "sizes composite p up to 4096: 4, 6, 8-10, 12, ..., 4094-4096 (3,531 "
                   "sizes))"), why
    assert check.refusal("pywide", "all_reduce", 1) == (
        "algorithm 'pywide' does not apply to all_reduce at p=1: p=1 is not among its world "
        "sizes (pywide declares for all_reduce: world sizes 2-65536)")
    skipped = []
    check.check_all("pycomposite", max_p=40, log=skipped.append)
    line = next(x for x in skipped if "skipped" in x)
    assert line == ("pycomposite: all_reduce skipped at p = 1-3, 5, 7, 11, ..., 37 (13 sizes): "
                    "world sizes composite p up to 4096: 4, 6, 8-10, 12, ..., 4094-4096 "
                    "(3,531 sizes) (it declares)"), line


def _boom(p):
    return 1 // 0
