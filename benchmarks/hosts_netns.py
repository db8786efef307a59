"""All-reduce on two real hosts of this machine with a slow link between them, beside
the cost model's and the simulator's predictions.

    python benchmarks/hosts_netns.py | tee benchmarks/results/hosts-netns.txt

Builds the two hosts of tests/test_hosts.py (tests/netns.py: a network namespace,
host name and /dev/shm each, joined by a veth pair), limits both ends of the veth
with `tc qdisc add dev VETH root tbf rate RATE burst BURST latency LATENCY`, runs
`torchrun --nnodes 2 --nproc_per_node 2` on each host (c10d rendezvous on host 0's
veth address) and times float32 SUM all-reduces of each size with each algorithm
(ringcoll.Options(algo=...) per group; shared memory within a host, gloo between
the hosts): per call the slowest rank's time, the median over --iters calls (a
barrier before each), and their min-max. Then the same without tbf (the veth as it
is), for reference. Needs root; takes about a minute.

Predictions (seconds, float32, 4 ranks = 2 hosts x 2):

* simulator (ringcoll.sim, two link classes): intra-host links at the committed
  calibration's shared-memory constants (ringcoll.model.DEFAULTS "shm/crowded":
  4 ranks on 2 cores), inter-host links at its gloo constants ("gloo/crowded": alpha
  as calibrated, beta + 1 / R per byte end, R = the tbf rate in bytes/s times
  1448/1514, the TCP payload of a full 1500-byte-MTU frame, which is what tbf
  counts); gamma, copy and the call overhead (gloo's) from the same calibration.
  The crowding of 4 ranks on 2 cores is in those "/crowded" constants; the rule that
  spreads a crowded host's work over its cores is left out (a core per rank), as it
  would count the wire time, which is no CPU work, twice. 1 / R at each end of a
  transfer is the wire time of one flow per direction (ring, tree); rhd's exchange
  step has both ranks of a host sending across at once, each at R / 2, which the
  same charge (B / R at the sending and at the receiving end, 2B / R for a rank that
  does both) also matches.
* model (ringcoll.model.predict, one link class): the same constants with every
  link priced as the gloo one, which is how RINGCOLL_ALGO=auto models a group that
  spans hosts (ringcoll/_backend.py); so it charges the shared-memory hops at the
  slow link's price too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.netns import TwoHosts  # noqa: E402

PAYLOAD = 1448 / 1514  # TCP payload per full frame (MTU 1500, TCP timestamps)


def parse_rate(s: str) -> float:
    """tc's rate ("1gbit", "500mbit", "100mbps") in bytes per second."""
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8, "bit": 1 / 8,
             "kbps": 1e3, "mbps": 1e6, "gbps": 1e9, "bps": 1.0}
    for u, f in units.items():
        if s.lower().endswith(u):
            return float(s[: -len(u)]) * f
    raise ValueError(f"rate {s!r}: use tc's units (kbit, mbit, gbit, kbps, mbps, gbps)")


def parse_size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def show_size(b: int) -> str:
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if b >= 1 << shift:
            return f"{b >> shift} {unit}"
    return f"{b} B"


def measure(rate, args, sizes):
    """{f"{algo} {size}": {"median", "min", "max", "ok"}} from one 2 x 2 job, and
    what was done to build it."""
    with TwoHosts() as h:
        done = [f"ip {' '.join(c)}" for c in h.commands()]
        if rate is not None:
            done += h.shape(rate, args.burst, args.latency)
        out = h.dir / "out"
        out.mkdir()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RINGCOLL_", "GLOO_", "MASTER_", "TORCHELASTIC_"))}
        env.update(PYTHONPATH=REPO, OMP_NUM_THREADS="1")
        procs = []
        for k in (0, 1):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", f"{h.addrs[0]}:29400", "--rdzv_id", f"rc-{h.tag}",
                    "--max_restarts", "0", os.path.join(REPO, "tests", "hosts_worker.py"),
                    "bench", str(out), args.algos, ",".join(map(str, sizes)),
                    str(args.iters)]
            procs.append(h.spawn(k, argv, env, h.dir / f"host{k}.log"))
        codes = []
        for pr in procs:
            try:
                codes.append(pr.wait(timeout=600))
            except subprocess.TimeoutExpired:
                codes.append(None)
        res = {}
        for f in out.glob("rank*.json"):
            res[int(f.stem[4:])] = json.loads(f.read_text())
        if codes != [0, 0] or 0 not in res or "error" in res[0]:
            logs = "\n".join((h.dir / f"host{k}.log").read_text()[-4000:] for k in (0, 1))
            raise SystemExit(f"the 2 x 2 job failed (exit codes {codes}):\n{logs}\n{res}")
        return res[0]["times"], done, h.names


