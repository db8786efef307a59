"""Stress and soak: ringcoll under load for minutes, its resources watched.

    python benchmarks/stress.py                                # 4 ranks, 10-minute soak
    python benchmarks/stress.py --nproc 4 --soak-minutes 10 | tee benchmarks/results/stress-cpu.txt

Not part of CI (it runs for minutes by design). Three phases, every result checked
exactly (inputs are small integers), on CPU with the default transport:
  1. 1000 async all-reduces in flight at once on every rank, then waited for;
  2. 100 ringcoll groups created, used once and destroyed;
  3. a soak of mixed collectives (all_reduce of random sizes and ops, broadcast
     from rotating roots, all_gather_into_tensor, list all_gather,
     reduce_scatter_tensor, barrier, bursts of 16 async all-reduces) for
     --soak-minutes, sampling every --sample-s on every rank: resident memory,
     open file descriptors and ringcoll's entries in /dev/shm.
It prints the samples and fails (exit 1) if, after the first sample that follows
warm-up, resident memory grows by more than 10% + 16 MiB, or file descriptors
or /dev/shm entries grow at all, or any result is wrong.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from datetime import timedelta


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def shm_entries() -> int:
    """ringcoll's entries in /dev/shm (its segments are named /ringcoll-...); other
    programs' entries (multiprocessing's semaphores, say) come and go on their own."""
    try:
        return sum(1 for e in os.listdir("/dev/shm") if "ringcoll" in e)
    except FileNotFoundError:
        return 0


def expect(cond, what, errors):
    if not cond:
        errors.append(what)


def phase_async(p, rank, errors):
    import torch
    import torch.distributed as dist

    t0 = time.monotonic()
    xs = [torch.full((1 + (i * 37) % 1024,), float(rank + 1)) for i in range(1000)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    for w in works:
        w.wait()
    want = p * (p + 1) / 2
    bad = sum(int((x != want).sum()) for x in xs)
    expect(bad == 0, f"async: {bad} wrong elements", errors)
    return time.monotonic() - t0


def phase_groups(p, rank, errors):
    import torch
    import torch.distributed as dist

    t0 = time.monotonic()
    for i in range(100):
        g = dist.new_group(backend="ringcoll")
        x = torch.full((17,), float(rank + i))
        dist.all_reduce(x, group=g)
        want = sum(r + i for r in range(p))
        expect(bool((x == want).all()), f"groups: group {i} wrong", errors)
        dist.destroy_process_group(g)
    return time.monotonic() - t0


def soak_iteration(p, rank, it, errors, counts):
    import torch
    import torch.distributed as dist

    rng = random.Random(it)  # the same on every rank: they agree on every call
    kind = rng.choice(["all_reduce", "all_reduce", "broadcast", "all_gather_into_tensor",
                       "all_gather", "reduce_scatter_tensor", "barrier", "async_burst"])
    n = rng.choice([0, 1, p - 1, p + 1, 1000, 65536, 1 << 20])
    if kind == "all_reduce":
        op = rng.choice(["SUM", "MAX", "MIN", "PRODUCT"])
        x = torch.full((n,), float(rank + 1))
        dist.all_reduce(x, op=getattr(dist.ReduceOp, op))
        vals = [float(r + 1) for r in range(p)]
        want = {"SUM": sum(vals), "MAX": max(vals), "MIN": min(vals),
                "PRODUCT": float(torch.tensor(vals).prod())}[op]
        expect(bool((x == want).all()), f"soak {it}: all_reduce {op} n={n} wrong", errors)
    elif kind == "broadcast":
        root = it % p
        x = torch.full((n,), float(rank + 1))
        dist.broadcast(x, src=root)
        expect(bool((x == root + 1).all()), f"soak {it}: broadcast root {root} wrong", errors)
    elif kind == "all_gather_into_tensor":
        m = n // p + 1
        out = torch.empty(p * m)
        dist.all_gather_into_tensor(out, torch.full((m,), float(rank)))
        want = torch.arange(p, dtype=torch.float32).repeat_interleave(m)
        expect(torch.equal(out, want), f"soak {it}: all_gather_into_tensor wrong", errors)
    elif kind == "all_gather":
        m = min(n, 4096) // p + 1
        outs = [torch.empty(m) for _ in range(p)]
        dist.all_gather(outs, torch.full((m,), float(rank)))
        expect(all(bool((o == r).all()) for r, o in enumerate(outs)),
               f"soak {it}: all_gather wrong", errors)
    elif kind == "reduce_scatter_tensor":
        m = n // p + 1
        out = torch.empty(m)
        inp = torch.arange(p, dtype=torch.float32).repeat_interleave(m) + rank
        dist.reduce_scatter_tensor(out, inp)
        want = p * rank + sum(range(p))
        expect(bool((out == want).all()), f"soak {it}: reduce_scatter_tensor wrong", errors)
    elif kind == "barrier":
        dist.barrier()
    else:
        xs = [torch.full((1 + i * 13,), float(rank + 1)) for i in range(16)]
        for w in [dist.all_reduce(x, async_op=True) for x in xs]:
            w.wait()
        expect(all(bool((x == p * (p + 1) / 2).all()) for x in xs),
               f"soak {it}: async burst wrong", errors)
    counts[kind] = counts.get(kind, 0) + 1


def worker(rank, p, store_path, args, results):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import warnings

    # torch 2.13 deprecates the *_tensor names in favour of *_single: not our concern here.
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import torch.distributed as dist

    import ringcoll  # noqa: F401

    torch.set_num_threads(1)
    try:
        dist.init_process_group("ringcoll", init_method=f"file://{store_path}", rank=rank,
                                world_size=p, timeout=timedelta(seconds=120))
        gloo = dist.new_group(backend="gloo")
        errors = []
        before = (rss_mib(), fds(), shm_entries())
        t_async = phase_async(p, rank, errors)
        t_groups = phase_groups(p, rank, errors)
        after_groups = (rss_mib(), fds(), shm_entries())
        samples = []  # (elapsed s, iterations, rss MiB, fds, shm entries)
        counts = {}
        t0 = time.monotonic()
        next_sample = t0
        it = 0
        end = t0 + args.soak_minutes * 60
        while True:
            now = time.monotonic()
            # Every rank must agree when to stop: rank 0's clock decides, through a
            # gloo broadcast every 200 iterations (cheap next to the soak).
            if it % 200 == 0:
                flag = torch.tensor([1 if now >= end else 0])
                dist.broadcast(flag, src=0, group=gloo)
                if now >= next_sample or flag.item():
                    samples.append((now - t0, it, rss_mib(), fds(), shm_entries()))
                    next_sample = now + args.sample_s
                if flag.item():
                    break
            soak_iteration(p, rank, it, errors, counts)
            it += 1
        results.put((rank, {"before": before, "after_groups": after_groups,
                            "t_async": t_async, "t_groups": t_groups, "samples": samples,
                            "counts": counts, "errors": errors[:20], "n_errors": len(errors)}))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback

        results.put((rank, {"fatal": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--soak-minutes", type=float, default=10.0)
    ap.add_argument("--sample-s", type=float, default=60.0)
    args = ap.parse_args(argv)

    import torch

    import ringcoll

    print(f"# ringcoll stress: {' '.join(['python', 'benchmarks/stress.py'] + (argv or sys.argv[1:]))}")
    print(f"# machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, torch {torch.__version__}, "
          f"ringcoll {ringcoll.build_info()}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}, {args.nproc} ranks, "
          f"RINGCOLL_TRANSPORT={os.environ.get('RINGCOLL_TRANSPORT', 'auto')}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ringcoll-stress-") as tmp:
        procs = [ctx.Process(target=worker, args=(r, args.nproc, os.path.join(tmp, "store"),
                                                  args, results))
                 for r in range(args.nproc)]
        for pr in procs:
            pr.start()
        out = {}
        deadline = time.monotonic() + args.soak_minutes * 60 + 600
        while len(out) < args.nproc and time.monotonic() < deadline:
            try:
                rank, res = results.get(timeout=5)
                out[rank] = res
            except Exception:  # noqa: BLE001 - queue.Empty: check for dead ranks
                if any(pr.exitcode not in (None, 0) for pr in procs):
                    break
        for pr in procs:
            pr.join(timeout=30)
            if pr.is_alive():
                pr.kill()
    failed = False
    for r in range(args.nproc):
        if r not in out or "fatal" in out[r]:
            print(f"rank {r}: FAILED {out.get(r, {}).get('fatal', 'no report (died or hung)')}")
            failed = True
    if failed:
        return 1
    r0 = out[0]
    print(f"\n1000 async all-reduces in flight: {r0['t_async']:.2f} s on rank 0")
    print(f"100 groups created, used, destroyed: {r0['t_groups']:.2f} s on rank 0")
    print("\nrank  phase              rss MiB   fds  /dev/shm")
    for r in range(args.nproc):
        b, a = out[r]["before"], out[r]["after_groups"]
        print(f"{r:>4}  start             {b[0]:8.1f} {b[1]:5d} {b[2]:9d}")
        print(f"{r:>4}  after 100 groups  {a[0]:8.1f} {a[1]:5d} {a[2]:9d}")
    print("\nsoak samples (every rank): elapsed s, collectives done, rss MiB, fds, /dev/shm")
    print("rank  elapsed  iterations   rss MiB   fds  /dev/shm")
    for r in range(args.nproc):
        for el, it, rss, fd, shm in out[r]["samples"]:
            print(f"{r:>4} {el:8.0f} {it:11d} {rss:9.1f} {fd:5d} {shm:9d}")
    counts = out[0]["counts"]
    total = sum(counts.values())
    print(f"\ncollective calls in the soak (rank 0): {total} "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    # Flat: compare the last sample with the first one after warm-up.
    verdicts = []
    for r in range(args.nproc):
        s = out[r]["samples"]
        if out[r]["n_errors"]:
            verdicts.append(f"rank {r}: {out[r]['n_errors']} wrong results: {out[r]['errors']}")
        if len(s) < 3:
            verdicts.append(f"rank {r}: only {len(s)} samples; soak longer than --sample-s x 2")
            continue
        warm, last = s[1], s[-1]
        if last[2] > warm[2] * 1.10 + 16:
            verdicts.append(f"rank {r}: resident memory grew {warm[2]:.1f} -> {last[2]:.1f} MiB")
        if last[3] > warm[3]:
            verdicts.append(f"rank {r}: open fds grew {warm[3]} -> {last[3]}")
        if last[4] > warm[4]:
            verdicts.append(f"rank {r}: /dev/shm entries grew {warm[4]} -> {last[4]}")
    if verdicts:
        print("\nNOT FLAT / WRONG:\n  " + "\n  ".join(verdicts))
        return 1
    print("\nflat: resident memory, fds and /dev/shm entries did not grow after warm-up "
          "on any rank; every result was exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
