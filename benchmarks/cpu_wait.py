"""Where a CPU all-reduce's time goes when it waits: ringcoll's waiting policies side
by side, on a quiet machine, beside busy processes, and with more ranks than cores.

    python benchmarks/cpu_wait.py                                  # p = 2, quiet
    python benchmarks/cpu_wait.py --background-load 2              # a busy process per core
    python benchmarks/cpu_wait.py --nproc 4 --pin cores            # two ranks a core
    python benchmarks/cpu_wait.py --policies old=always:100,new=peers:100,mpi=never:100000

Every rank makes one ringcoll group per policy (pg_options: RINGCOLL_YIELD and
RINGCOLL_SPIN_US, csrc/transport/doorbell.h), so the policies run in the same
processes, one after the other in each repetition (the order rotates), and the
machine's noise falls on each alike. A turn: warm-up calls, then N calls of
ringcoll.ops.all_reduce_ (--call dist: dist.all_reduce; SUM, in place, float32),
each timed alone; N is the same
on every rank (rank 0's estimate from --budget). Per turn and rank it records the
calls' median, 90th and 99th percentile and maximum, and, per call, what its waits
did (the doorbell's counters, _C.wait_stats: waits, ended while spinning, yields to a
peer, futex sleeps, time spinning and asleep) and the process's context switches
(getrusage: voluntary = it slept or yielded, involuntary = it was preempted). A
cell of the table is the slowest rank's figure, median over repetitions (min-max).

--background-load N starts N busy Python loops (each in a session of its own,
unpinned) before the ranks and stops them at the end; --pin cores puts rank r on CPU
r mod cpus, none (the default) leaves ranks where the scheduler puts them, as torch
does. Output: the table on stdout and PREFIX.txt, every turn in PREFIX.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import threading
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.dirname(HERE))
from ranks import report, run_ranks  # noqa: E402
from vs_cpu_libs import BackgroundLoad, human, parse_size, us  # noqa: E402

DEFAULT_POLICIES = "always=always:100,peers=peers:100,never=never:100"


def parse_policies(text):
    """'name=yield:spin_us,...' -> [(name, yield, spin_us)]."""
    out = []
    for item in text.split(","):
        name, _, rest = item.partition("=")
        y, _, spin = rest.partition(":")
        out.append((name, y, int(spin)))
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def migrations() -> int:
    """The kernel's count of this thread's moves between CPUs (/proc: se.nr_migrations)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/sched") as f:
            for line in f:
                if line.startswith("se.nr_migrations"):
                    return int(line.split(":")[1])
    except OSError:
        pass
    return 0


