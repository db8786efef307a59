"""Capture and replay on the stream emulation (ringcoll.graphs, csrc/backend/capture.h):
the rules a CUDA graph's capture follows, run on CPU tensors so that CI runs them.

Each replay gets new input values first and must give what gloo gives on the same
inputs, exactly (small integers); what cannot be captured raises at capture time on
every rank; a captured collective is not watched (no timeout while nobody replays
it); a replay whose peer died raises after the group's timeout, naming the launch
and the peer; ranks that replay different graphs fail the fingerprint check. The
GPU twin (torch.cuda.graph on CUDA tensors) is tests/test_gpu.py's."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from tests import mp

# (dtype, op) pairs: every reduction kind once, on a dtype that keeps it exact.
CASES = [(torch.float32, dist.ReduceOp.SUM), (torch.int32, dist.ReduceOp.MAX),
         (torch.bfloat16, dist.ReduceOp.SUM), (torch.float64, dist.ReduceOp.MIN),
         (torch.int64, dist.ReduceOp.PRODUCT)]


def _values(n, rank, k, salt, dtype, op):
    """Small integers that differ per rank, replay and element; PRODUCT's stay in
    {1, 2}, so that p of them multiply exactly."""
    i = torch.arange(n, dtype=torch.int64)
    v = (i * 7 + rank * 5 + k * 3 + salt) % 11
    if op == dist.ReduceOp.PRODUCT:
        v = 1 + v % 2
    return v.to(dtype)


def _graph_for(rank, p, n, dtype, op):
    """The tensors of one graph: an in-place all-reduce, an out-of-place
    reduce-scatter and all-gather, a broadcast from the last rank, and a ring of
    send/recv; and the gloo reference of each."""
    t = {
        "ar": torch.zeros(n, dtype=dtype),
        "rs_in": torch.zeros(n * p, dtype=dtype), "rs_out": torch.zeros(n, dtype=dtype),
        "ag_in": torch.zeros(n, dtype=dtype), "ag_out": torch.zeros(n * p, dtype=dtype),
        "bc": torch.zeros(n, dtype=dtype),
        "send": torch.zeros(n, dtype=dtype), "recv": torch.zeros(n, dtype=dtype),
    }

    def calls(group):
        dist.all_reduce(t["ar"], op=op, group=group)
        dist.reduce_scatter_tensor(t["rs_out"], t["rs_in"], op=op, group=group)
        dist.all_gather_into_tensor(t["ag_out"], t["ag_in"], group=group)
        dist.broadcast(t["bc"], src=p - 1, group=group)

    def ring():
        ops = [dist.P2POp(dist.isend, t["send"], (rank + 1) % p),
               dist.P2POp(dist.irecv, t["recv"], (rank - 1) % p)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    return t, calls, ring


def replayed_world(rank, p, counts, replays):
    """Per (dtype, op) and count: capture the graph once, then replay it with new
    inputs before each replay; every output equal to gloo's on the same inputs."""
    from ringcoll.graphs import EmulatedGraph

    failures = []
    for dtype, op in CASES:
        for n in counts:
            t, calls, ring = _graph_for(rank, p, n, dtype, op)
            g = EmulatedGraph()
            with g.capture():
                calls(None)
                ring()
            if len(g) != 5:
                failures.append(f"{dtype} {op} n={n}: {len(g)} launches recorded: {g.ops}")
            for k in range(replays if n == p + 1 else 3):
                for j, name in enumerate(("ar", "rs_in", "ag_in", "bc", "send")):
                    t[name].copy_(_values(t[name].numel(), rank, k, j, dtype, op))
                ins = {name: t[name].clone() for name in t}
                g.replay()
                # gloo on the same inputs (ring: the left neighbour's send)
                ref = {name: v.clone() for name, v in ins.items()}
                dist.all_reduce(ref["ar"], op=op, group=mp.GLOO)
                ref["rs_out"] = _reduce_scatter_ref(ins["rs_in"], op, rank, p)
                dist.all_gather_into_tensor(ref["ag_out"], ref["ag_in"], group=mp.GLOO)
                dist.broadcast(ref["bc"], src=p - 1, group=mp.GLOO)
                ref["recv"] = _values(n, (rank - 1) % p, k, 4, dtype, op)
                for name in ("ar", "rs_out", "ag_out", "bc", "recv"):
                    if not torch.equal(t[name], ref[name]):
                        failures.append(f"{dtype} {op} n={n} replay {k}: {name} "
                                        f"{t[name][:8].tolist()} != gloo's {ref[name][:8].tolist()}")
                if failures:
                    return failures
    return failures


def _reduce_scatter_ref(rs_in, op, rank, p):
    """gloo has no reduce-scatter: an all-reduce of the whole input on gloo, then
    this rank's block."""
    whole = rs_in.clone()
    dist.all_reduce(whole, op=op, group=mp.GLOO)
    n = whole.numel() // p
    return whole[rank * n:(rank + 1) * n].clone()


