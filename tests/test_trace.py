"""RINGCOLL_TRACE: per-rank trace files of a real 3-rank run, parsed back and checked
against the executor's plan, and `python -m ringcoll.trace` on them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

import ringcoll
from ringcoll import _C
from ringcoll import trace as rtrace
from tests.mp import run_world

P = 3
CHUNK = 4096  # bytes: several segments per transfer
N = 10_000    # float32 elements of the all-reduce: 40 KB
LATE_RANK = 1
LATE_S = 0.3

# What the run does, in sequence-number order: (the call by torch's name, the collective as
# plan_ops names it, elements of the executor's buffer, their size, AVG, root).
# Broadcast moves bytes.
CALLS = [
    ("all_reduce", "allreduce", N, 4, False, 0),
    ("all_reduce", "allreduce", N, 4, True, 0),  # AVG: finishing passes
    ("reduce_scatter_tensor", "reduce_scatter", P * 1000, 4, False, 0),
    ("all_gather_into_tensor", "allgather", P * 1000, 4, False, 0),
    ("broadcast", "broadcast", 4 * 3000, 1, False, 2),
    ("all_reduce", "allreduce", N, 4, False, 0),  # LATE_RANK starts it LATE_S late
]
LATE_SEQ = len(CALLS)


def _traced_run(rank, world_size, untraced_dir):
    import torch.distributed as dist

    # A group with tracing explicitly off (Options win over the environment): it
    # must write nothing, although RINGCOLL_TRACE is set.
    quiet = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(trace=""))
    dist.all_reduce(torch.ones(100), group=quiet)
    t = torch.arange(N, dtype=torch.float32) + rank
    dist.all_reduce(t)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out = torch.empty(1000)
    dist.reduce_scatter_tensor(out, torch.ones(P * 1000))
    gathered = torch.empty(P * 1000)
    dist.all_gather_into_tensor(gathered, torch.ones(1000))
    dist.broadcast(torch.ones(3000), src=2)
    if rank == LATE_RANK:
        time.sleep(LATE_S)
    dist.all_reduce(torch.ones(N))


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("trace") / "nested" / "dir")  # created by the backend
    start = time.monotonic()
    run_world(P, _traced_run, d, transport="shm",
              env={"RINGCOLL_TRACE": d, "RINGCOLL_CHUNK_BYTES": str(CHUNK)})
    assert time.monotonic() - start < 60
    return d


def test_files_one_per_rank_of_the_traced_group_only(traced):
    groups = rtrace.files(traced)
    # The default group is traced; the group created with Options(trace="") is not.
    assert len(groups) == 1, groups
    (files,) = groups.values()
    assert sorted(files) == list(range(P))


def test_sends_pair_with_receives_and_times_are_ordered(traced):
    tr = rtrace.load(traced)
    assert rtrace.check(tr) == []
    matched, lone_sends, lone_recvs = rtrace.pairs(tr)
    assert not lone_sends and not lone_recvs
    assert matched
    for s, r in matched:
        assert (s.peer, r.peer) == (r.rank, s.rank)
        assert s.bytes == r.bytes and s.count == r.count
        assert s.step == r.step or s.step < 0  # the ring pairs a step with the same step
        assert s.post <= s.done and r.post <= r.arrive <= r.done
    # Per channel and direction, in pairing order: posts and arrivals in order.
    chans = {}
    for s, r in matched:
        if s.step >= 0:
            chans.setdefault((s.seq, s.rank, r.rank), []).append((s.index, s, r))
    for key, items in chans.items():
        items.sort(key=lambda x: x[0])
        assert [i for i, _, _ in items] == list(range(len(items))), key
        posts = [s.post for _, s, _ in items]
        arrivals = [r.arrive for _, _, r in items]
        assert posts == sorted(posts) and arrivals == sorted(arrivals), key


def test_every_planned_operation_appears(traced):
    tr = rtrace.load(traced)
    assert sorted(tr.collectives) == list(range(1, len(CALLS) + 1))
    for seq, (op, coll, n, elem, avg, root) in enumerate(CALLS, start=1):
        c = tr.collectives[seq]
        assert sorted(c.per_rank) == list(range(P))
        assert c.op == op and c.bytes == elem * n, (seq, c)
        for rank in range(P):
            assert c.per_rank[rank]["completed"]
            plan = _C.plan_ops("ring", coll, P, rank, n, CHUNK // elem, avg, root)
            got = [(o.kind, o.peer, o.step, o.begin, o.count)
                   for o in tr.ops if o.seq == seq and o.rank == rank and o.step >= 0]
            want = [(k, peer, step, b, cnt) for k, peer, step, b, cnt, *_ in plan]
            assert got == want, (seq, coll, rank)
            steps = {o.step for o in tr.ops if o.seq == seq and o.rank == rank}
            assert {s for _, _, s, _, _ in want} <= steps
            # The fingerprint headers: one send to and one receive from each peer.
            heads = [(o.kind, o.peer) for o in tr.ops
                     if o.seq == seq and o.rank == rank and o.step < 0]
            assert sorted(heads) == sorted([("send", q) for q in range(P) if q != rank]
                                           + [("recv_copy", q) for q in range(P) if q != rank])


def test_clock_offsets_are_zero_on_one_host(traced):
    tr = rtrace.load(traced)
    assert tr.meta[0]["clock_offset_us"] == 0
    for r in range(1, P):
        m = tr.meta[r]
        assert m["clock_known"] and m["clock_rounds"] == 8
        # One clock on one host: the estimate is within half its round trip of 0.
        assert abs(m["clock_offset_us"]) <= m["clock_rtt_us"] / 2 + 1, m
        assert m["clock_rtt_us"] < 50_000, m


def test_the_late_rank_is_the_straggler(traced):
    tr = rtrace.load(traced)
    cp = rtrace.critical_path(tr, LATE_SEQ)
    assert cp["straggler"] == LATE_RANK, cp
    assert cp["late_start_us"] > 0.5 * LATE_S * 1e6
    # The others waited for it (for its header, which opens the collective).
    waits = [o.wait for o in tr.ops_of(LATE_SEQ) if o.rank != LATE_RANK and o.peer == LATE_RANK]
    assert max(waits) > 0.5 * LATE_S * 1e6


def test_cli_merges_explains_and_draws(traced, tmp_path):
    out, png = tmp_path / "merged.json", tmp_path / "timeline.png"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "ringcoll.trace", traced, "--out", str(out),
                          "--png", str(png), "--collective", str(LATE_SEQ)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert f"straggler: rank {LATE_RANK}" in res.stdout, res.stdout
    assert "inconsistent" not in res.stdout, res.stdout
    import json

    merged = json.loads(out.read_text())
    evs = merged["traceEvents"]
    assert {e["pid"] for e in evs if e.get("cat") == "collective"} == set(range(P))
    assert any(e["ph"] == "s" for e in evs) and any(e["ph"] == "f" for e in evs)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_timeline_names_the_critical_path_only_where_it_draws_one(traced, tmp_path):
    from ringcoll.trace import plot

    tr = rtrace.load(traced)
    # The last collective as if no rank had waited for a peer's bytes (each arrived
    # when it was wanted): its critical path has no transfer to draw.
    quiet = max(tr.collectives)
    for o in tr.ops_of(quiet):
        o.want = o.arrive
    drawn = set()
    for seq in sorted(tr.collectives):
        labels = plot.draw(tr, seq, tmp_path / f"{seq}.png")
        has = bool(rtrace.critical_path(tr, seq)["chain"])
        assert ("critical path (waited-for transfers)" in labels) == has, (seq, labels)
        drawn.add(has)
    assert drawn == {True, False}, drawn


def _gloo_run(rank, world_size):
    import torch.distributed as dist

    dist.all_reduce(torch.ones(N))
    return True


def test_gloo_transport_trace_pairs(tmp_path):
    d = str(tmp_path / "t")
    run_world(P, _gloo_run, transport="gloo",
              env={"RINGCOLL_TRACE": d, "RINGCOLL_CHUNK_BYTES": str(CHUNK)})
    tr = rtrace.load(d)
    assert tr.meta[1]["transport"] == "gloo"
    assert rtrace.check(tr) == []
    matched, lone_sends, lone_recvs = rtrace.pairs(tr)
    assert matched and not lone_sends and not lone_recvs
    assert not any(o.forwarded for o in tr.ops)  # gloo sends from memory, no slots
    # A file closed by destroy_process_group ends with the array's bracket.
    (files,) = rtrace.files(d).values()
    for path in files.values():
        assert open(path).read().rstrip().endswith("]")


def test_unclosed_file_is_read(tmp_path):
    p = tmp_path / "ringcoll-g0-rank0.json"
    p.write_text('[\n{"ph":"M","pid":0,"tid":0,"name":"ringcoll_trace","args":{"rank":0,'
                 '"size":1,"clock_known":true,"clock_offset_us":0}}')
    assert rtrace.load(str(tmp_path)).size == 1


def test_trace_knob_is_validated(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(RuntimeError, match="RINGCOLL_TRACE=.*not a directory"):
        _C.knobs({"RINGCOLL_TRACE": str(f)})
    assert "RINGCOLL_TRACE=" + str(tmp_path) in _C.knobs(
        ringcoll.Options(trace=str(tmp_path)).overrides())
    assert _C.knobs({}).endswith("RINGCOLL_TRACE=")  # off by default


def _bandwidth_bound_trace():
    """Two ranks, one all-reduce, made up: every receive arrived before its rank wanted
    it (no rank waited for a peer), and rank 1 finished last, having spent its time
    reducing (from when it wanted the bytes, which were there: 10-400 and 600-900 us)
    while its sends were in flight (100-300 us, two at once, and 600-700 us)."""
    def op(rank, kind, peer, step, index, want, post, arrive, done):
        return rtrace.Op(rank, 1, kind, peer, step, 0, index, 0, 1, 4, False, want, post,
                         arrive, done)

    ops = [op(1, "recv_reduce", 0, 0, 0, 10.0, 0.0, 0.0, 400.0),
           op(1, "recv_reduce", 0, 1, 1, 600.0, 450.0, 500.0, 900.0),
           op(1, "send", 0, 0, 0, None, 100.0, None, 300.0),
           op(1, "send", 0, 0, 1, None, 150.0, None, 250.0),
           op(1, "send", 0, 1, 2, None, 600.0, None, 700.0),
           op(1, "recv_copy", 0, -1, 0, 5.0, 0.0, 1.0, 2.0)]  # the header: not work
    coll = rtrace.Collective(1, "all_reduce", "ring", 4, 2,
                             {0: {"start": 0.0, "end": 500.0}, 1: {"start": 0.0, "end": 1000.0}})
    return rtrace.Trace("0", 2, {0: {}, 1: {}}, {}, {1: coll}, ops)


def test_a_critical_path_with_no_wait_says_where_the_time_went():
    """A bandwidth-bound call: the path has no edge, and the report says what the last
    rank spent its time on (it said only "rank 1 waited for nothing")."""
    tr = _bandwidth_bound_trace()
    cp = rtrace.critical_path(tr, 1)
    assert cp["chain"] == [] and cp["straggler"] == 1, cp
    assert cp["busy_us"] == {"reduce": 690.0, "send": 300.0}, cp["busy_us"]
    text = "\n".join(rtrace.describe_path(tr, 1, cp))
    assert ("<- rank 1 waited for nothing before that: from its start to 1.000 ms it was at "
            "its own work (reduce 0.690 ms, send 0.300 ms; kinds overlap), so the call is "
            "bound by moving and reducing bytes, not by a late peer") in text, text
