"""python -m ringcoll.sim: one algorithm's predicted time on a topology, or the table
of every algorithm (docs/MODEL.md). The topology comes from a JSON file (--topology,
ringcoll/sim/topology.py's FILE_KEYS), then the flags, over a calibration's
constants (--calibration: a machine's, from python -m ringcoll.model --calibrate) or
the table's defaults (8 ranks a host, ringcoll.sim's INTRA, INTER, GAMMA and COPY):

    python -m ringcoll.sim --algo ring --hosts 2048 --per-host 8 --size 64M
    python -m ringcoll.sim --algo rhd --hosts 256 --per-host 8 --hosts-per-leaf 32 \\
        --leaves-per-spine 8 --oversubscription 2 --nic host --ports 2 \\
        --alpha leaf=5e-6 --beta leaf=4e-11 --size 1M
    python -m ringcoll.sim --calibration benchmarks/results/model-cpu.json \
        --hosts 1 --per-host 4 --algo oneshot --size 1M     # this machine's constants

A topology file:

    {"hosts": 256, "per_host": 8, "hosts_per_leaf": 32, "leaves_per_spine": 8,
     "oversubscription": 2, "nic": "host", "placement": "block", "ports": 1,
     "levels": {"host": {"alpha": 1.5e-6, "beta": 8e-11},
                "leaf": {"alpha": 2.5e-5, "beta": 1e-10},
                "spine": {"alpha": 3e-5, "beta": 1e-10}}}
"""

from __future__ import annotations

import argparse
import sys
import time

from .. import check as checker
from .._modules import load_from_environment
from ..model import SCHEDULE_NAME
from . import INTER, INTRA, default_topology, plot, simulate, table
from . import steps as steps_mod
from . import topology as topo_mod


def _level_values(items, what):
    """{level: seconds} from LEVEL=SECONDS flags."""
    out = {}
    for item in items or []:
        name, _, value = item.partition("=")
        if name not in topo_mod.LEVELS or not value:
            raise ValueError(f"--{what} {item!r}: expected LEVEL=SECONDS, LEVEL one of "
                             f"{', '.join(topo_mod.LEVELS)}")
        out[name] = float(value)
    return out


def topology_from(a):
    """The topology the command line describes: the file's settings, then the flags'."""
    settings = {}
    if a.calibration:
        from .. import model

        per_host = a.per_host or (topo_mod.load(a.topology).get("per_host") if a.topology
                                  else None) or default_topology().per_host
        settings = topo_mod.from_calibration(model.load(a.calibration), per_host)
    if a.topology:
        file = topo_mod.load(a.topology)
        settings = {**settings, **file,
                    "levels": {**settings.get("levels", {}), **file.get("levels", {})}}
    flags = {"hosts": a.hosts, "per_host": a.per_host, "hosts_per_leaf": a.hosts_per_leaf,
             "leaves_per_spine": a.leaves_per_spine, "oversubscription": a.oversubscription,
             "nic": a.nic, "placement": a.placement, "ports": a.ports, "cores": a.cores,
             "gamma": a.gamma, "copy": a.copy, "overhead": a.overhead, "step": a.step,
             "chunk_bytes": a.chunk_bytes, "bus": a.bus}
    settings.update({k: v for k, v in flags.items() if v is not None})
    if a.no_fingerprint:
        settings["fingerprint"] = False
    base = default_topology()
    given = {name: dict(v) for name, v in (settings.get("levels") or {}).items()}
    for what in ("alpha", "beta"):
        for name, v in _level_values(getattr(a, what), what).items():
            given.setdefault(name, {})[what] = v
    # what a level does not set is the level below's (host and leaf: the defaults')
    levels, below = {}, None
    for name, link in zip(topo_mod.LEVELS, base.links()):
        mine = {"alpha": link.alpha, "beta": link.beta} if below is None or name == "leaf" \
            else dict(below)
        mine.update(given.get(name, {}))
        levels[name] = below = mine
    settings["levels"] = levels
    return topo_mod.build(settings, base)