@pytest.mark.parametrize("p", [2, 3])
def test_a_captured_graph_replays_exactly_with_new_inputs(p):
    # 100 replays at count p + 1; 3 at the other counts (0, 1, p - 1, and one of
    # several chunks).
    mp.run_checks(p, replayed_world, [0, 1, p - 1, p + 1, 70_001], 100, transport="stream",
                  timeout=600)


def test_a_python_algorithm_is_captured_and_replayed():
    pyring = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "pyring.py")
    mp.run_checks(3, replayed_world, [3 + 1], 100, transport="stream", timeout=300,
                  env={"RINGCOLL_ALGO": "pyring", "RINGCOLL_ALGO_MODULES": pyring})


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return "no error"


def refusals_world(rank, p):
    """What cannot be captured raises at capture time, naming the call; another
    thread's call runs at once (a capture is the capturing thread's); the group
    works after the capture."""
    import threading

    from ringcoll.graphs import EmulatedGraph

    out = {}
    before = EmulatedGraph()
    with before.capture():
        dist.all_reduce(torch.ones(2))
    other = dist.new_group(backend="ringcoll")
    x = torch.ones(4)
    y = torch.full((3,), float(rank + 1))
    g = EmulatedGraph()
    with g.capture():
        dist.all_reduce(x)
        out["barrier"] = _error(dist.barrier)
        out["replay_uncaptured"] = _error(EmulatedGraph().replay)
        out["replay_inside"] = _error(before.replay)
        out["nested"] = _error(lambda: EmulatedGraph().capture().__enter__())
        sparse = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (4,))
        out["sparse"] = _error(lambda: dist.all_reduce(sparse))
        # torch's dist.monitored_barrier serves gloo groups only: the backend's own method
        be = dist.group.WORLD._get_backend(torch.device("cpu"))
        out["monitored"] = _error(lambda: be.monitored_barrier(timedelta(seconds=5), False))
        t = threading.Thread(target=lambda: dist.all_reduce(y))
        t.start()
        t.join()
        out["other_thread"] = y.tolist()  # ran at once, not recorded
    out["ops"] = g.ops
    out["again"] = _error(lambda: g.capture().__enter__())  # a graph is captured once
    out["end_without"] = _error(dist.group.WORLD._get_backend(torch.device("cpu"))._capture_end)
    out["foreign"] = _error(lambda: other._get_backend(torch.device("cpu"))._replay(g._graph))
    # a graph of a group destroyed since: its replay raises, naming the call
    sub = EmulatedGraph(other)
    with sub.capture():
        dist.all_reduce(torch.ones(3), group=other)
    dist.destroy_process_group(other)
    out["destroyed"] = _error(sub.replay)
    out["x_at_capture"] = x.tolist()  # not written by the capture
    g.replay()
    out["x_after_replay"] = x.tolist()
    y = torch.full((5,), float(rank + 1))
    dist.all_reduce(y)
    out["eager_after"] = y.tolist()
    return out


def test_what_cannot_be_captured_raises_at_capture_time():
    p = 2
    res = mp.run_world(p, refusals_world, transport="stream", timeout=120)
    for rank, r in enumerate(res):
        assert r["barrier"].startswith("DistBackendError") and "barrier #" in r["barrier"], r
        assert "cannot be captured" in r["barrier"] and "blocks the host" in r["barrier"], r
        assert "replay() before capture()" in r["replay_uncaptured"], r
        assert "cannot be replayed inside a capture" in r["replay_inside"], r
        assert "already under way" in r["nested"], r
        assert "cannot be captured" in r["sparse"] and "sparse" in r["sparse"], r
        assert r["other_thread"] == [3.0] * 3, r
        assert "captured on another process group" in r["foreign"], r
        assert "this graph was captured already" in r["again"], r
        assert "no capture of this thread is under way" in r["end_without"], r
        assert "monitored_barrier #1" in r["monitored"] and "cannot be captured" in \
            r["monitored"], r
        assert "replay of a captured graph" in r["destroyed"] or "shut down" in \
            r["destroyed"], r
        assert "allreduce #1" in r["destroyed"], r
        assert r["ops"] == [f"ringcoll::allreduce #2 (rank {rank} of {p})"], r
        assert r["x_at_capture"] == [1.0] * 4 and r["x_after_replay"] == [2.0] * 4, r
        assert r["eager_after"] == [3.0] * 5, r


def blocking_world(rank, p):
    from ringcoll.graphs import EmulatedGraph

    try:
        with EmulatedGraph().capture():
            dist.all_reduce(torch.ones(4))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return "captured"


