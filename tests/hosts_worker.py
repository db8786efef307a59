"""The rank program of tests/test_hosts.py's two hosts and benchmarks/hosts_netns.py,
run by torchrun in each host's namespaces (tests/netns.py):

    torchrun ... tests/hosts_worker.py MODE OUTDIR [ARGS]

MODE grid   every collective on the default group (default algorithms) and on one
            group per registered algorithm (ringcoll.Options(algo=...)), each result
            compared bit for bit with the exact value and with gloo's on a gloo
            group over the same ranks; then a group whose ranks interleave the hosts
            (group rank = local rank * hosts + host), whose links and traced ring
            all-reduce show the ring order.
MODE kill   all-reduces in a loop (group timeout: $GROUP_TIMEOUT_S); the test kills
            one host's ranks or cuts its link; the others must raise naming them.
            A rank that raised waits for the ranks in $SURVIVORS to raise too, then
            destroys the group and exits 1.
MODE bench  all_reduce timings per algorithm and size (ARGS: algos sizes iters).

Every rank writes OUTDIR/rank<r>.json: what it found, and its traceback if it raised.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import ringcoll
from ringcoll import _C

COUNTS = (1, 1001, 300_007)  # one element; uneven blocks; more than a 1 MiB segment


def _bits(t):
    return t.contiguous().view(torch.uint8)


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _show(t):
    flat = t.flatten()
    return f"{t.dtype} numel {flat.numel()} {flat[:6].tolist()}"


class Grid:
    """Runs the collectives on ringcoll group g and gloo group G, compares."""

    def __init__(self, rank, p, G):
        self.rank, self.p, self.G = rank, p, G
        self.failures = []
        self.ran = 0

    def check(self, what, got, ref, exact):
        self.ran += 1
        if not _same(got, exact):
            self.failures.append(f"{what}: ringcoll gave {_show(got)}, exact {_show(exact)}")
        if not _same(ref, exact):
            self.failures.append(f"{what}: gloo gave {_show(ref)}, exact {_show(exact)}")
        if not _same(got, ref):
            self.failures.append(f"{what}: ringcoll and gloo differ")

    def both(self, fn):
        """fn(group) on the ringcoll group and on gloo's: (ringcoll's, gloo's)."""
        return fn(self.g), fn(self.G)

    def run(self, label, g, provided):
        self.g = g
        r, p = self.rank, self.p
        for n in COUNTS:
            at = f"{label} n={n}"
            idx = torch.arange(n)
            if "allreduce" in provided:
                # SUM float32: small integers, exact in any order.
                inp = [(q + 1) * (idx % 13 + 1).float() for q in range(p)]
                exact = torch.stack(inp).sum(0)
                def ar(grp, op=dist.ReduceOp.SUM, x=None):
                    x = x.clone()
                    dist.all_reduce(x, op=op, group=grp)
                    return x
                self.check(f"{at} all_reduce SUM float32",
                           *self.both(lambda grp: ar(grp, x=inp[r])), exact)
                inp = [(idx * (q + 3) + 1000 * q).int() for q in range(p)]
                self.check(f"{at} all_reduce SUM int32",
                           *self.both(lambda grp: ar(grp, x=inp[r])), torch.stack(inp).sum(0).int())
                inp = [((idx * 7 + q * 3) % 11).long() for q in range(p)]
                self.check(f"{at} all_reduce MAX int64",
                           *self.both(lambda grp: ar(grp, dist.ReduceOp.MAX, inp[r])),
                           torch.stack(inp).max(0).values)
            if "reducescatter" in provided:
                inp = [(torch.arange(p * n) % 17 + q).float() for q in range(p)]
                exact = torch.stack(inp).sum(0)[r * n:(r + 1) * n]
                def rs(grp):
                    out = torch.empty(n)
                    dist.reduce_scatter_tensor(out, inp[r].clone(), group=grp)
                    return out
                self.check(f"{at} reduce_scatter SUM float32", *self.both(rs), exact)
            if "allgather" in provided:
                blocks = [(idx % 19 + 100 * q).float() for q in range(p)]
                def ag(grp):
                    out = torch.empty(p * n)
                    dist.all_gather_into_tensor(out, blocks[r].clone(), group=grp)
                    return out
                self.check(f"{at} all_gather float32", *self.both(ag), torch.cat(blocks))
            if "broadcast" in provided:
                for root in (0, p - 1):
                    def bc(grp, root=root):
                        x = (idx % 23 + 7 * r).float()
                        dist.broadcast(x, src=root, group=grp)
                        return x
                    self.check(f"{at} broadcast root {root}", *self.both(bc),
                               (idx % 23 + 7 * root).float())
            if "reduce" in provided:
                root = p // 2  # on the second host
                inp = [(idx % 5 + q + 1).float() for q in range(p)]
                def rd(grp):
                    x = inp[r].clone()
                    dist.reduce(x, dst=root, group=grp)
                    return x
                got, ref = self.both(rd)
                if r == root:
                    self.check(f"{at} reduce root {root}", got, ref, torch.stack(inp).sum(0))
            if "alltoall" in provided:
                # block from q to d: q * 1000 + d * 10 + (index % 7)
                even = [[(torch.arange(n) % 7 + q * 1000 + d * 10).float() for d in range(p)]
                        for q in range(p)]
                def a2a(grp):
                    out = torch.empty(p * n)
                    dist.all_to_all_single(out, torch.cat(even[r]), group=grp)
                    return out
                self.check(f"{at} all_to_all_single even", *self.both(a2a),
                           torch.cat([even[q][r] for q in range(p)]))
                # uneven: q sends (q + d) % 3 * n // 2 elements to d (some blocks empty)
                size = [[(q + d) % 3 * (n // 2) for d in range(p)] for q in range(p)]
                blk = [[torch.full((size[q][d],), float(q * 10 + d)) for d in range(p)]
                       for q in range(p)]
                def a2av(grp):
                    out = torch.empty(sum(size[q][r] for q in range(p)))
                    dist.all_to_all_single(out, torch.cat(blk[r]),
                                           output_split_sizes=[size[q][r] for q in range(p)],
                                           input_split_sizes=size[r], group=grp)
                    return out
                self.check(f"{at} all_to_all_single uneven", *self.both(a2av),
                           torch.cat([blk[q][r] for q in range(p)]))
            if "gather" in provided:
                root = 1
                def ga(grp):
                    x = (idx + 100 * r).float()
                    out = [torch.empty(n) for _ in range(p)] if r == root else None
                    dist.gather(x, out, dst=root, group=grp)
                    return torch.cat(out) if out else torch.empty(0)
                got, ref = self.both(ga)
                if r == root:
                    self.check(f"{at} gather root {root}", got, ref,
                               torch.cat([(idx + 100 * q).float() for q in range(p)]))
            if "scatter" in provided:
                root = p - 2
                def sc(grp):
                    x = torch.empty(n)
                    src = [(idx + 100 * q).float() for q in range(p)] if r == root else None
                    dist.scatter(x, src, src=root, group=grp)
                    return x
                self.check(f"{at} scatter root {root}", *self.both(sc), (idx + 100 * r).float())
        if "barrier" in provided:
            dist.barrier(group=g)
            dist.barrier(group=self.G)
            self.ran += 1


def links_of(group):
    return group._get_backend(torch.device("cpu")).links


def grid(rank, p, out, outdir):
    G = dist.new_group(backend="gloo", timeout=timedelta(seconds=60))
    everything = ["allreduce", "reducescatter", "allgather", "broadcast", "reduce", "barrier",
                  "alltoall", "gather", "scatter"]
    t = Grid(rank, p, G)
    out["links"] = links_of(dist.group.WORLD)
    t.run("default", dist.group.WORLD, everything)
    out["algorithms"] = {}
    for a in ringcoll.algorithms():
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo=a),
                           timeout=timedelta(seconds=60))
        provided = list(_C.provides(a))
        before = t.ran
        t.run(f"algo {a}", g, provided)
        out["algorithms"][a] = {"provides": provided, "checks": t.ran - before}
        dist.destroy_process_group(g)
    out["checks"], out["failures"] = t.ran, t.failures
    out["interleaved"] = interleaved(rank, p, outdir)


def interleaved(rank, p, outdir):
    """A group whose ranks alternate between the hosts: its links and the peers of
    its traced ring all-reduce (the ring order)."""
    local, hosts = int(os.environ["LOCAL_WORLD_SIZE"]), p // int(os.environ["LOCAL_WORLD_SIZE"])
    me = (rank % local) * hosts + rank // local
    opts = torch._C._distributed_c10d._DistributedBackendOptions()
    opts.store = dist.PrefixStore("interleaved", dist.distributed_c10d._get_default_store())
    opts.group_rank, opts.group_size = me, p
    opts.timeout, opts.group_id = timedelta(seconds=60), "interleaved"
    trace = os.path.join(outdir, "trace")
    backend = ringcoll._backend.create_backend(
        opts, ringcoll.Options(algo="ring", trace=trace, fingerprint=False))
    x = torch.full((4096,), float(me + 1))
    backend.allreduce([x]).wait()
    res = {"rank": me, "links": backend.links,
           "ok": bool(torch.equal(x, torch.full((4096,), float(p * (p + 1) // 2))))}
    backend.shutdown()
    del backend
    gc.collect()
    from ringcoll.trace import read_events
    evs = read_events(os.path.join(trace, f"ringcoll-ginterleaved-rank{me}.json"))
    res["sends_to"] = sorted({e["args"]["peer"] for e in evs if e.get("cat") == "send"})
    res["recvs_from"] = sorted({e["args"]["peer"] for e in evs if e.get("cat") == "recv"})
    return res


def kill(rank, p, out, outdir, timeout_s=10):
    """All-reduces until one fails; records when and how."""
    g = dist.group.WORLD  # its timeout: timeout_s
    x = torch.ones(1 << 20)
    i, last = 0, time.time()
    try:
        while True:
            dist.all_reduce(x, group=g)
            x.fill_(1.0)
            i, last = i + 1, time.time()
            if i == 3:
                with open(os.path.join(outdir, f"running{rank}"), "w") as f:
                    f.write(str(os.getpid()))
    except Exception as e:  # noqa: BLE001 - what the surviving ranks must see
        out["raised"] = f"{type(e).__name__}: {e}"
        out["raised_at"] = time.time()
        out["last_ok"] = last
        out["iterations"] = i
        # The survivors wait for each other before they destroy the group: rank 0
        # hosts the store (env:// init), and the report of the failure that another
        # survivor may still be waiting to read is in it.
        with open(os.path.join(outdir, f"raised{rank}"), "w") as f:
            f.write(out["raised"])
        survivors = [r for r in os.environ.get("SURVIVORS", "").split(",") if r]
        deadline = time.time() + timeout_s + 10
        while (not all(os.path.exists(os.path.join(outdir, f"raised{r}")) for r in survivors)
               and time.time() < deadline):
            time.sleep(0.02)
    t0 = time.monotonic()
    dist.destroy_process_group()
    out["destroy_seconds"] = time.monotonic() - t0


def bench(rank, p, out, algos, sizes, iters):
    out["times"] = {}
    for a in algos:
        g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo=a))
        for nb in sizes:
            x = torch.ones(nb // 4)
            for _ in range(2):
                dist.all_reduce(x, group=g)
            ts = []
            for _ in range(iters):
                dist.barrier(group=g)
                t0 = time.perf_counter()
                dist.all_reduce(x, group=g)
                ts.append(time.perf_counter() - t0)
            ok = bool(torch.equal(x, torch.full_like(x, float(p ** (iters + 2)))))
            # the slowest rank's time per call: max over ranks, then median over calls
            t = torch.tensor(ts, dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g)
            out["times"][f"{a} {nb}"] = {"median": float(t.median()), "min": float(t.min()),
                                         "max": float(t.max()), "ok": ok}
        dist.destroy_process_group(g)


def save(outdir, out):
    with open(os.path.join(outdir, f"rank{out['rank']}.json"), "w") as f:
        json.dump(out, f)


def main():
    mode, outdir = sys.argv[1], sys.argv[2]
    rank, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    out = {"rank": rank, "pid": os.getpid(), "hostname": socket.gethostname(),
           "host": _C.this_host(), "mode": mode}
    torch.set_num_threads(1)
    try:
        timeout = int(os.environ.get("GROUP_TIMEOUT_S", "60"))
        dist.init_process_group("ringcoll", timeout=timedelta(seconds=timeout))
        if mode == "grid":
            grid(rank, p, out, outdir)
        elif mode == "kill":
            kill(rank, p, out, outdir, timeout)
        elif mode == "bench":
            algos = sys.argv[3].split(",")
            sizes = [int(s) for s in sys.argv[4].split(",")]
            bench(rank, p, out, algos, sizes, int(sys.argv[5]))
        if mode != "kill":
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - everything goes to the test
        out["error"] = traceback.format_exc()
    save(outdir, out)
    # A rank that failed exits 1: torchrun then ends at once, where after a rank's
    # success it would wait (exit barrier, 300 s) for the other host's agent.
    return 1 if "error" in out or "raised" in out else 0


if __name__ == "__main__":
    sys.exit(main())
