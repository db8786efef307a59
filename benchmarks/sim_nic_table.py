"""docs/MODEL.md's table of a fat tree: ring, rhd, tree, swing and twolevel (the
hierarchical one) from 8 x 8 to 2048 x 8 ranks, one NIC per rank and one per host,
1 MiB and 64 MiB all-reduces, predicted by ringcoll.sim.

    python benchmarks/sim_nic_table.py > benchmarks/results/sim-nic-table.txt

The topology: 8 ranks a host, 32 hosts a leaf, 16 leaves a spine (4096 ranks a
spine group), uplinks not oversubscribed; ringcoll.sim's table constants (host
alpha 1.5 us beta 0.08 ns/B, leaf alpha 25 us beta 0.1 ns/B, the spine and core the
leaf's), gamma and copy 0.1 ns/B.
"""

from __future__ import annotations

import time

from ringcoll import sim

ALGOS = ("ring", "rhd", "tree", "swing", "twolevel")
HOSTS = (8, 64, 256, 2048)
SIZES = (1 << 20, 64 << 20)


def main() -> None:
    t0 = time.perf_counter()
    print("# predicted all_reduce time (us), float32, 8 ranks a host, 32 hosts a leaf, 16 leaves "
          "a spine, not oversubscribed; bold: fastest of the row")
    print("| ranks (hosts x 8) | NIC per | size | " + " | ".join(ALGOS) + " |")
    print("|---|---|---|" + "---|" * len(ALGOS))
    for hosts in HOSTS:
        for nic in ("rank", "host"):
            topo = sim.default_topology(hosts=hosts, per_host=8, hosts_per_leaf=32,
                                        leaves_per_spine=16, nic=nic)
            for size in SIZES:
                t = {a: sim.simulate(a, "all_reduce", topo, size).seconds for a in ALGOS}
                best = min(t, key=t.get)
                cells = [f"**{t[a] * 1e6:,.0f}**" if a == best else f"{t[a] * 1e6:,.0f}"
                         for a in ALGOS]
                print(f"| {hosts * 8} ({hosts} x 8) | {nic} | {sim._size(size)} | "
                      + " | ".join(cells) + " |", flush=True)
    print(f"\n# {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