def test_blocking_wait_cannot_be_captured():
    res = mp.run_world(2, blocking_world, transport="stream", timeout=120,
                       env={"RINGCOLL_BLOCKING_WAIT": "1"})
    for r in res:
        assert r.startswith("DistBackendError") and "allreduce #1" in r, res
        assert "RINGCOLL_BLOCKING_WAIT=1" in r, res


def host_transport_world(rank, p):
    from ringcoll.graphs import EmulatedGraph

    try:
        EmulatedGraph().capture().__enter__()
    except Exception as e:  # noqa: BLE001
        return str(e)
    return "captured"


def test_capture_on_a_host_transport_says_it_needs_the_emulation():
    res = mp.run_world(2, host_transport_world, transport="shm", timeout=120)
    for r in res:
        assert "RINGCOLL_TRANSPORT=stream" in r and "'shm'" in r, res


def unwatched_world(rank, p):
    """A captured collective is complete for the host, never times out while nobody
    replays it, and is recorded by the flight recorder once, not completed."""
    from ringcoll import flight_recorder
    from ringcoll.graphs import EmulatedGraph

    x = torch.full((6,), float(rank + 1))
    g = EmulatedGraph()
    with g.capture():
        w = dist.all_reduce(x, async_op=True)
        out = {"completed": w.is_completed(), "success": w.is_success(),
               "future_done": w.get_future().done()}
        w.wait()
    time.sleep(3.5)  # past the group's timeout (2 s): nothing is watching it
    g.replay()
    out["x"] = x.tolist()
    if flight_recorder.enabled():
        entries = flight_recorder.entries()["entries"]
        out["fr"] = [(e["collective_seq_id"], e["profiling_name"], e["state"]) for e in entries]
    return out


def test_a_captured_collective_is_not_watched():
    res = mp.run_world(2, unwatched_world, transport="stream", pg_timeout_s=2, timeout=120,
                       env={"TORCH_FR_BUFFER_SIZE": "16"})
    for r in res:
        assert r["completed"] and r["success"] and r["future_done"], r
        assert r["x"] == [3.0] * 6, r
        if "fr" in r:  # ringcoll's own recorder (torch before 2.15; it names the
            # op as torch's tools expect a CPU group's: "gloo:<op>")
            assert r["fr"] == [(1, "gloo:all_reduce", "started")], r


def dead_peer_world(rank, p):
    from ringcoll.graphs import EmulatedGraph

    x = torch.ones(1000)
    g = EmulatedGraph()
    with g.capture():
        dist.all_reduce(x)
    g.replay()
    dist.all_reduce(torch.ones(1))  # both finished the first replay
    if rank == 1:
        os._exit(0)
    t0 = time.monotonic()
    try:
        g.replay()
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}", "s": time.monotonic() - t0}
    return {"error": None}


def test_a_replay_whose_peer_died_raises_naming_the_launch_and_the_peer():
    res = mp.run_world(2, dead_peer_world, transport="stream", pg_timeout_s=3, timeout=120,
                       may_exit=(1,))
    r = res[0]
    assert r["error"] is not None, res
    assert r["error"].startswith("DistBackendError"), r
    assert "replay of a captured graph (launch 1 of 1)" in r["error"], r
    assert "allreduce #1" in r["error"] and "rank 1" in r["error"], r
    assert r["s"] < 30, r


def mismatch_world(rank, p):
    """The ranks capture different graphs of the same shapes (SUM on rank 0, MAX on
    rank 1): the replay fails the device's check, which reads the captured call."""
    from ringcoll.graphs import EmulatedGraph

    x = torch.ones(64)
    g = EmulatedGraph()
    with g.capture():
        dist.all_reduce(x, op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)
    try:
        g.replay()
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return "replayed"


def test_ranks_replaying_different_graphs_fail_the_fingerprint_check():
    res = mp.run_world(2, mismatch_world, transport="stream", pg_timeout_s=10, timeout=120)
    for r in res:
        assert r.startswith("DistBackendError") and "replay of a captured graph" in r, res
        assert "allreduce #1" in r, res
        assert "SUM" in r and "MAX" in r, res


def across_paths_world(rank, p):
    """A receive, then an all-reduce of what it received: two paths (point-to-point
    and the collectives'), which a replay must run in the recorded order."""
    from ringcoll.graphs import EmulatedGraph

    n = 50_000
    src = torch.zeros(n)
    x = torch.zeros(n)
    g = EmulatedGraph()
    with g.capture():
        if rank == 0:
            dist.send(src, 1)
        else:
            dist.recv(x, 0)
        dist.all_reduce(x)
    bad = []
    for k in range(20):
        src.fill_(float(k + 1))
        x.zero_()
        g.replay()
        if not torch.equal(x, torch.full((n,), float(k + 1))):
            bad.append(f"replay {k}: {x[:3].tolist()}, want {k + 1}")
    return bad


def test_a_replay_keeps_the_order_across_paths():
    mp.run_checks(2, across_paths_world, transport="stream", timeout=120)