def rank_main(args) -> int:
    import torch
    import torch.distributed as dist
    import ringcoll
    from ringcoll import _C, ops

    torch.set_num_threads(1)
    rank, p = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    groups = {}
    for name, y, spin in parse_policies(args.policies):
        groups[name] = dist.new_group(
            backend="ringcoll", pg_options=ringcoll.Options(yield_policy=y, spin_us=spin))
    ncpu = os.cpu_count() or 1
    if args.pin == "cores":
        os.sched_setaffinity(0, {rank % ncpu})
    names = list(groups)
    turns = []
    clock = time.perf_counter
    for rep in range(1, args.repeat + 1):
        for si, size in enumerate(args.sizes):
            k = (rep + si) % len(names)
            for name in names[k:] + names[:k]:
                g = groups[name]
                x = torch.zeros(size // 4)
                call = ((lambda x, g: ops.all_reduce_(x, group=g)) if args.call == "op"
                        else (lambda x, g: dist.all_reduce(x, group=g)))
                warm = []
                for _ in range(args.warmup):
                    t0 = clock()
                    call(x, g)
                    warm.append(clock() - t0)
                est = torch.tensor([statistics.median(warm)], dtype=torch.float64)
                dist.broadcast(est, 0)  # every rank makes the same number of calls
                n = int(min(args.max_calls, max(args.min_calls, args.budget / max(est.item(), 1e-7))))
                ts = [0.0] * n
                _C.wait_stats(True)
                ru0 = resource.getrusage(resource.RUSAGE_SELF)
                mig0 = migrations()
                for i in range(n):
                    t0 = clock()
                    call(x, g)
                    ts[i] = clock() - t0
                ru1 = resource.getrusage(resource.RUSAGE_SELF)
                mig1 = migrations()
                ws = _C.wait_stats(False)
                x.fill_(rank + 1)
                ops.all_reduce_(x, group=g)
                wrong = int((x != p * (p + 1) // 2).sum())
                turns.append({
                    "rep": rep, "size": size, "policy": name, "rank": rank, "calls": n,
                    "median_us": statistics.median(ts) * 1e6, "p90_us": pct(ts, 0.9) * 1e6,
                    "p99_us": pct(ts, 0.99) * 1e6, "max_us": max(ts) * 1e6, "wrong": wrong,
                    "per_call": {
                        "waits": ws["waits"] / n, "spun": ws["spun"] / n,
                        "yields": ws["yields"] / n, "parks": ws["parks"] / n,
                        "spin_us": ws["spin_ns"] / n / 1e3, "park_us": ws["park_ns"] / n / 1e3,
                        "moves": ws["moves"], "migrations": mig1 - mig0,
                        "vcsw": (ru1.ru_nvcsw - ru0.ru_nvcsw) / n,
                        "ivcsw": (ru1.ru_nivcsw - ru0.ru_nivcsw) / n,
                    }})
    return report(turns, args.result)


def summarize(turns, policies, sizes):
    """{(size, policy): {figure: (median, lo, hi) over repetitions of the slowest rank's}}."""
    out = {}
    for size in sizes:
        for name in policies:
            mine = [t for t in turns if t["size"] == size and t["policy"] == name]
            reps = sorted({t["rep"] for t in mine})
            figs = {}
            for key in ("median_us", "p90_us", "p99_us", "max_us"):
                vals = [max(t[key] for t in mine if t["rep"] == r) for r in reps]
                figs[key] = (statistics.median(vals), min(vals), max(vals))
            for key in ("waits", "spun", "yields", "parks", "spin_us", "park_us", "vcsw", "ivcsw",
                        "moves", "migrations"):
                vals = [statistics.mean(t["per_call"][key] for t in mine if t["rep"] == r)
                        for r in reps]
                figs[key] = (statistics.median(vals), min(vals), max(vals))
            figs["wrong"] = sum(t["wrong"] for t in mine)
            out[(size, name)] = figs
    return out


def table(summary, policies, sizes) -> str:
    cell = lambda f: f"{us(f[0])} ({us(f[1])}-{us(f[2])})" if f[1] != f[2] else us(f[0])
    lines = ["# us per call, the slowest rank's figure, median over repetitions (min-max)",
             f"{'size':>8} {'policy':>8} {'median':>20} {'p90':>20} {'p99':>20} {'max':>20}"]
    for size in sizes:
        for name in policies:
            s = summary[(size, name)]
            lines.append(f"{human(size):>8} {name:>8} " + " ".join(
                f"{cell(s[k]):>20}" for k in ("median_us", "p90_us", "p99_us", "max_us"))
                + ("" if not s["wrong"] else f"  WRONG {s['wrong']}"))
    lines += ["", "# per call, mean over ranks, median over repetitions: waits (doorbell waits), "
              "spun (ended spinning), yields, parks (futex sleeps), us spinning, us asleep, "
              "voluntary and involuntary context switches; moves: a rank's moves away from a "
              "peer that shared its CPU, and migrations: the kernel's moves of the rank "
              "between CPUs (its own included), both in the whole turn (not per call)",
              f"{'size':>8} {'policy':>8} " + " ".join(f"{k:>10}" for k in (
                  "waits", "spun", "yields", "parks", "spin_us", "park_us", "vcsw", "ivcsw",
                  "moves", "migrations"))]
    for size in sizes:
        for name in policies:
            s = summary[(size, name)]
            lines.append(f"{human(size):>8} {name:>8} " + " ".join(
                f"{s[k][0]:10.2f}" for k in ("waits", "spun", "yields", "parks", "spin_us",
                                            "park_us", "vcsw", "ivcsw", "moves",
                                            "migrations")))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--sizes", default="8,64K,1M")
    ap.add_argument("--policies", default=DEFAULT_POLICIES,
                    help=f"name=yield:spin_us,... (default {DEFAULT_POLICIES})")
    ap.add_argument("--call", choices=("op", "dist"), default="op",
                    help="op: ringcoll.ops.all_reduce_ (default); dist: dist.all_reduce")
    ap.add_argument("--background-load", type=int, default=0, metavar="N")
    ap.add_argument("--pin", choices=("none", "cores"), default="none")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.1, help="seconds of calls per turn")
    ap.add_argument("--min-calls", type=int, default=20)
    ap.add_argument("--max-calls", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default="bench-out/cpu-wait")
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank:
        return rank_main(args)
    argv = sys.argv[1:] if argv is None else argv
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    result = os.path.abspath(args.out) + ".turns.json"
    load = BackgroundLoad(args.background_load)
    t0 = time.monotonic()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(),
            "cpus": os.cpu_count(), "platform": platform.platform(),
            "command": "python benchmarks/cpu_wait.py " + " ".join(argv),
            "load_start": os.getloadavg()[0]}
    meta["background_load"] = load.start()
    try:
        per_rank = run_ranks(HERE, args.nproc, argv, result, new_session=True)
    finally:
        meta["background_load"].update(load.stop())
    if per_rank is None:
        return 1
    turns = [t for ts in per_rank for t in ts]
    meta.update(seconds=round(time.monotonic() - t0), load_end=os.getloadavg()[0])
    policies = [n for n, _, _ in parse_policies(args.policies)]
    summary = summarize(turns, policies, args.sizes)
    bl = meta["background_load"]
    head = (f"# {meta['date']}, {meta['host']}: {meta['cpus']} cpus; {meta['platform']}\n"
            f"# command: {meta['command']} ({meta['seconds']} s)\n"
            f"# p = {args.nproc}, pin {args.pin}; background load: "
            + (f"{bl['n']} busy processes, {bl['cpu_share']} of a core each" if bl["n"]
               else "none")
            + f"; load average {meta['load_start']:.2f} -> {meta['load_end']:.2f}\n"
            f"# policies (RINGCOLL_YIELD:RINGCOLL_SPIN_US): {args.policies}; the call: "
            + ("ringcoll.ops.all_reduce_(x, group=g)" if args.call == "op"
               else "dist.all_reduce(x, group=g)") + "\n")
    text = head + "\n" + table(summary, policies, args.sizes) + "\n"
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "turns": turns}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
