"""What RINGCOLL_TRACE costs, off and on, measured with the benchmark.

    python benchmarks/trace_cost.py --base DIR [--pairs 3] [--nproc 2]
                                    [--out benchmarks/results/trace-cost]

Off: the tracer is free when off only if a build with the trace hooks (null
pointers, this tree) times like a build without them. DIR is a checkout of the
commit before the tracer, built in place (`python setup.py build_ext --inplace`).
The script runs `python -m ringcoll.bench` on all-reduce alternately with DIR's
build (backends `ringcoll` and `ringcoll+fingerprint=1`, the same knobs as
ringcoll, so that both runs have two groups alternating) and with this tree's
(backends `ringcoll` and `ringcoll+trace=<tmp>`, side by side in the same
processes), --pairs times, and reports per size

  off/base  this tree's ringcoll time over the base build's, per pair: the median
            and the min-max over pairs (one process pair per run, so this carries
            the machine's run-to-run noise);
  on/off    ringcoll+trace over ringcoll in the same run (same processes, runs
            alternating), median and min-max over pairs: the cost when on;
  base A/A  ringcoll+fingerprint=1 over ringcoll in the base runs: two identical
            groups, the noise floor of a same-run ratio;
  best      the fastest pair's off time over the fastest pair's base time: the
            machine's run-to-run states are bimodal here (a run's small calls take
            7-9 us or 14-21 us throughout), so the minimum over pairs compares
            like with like where the median may not.

It writes OUT.txt (the table, the command, the machine) and OUT.json (every
benchmark row of every run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(pythonpath, backends, json_path, args):
    cmd = [sys.executable, "-m", "ringcoll.bench", "-b", args.minbytes, "-e", args.maxbytes,
           "-f", "4", "--nproc", str(args.nproc), "--collectives", "all_reduce",
           "--backends", backends, "--budget", str(args.budget), "--json", json_path,
           "--csv", json_path + ".csv", "--plot", ""]
    env = {**os.environ, "PYTHONPATH": pythonpath}
    env.pop("RINGCOLL_TRACE", None)
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, cwd=pythonpath)
    with open(json_path) as f:
        rows = json.load(f)["results"]
    return {(r["backend"], r["size"]): r["ip"]["time_us"] for r in rows}, rows, " ".join(cmd)


def spread(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="built checkout without the tracer")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("-b", "--minbytes", default="8")
    ap.add_argument("-e", "--maxbytes", default="16M")
    ap.add_argument("--out", default=os.path.join(HERE, "benchmarks/results/trace-cost"))
    ap.add_argument("--reuse", action="store_true",
                    help="recompute the table from OUT.json instead of running")
    args = ap.parse_args()
    tdir = tempfile.mkdtemp(prefix="ringcoll-trace-cost-")
    runs, raw, cmds = [], [], {}
    start = time.time()
    if args.reuse:
        with open(args.out + ".json") as f:
            saved = json.load(f)
        cmds, raw = saved["bench_commands"], saved["runs"]
        times = lambda rows: {(r["backend"], r["size"]): r["ip"]["time_us"]  # noqa: E731
                              for r in rows}
        runs = [(times(r["base"]), times(r["this"])) for r in raw]
        args.pairs = len(runs)
        start -= saved.get("seconds", 0)
    for i in range(0 if args.reuse else args.pairs):
        # Two groups in both runs, alternating run by run, so that the process
        # layout is the same: a base run with one group only timed ringcoll 1.5x
        # slower here than a run with two, which has nothing to do with tracing.
        base, rows_a, cmds["base"] = bench(os.path.abspath(args.base),
                                           "ringcoll,ringcoll+fingerprint=1",
                                           os.path.join(tdir, f"base{i}.json"), args)
        trace_dir = os.path.join(tdir, f"trace{i}")
        this, rows_b, cmds["this"] = bench(HERE, f"ringcoll,ringcoll+trace={trace_dir}",
                                           os.path.join(tdir, f"this{i}.json"), args)
        runs.append((base, this))
        raw.append({"pair": i, "base": rows_a, "this": rows_b})
    sizes = sorted({s for (_, s) in runs[0][0]})
    lines = [f"{'size B':>10} {'base us':>10} {'off us':>10} {'on us':>10}  "
             f"{'off/base median (min-max)':<28} {'on/off median (min-max)':<28} "
             f"{'base A/A median (min-max)':<28} {'best off/base':>13}"]
    all_off, all_best = [], []
    for s in sizes:
        off_base = [b_this[("ringcoll", s)] / b_base[("ringcoll", s)] for b_base, b_this in runs]
        on_off = [t / b_this[("ringcoll", s)]
                  for b_base, b_this in runs for (backend, size), t in b_this.items()
                  if size == s and backend.startswith("ringcoll+trace")]
        # The noise floor: two identical groups of the base build, same processes.
        same = [t / b_base[("ringcoll", s)]
                for b_base, b_this in runs for (backend, size), t in b_base.items()
                if size == s and backend != "ringcoll"]
        all_off += off_base
        best = (min(b_this[("ringcoll", s)] for _, b_this in runs)
                / min(b_base[("ringcoll", s)] for b_base, _ in runs))
        all_best.append(best)
        def med(which, traced):  # which: 0 base, 1 this tree
            return statistics.median(
                t for pair in runs for (backend, size), t in pair[which].items()
                if size == s and backend.startswith("ringcoll+trace") == traced)

        lines.append(f"{s:>10} {med(0, False):>10.1f} {med(1, False):>10.1f} "
                     f"{med(1, True):>10.1f}  {spread(off_base):<28} {spread(on_off):<28} "
                     f"{spread(same):<28} {best:>13.3f}")
    lines.append(f"off/base over every size and pair: median {statistics.median(all_off):.3f}, "
                 f"geometric mean {statistics.geometric_mean(all_off):.3f}, "
                 f"min {min(all_off):.3f}, max {max(all_off):.3f} (n = {len(all_off)}); "
                 f"best off/base: median {statistics.median(all_best):.3f}")
    head = [
        "RINGCOLL_TRACE cost: ringcoll all-reduce float32 time per call (us), median of the "
        "benchmark's runs",
        f"command: python benchmarks/trace_cost.py --base {args.base} --pairs {args.pairs} "
        f"--nproc {args.nproc} --budget {args.budget} -b {args.minbytes} -e {args.maxbytes}",
        f"  base runs: PYTHONPATH=<base> {cmds['base']}",
        f"  this runs: PYTHONPATH=<this tree> {cmds['this']}",
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python "
        f"{platform.python_version()}; {time.time() - start:.0f} s",
        "",
    ]
    text = "\n".join(head + lines) + "\n"
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    with open(args.out + ".json", "w") as f:
        json.dump({"command": head[1], "bench_commands": cmds, "runs": raw,
                   "seconds": time.time() - start}, f)


if __name__ == "__main__":
    main()