def parse_args(argv=None):
    from ..bench.records import parse_size

    ap = argparse.ArgumentParser(prog="python -m ringcoll.sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algo", default=None,
                    help="one algorithm (default: a table of every algorithm that provides "
                         "the collective, as docs/MODEL.md's)")
    ap.add_argument("--collective", default="all_reduce",
                    help="torch's or c10d's name (all_reduce, allreduce, all_to_all, "
                         "alltoall, gather, ...), or 'all' for a table of each; default "
                         "all_reduce")
    ap.add_argument("--size", type=parse_size, default=1 << 20)
    ap.add_argument("--plot", default=None, metavar="PATH",
                    help="with the tables: also draw them as a PNG, one panel per collective")
    t = ap.add_argument_group("topology (a file, then these flags, over the defaults)")
    t.add_argument("--topology", default=None, metavar="FILE", help="JSON settings (above)")
    t.add_argument("--calibration", default=None, metavar="PATH",
                   help="a machine's constants from `python -m ringcoll.model --calibrate` "
                        "(host level from its shm, leaf from its gloo, ports, overhead, "
                        "gamma, copy, cores, ...), under the file's and the flags'")
    t.add_argument("--hosts", type=int, default=None, help="hosts (default 1)")
    t.add_argument("--per-host", type=int, default=None, help="ranks per host (default 8)")
    t.add_argument("--hosts-per-leaf", type=int, default=None,
                   help="hosts under one leaf switch (default: all)")
    t.add_argument("--leaves-per-spine", type=int, default=None,
                   help="leaves under one spine (default: all)")
    t.add_argument("--oversubscription", type=float, default=None,
                   help="leaf and spine uplinks carry 1/this of what is under them at full "
                        "speed (default 1)")
    t.add_argument("--nic", choices=topo_mod.NICS, default=None,
                   help="one NIC per rank (default) or per host, shared by its ranks")
    t.add_argument("--placement", choices=topo_mod.PLACEMENTS, default=None,
                   help="rank r on host r // per-host (block, default) or r %% hosts (cyclic)")
    t.add_argument("--ports", type=int, default=None,
                   help="messages a rank moves at once (default 1: one after another)")
    t.add_argument("--alpha", action="append", metavar="LEVEL=S",
                   help=f"seconds per message end at a level ({', '.join(topo_mod.LEVELS)}); "
                        f"default host {INTRA.alpha:g}, leaf {INTER.alpha:g}, spine and core "
                        "the level below's")
    t.add_argument("--beta", action="append", metavar="LEVEL=S",
                   help=f"seconds per byte end at a level; default host {INTRA.beta:g}, leaf "
                        f"{INTER.beta:g} (the NIC's speed), spine and core the level below's")
    t.add_argument("--cores", type=int, default=None, help="cores per host (default: a rank "
                   "each)")
    t.add_argument("--gamma", type=float, default=None, help="seconds per byte reduced")
    t.add_argument("--copy", type=float, default=None, help="seconds per byte copied")
    t.add_argument("--overhead", type=float, default=None, help="seconds per call")
    t.add_argument("--step", type=float, default=None,
                   help="seconds per step in which anything moves")
    t.add_argument("--chunk-bytes", type=parse_size, default=None, help="segment size")
    t.add_argument("--bus", type=float, default=None,
                   help="seconds per byte of each host's memory system, shared by its "
                        "ranks' messages (default: not shared)")
    t.add_argument("--no-fingerprint", action="store_true", help="no header step")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from ..model import providers

    a = parse_args(argv)
    try:
        load_from_environment()
        topo = topology_from(a)
    except ImportError as e:
        print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # the topology
        print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
        return 2
    colls = list(SCHEDULE_NAME) if a.collective == "all" else [checker.torch_name(a.collective)]
    bad = [c for c in colls if c not in SCHEDULE_NAME]
    if bad:
        print(f"python -m ringcoll.sim: unknown collective {a.collective!r} (known: "
              f"{', '.join(SCHEDULE_NAME)}, c10d's names, or all)", file=sys.stderr)
        return 2
    if a.algo is None:
        per_host = a.per_host or 8
        for coll in colls:
            print(f"# predicted {coll} time (us), float32; intra-host alpha {topo.intra.alpha:g} "
                  f"s beta {topo.intra.beta:g} s/B, inter-host alpha {topo.inter.alpha:g} s "
                  f"beta {topo.inter.beta:g} s/B, gamma {topo.gamma:g} s/B, copy "
                  f"{topo.copy:g} s/B; bold: fastest")
            print(table(providers(coll), collective=coll, per_host=per_host, topo=topo))
            print()
        if a.plot:
            plot(a.plot, colls, per_host=per_host, topo=topo)
            print(f"# wrote {a.plot}")
        return 0
    where = topo.describe()
    for coll in colls:
        t0 = time.perf_counter()
        try:
            r = simulate(a.algo, coll, topo, a.size)
        except checker.NotApplicable as e:
            print(f"{a.algo} {coll} {a.size} B on {where}: skipped: {e}")
            continue
        except (ValueError, steps_mod.TooLarge) as e:  # does not provide it, too large
            print(f"python -m ringcoll.sim: {e}", file=sys.stderr)
            return 1
        print(f"{a.algo} {coll} {a.size} B on {where}: {r.seconds * 1e6:.1f} us, {r.steps} "
              f"steps; checked {r.checked}")
        if "symmetry" in r.how:
            print(f"  read by {r.how}; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