def predictions(rate, algos, sizes):
    from ringcoll import model, sim

    cal = model.DEFAULTS
    extra = 0.0 if rate is None else 1.0 / (parse_rate(rate) * PAYLOAD)
    shm, gloo = cal.link("shm", 4), cal.link("gloo", 4)  # the "/crowded" sets: p > cores
    slow = dataclasses.replace(gloo, beta=gloo.beta + extra)
    # A core per rank (no spreading of a host's work over its cores: that rule would
    # count the wire time as CPU work); the crowding is in the "/crowded" constants.
    mcal = dataclasses.replace(cal, cores=4, transports={**cal.transports, "gloo": slow,
                                                         "gloo/crowded": slow})
    topo = sim.Topology(hosts=2, per_host=2, intra=sim.Link(shm.alpha, shm.beta),
                        inter=sim.Link(slow.alpha, slow.beta), gamma=cal.gamma["float32"],
                        overhead=slow.overhead, cores=None, wake=0.0, copy=cal.copy,
                        step=shm.step, chunk_bytes=cal.chunk_bytes)
    out = {}
    for a in algos:
        for nb in sizes:
            out[f"{a} {nb}"] = (model.predict(a, "all_reduce", 4, nb, "gloo", mcal),
                                sim.simulate(a, "all_reduce", topo, nb).seconds)
    return out, shm, slow, topo


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", default="1gbit", help="tbf rate of each veth end (tc units)")
    ap.add_argument("--burst", default="256kb")
    ap.add_argument("--latency", default="50ms")
    ap.add_argument("--algos", default="ring,rhd,tree")
    ap.add_argument("--sizes", default="64K,1M,16M")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces, veth pairs, tc)")
    import torch

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    algos = args.algos.split(",")
    t0 = time.monotonic()
    shaped, done, names = measure(args.rate, args, sizes)
    plain, _, _ = measure(None, args, sizes)
    pred, shm, slow, topo = predictions(args.rate, algos, sizes)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), "?")
    print(f"# ringcoll all-reduce, 2 hosts x 2 ranks on one machine (network namespaces), "
          f"float32 SUM")
    print(f"# machine: {os.cpu_count()}-core VM ({cpu}), {platform.platform()}, "
          f"torch {torch.__version__}, Python {platform.python_version()}")
    print(f"# command: python benchmarks/hosts_netns.py --rate {args.rate} --burst "
          f"{args.burst} --latency {args.latency} --algos {args.algos} --sizes {args.sizes} "
          f"--iters {args.iters}   ({time.monotonic() - t0:.0f} s)")
    print("# hosts: " + "; ".join(done[:3]) + "; ... (tests/netns.py)")
    print(f"# tbf on both veth ends: {done[-2]}")
    print(f"#                        {done[-1]}")
    print(f"# measured: per call the slowest rank's time; median (min-max) of {args.iters} "
          f"calls after 2 warm-up calls, a barrier before each")
    print(f"# predicted (ringcoll.model.DEFAULTS; see the docstring): simulator intra "
          f"alpha {shm.alpha:.3g} s beta {shm.beta:.3g} s/B, inter alpha {slow.alpha:.3g} s "
          f"beta {slow.beta:.3g} s/B (gloo {slow.beta - 1 / (parse_rate(args.rate) * PAYLOAD):.3g}"
          f" + 1/R, R = {args.rate} x 1448/1514), overhead {slow.overhead:.3g} s, gamma "
          f"{topo.gamma:.3g} s/B, a core per rank; model: every link at the inter price")
    print()
    print(f"| algorithm | size | measured, tbf {args.rate} (ms) | model (ms) | simulator (ms) "
          f"| measured, no tbf (ms) |")
    print("|---|---|---|---|---|---|")
    for a in algos:
        for nb in sizes:
            m, u = shaped[f"{a} {nb}"], plain[f"{a} {nb}"]
            pm, ps = pred[f"{a} {nb}"]
            bad = "" if m["ok"] and u["ok"] else " (WRONG RESULT)"
            print(f"| {a} | {show_size(nb)} | {m['median'] * 1e3:.2f} ({m['min'] * 1e3:.2f}-"
                  f"{m['max'] * 1e3:.2f}){bad} | {pm * 1e3:.2f} | {ps * 1e3:.2f} | "
                  f"{u['median'] * 1e3:.2f} ({u['min'] * 1e3:.2f}-{u['max'] * 1e3:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
