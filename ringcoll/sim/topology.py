"""Where the simulator's ranks live, what their messages cross, and what they share.

Levels, from the closest: 0 a host (node), 1 a leaf switch, 2 a spine, 3 the core
above the spines. A message between two ranks is at the level of the smallest unit
that holds both: the same host 0 (shared memory), the same leaf 1, the same spine
group (leaves_per_spine leaves) 2, else 3. Each level has a Link: alpha seconds per
message end and beta seconds per byte end, as ringcoll.model counts them.

Shared resources, one per direction (full duplex), which the flows that cross one
in a step divide (ringcoll/sim/cost.py):

  nic    every message at level >= 1 leaves through its sender's NIC and arrives
         through its receiver's: one NIC per host (nic="host", its ranks share it)
         or one per rank (nic="rank"); its seconds per byte are level 1's beta;
  leaf   every message at level >= 2 crosses its leaf's uplink, up on the sender's
         side and down on the receiver's: the NICs under the leaf at full speed,
         divided by the oversubscription (2: half of them at once);
  spine  every message at level 3 crosses its spine group's uplink likewise: the
         group's leaf uplinks, divided by the oversubscription;
  bus    optional (bus, seconds per byte): each host's memory system, crossed by
         its level-0 messages.

Placement: "block" puts rank r on host r // per_host (the ring order runs host by
host), "cyclic" on host r % hosts (neighbouring ranks on different hosts).

A topology is translation-symmetric when moving every rank by T (mod p) maps hosts
to hosts, leaves to leaves and groups to groups; the simulator then prices the
ranks of one period and the resources of one orbit for all (period(), orbits()).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace

import numpy as np

LEVELS = ("host", "leaf", "spine", "core")
PLACEMENTS = ("block", "cyclic")
NICS = ("rank", "host")


@dataclass(frozen=True)
class Link:
    alpha: float  # seconds per message end
    beta: float   # seconds per byte end


@dataclass(frozen=True)
class Topology:
    """hosts x per_host ranks, their links and what the simulator charges.

    intra: level 0's link (between ranks of a host); inter: level 1's (between hosts
    under one leaf, and the NIC's speed); spine, core: levels 2 and 3 (None: the
    level below's). hosts_per_leaf, leaves_per_spine: None puts every host under
    one leaf, every leaf under one spine. gamma: seconds per byte reduced; copy:
    per byte copied (a local copy in a step, and the call's staging); overhead: per
    call; step: per step in which anything moves; cores per host (None: one per
    rank) and wake model ranks outnumbering cores as ringcoll.model does; ports: the
    messages a rank moves at once (1: one after another, as ringcoll.model)."""
    hosts: int
    per_host: int
    intra: Link
    inter: Link
    gamma: float = 0.0
    overhead: float = 0.0
    cores: int | None = None  # per host; None: one per rank
    wake: float = 0.0         # per message end when a host's ranks outnumber its cores
    chunk_bytes: int = 1 << 20
    fingerprint: bool = True
    copy: float = 0.0         # per byte copied (local copies, the call's staging)
    step: float = 0.0         # per step in which anything moves (ringcoll.model's rounds)
    ports: int = 1
    nic: str = "rank"
    hosts_per_leaf: int | None = None
    leaves_per_spine: int | None = None
    spine: Link | None = None
    core: Link | None = None
    oversubscription: float = 1.0
    placement: str = "block"
    bus: float | None = None

    def __post_init__(self):
        if self.hosts < 1 or self.per_host < 1:
            raise ValueError(f"Topology: {self.hosts} hosts x {self.per_host} ranks per host "
                             "(need at least 1 x 1)")
        if self.chunk_bytes < 64:
            raise ValueError(f"Topology: chunk_bytes={self.chunk_bytes} is below the "
                             "executor's 64-byte minimum segment")
        if not (isinstance(self.ports, int) and self.ports >= 1):
            raise ValueError(f"Topology: ports={self.ports!r} (messages a rank moves at once) "
                             "is not a whole number >= 1")
        if self.nic not in NICS:
            raise ValueError(f"Topology: nic={self.nic!r} is not one of {', '.join(NICS)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"Topology: placement={self.placement!r} is not one of "
                             f"{', '.join(PLACEMENTS)}")
        for name in ("hosts_per_leaf", "leaves_per_spine"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise ValueError(f"Topology: {name}={v!r} is not a whole number >= 1")
        if not self.oversubscription > 0:
            raise ValueError(f"Topology: oversubscription={self.oversubscription!r} is not "
                             "above 0")

    @property
    def p(self) -> int:
        return self.hosts * self.per_host

    @property
    def leaves(self) -> int:
        return -(-self.hosts // (self.hosts_per_leaf or self.hosts))

    @property
    def groups(self) -> int:
        return -(-self.leaves // (self.leaves_per_spine or self.leaves))

    def links(self) -> list:
        """The Link of each level, 0..3."""
        spine = self.spine or self.inter
        return [self.intra, self.inter, spine, self.core or spine]

    def host_of(self, ranks) -> np.ndarray:
        ranks = np.asarray(ranks, dtype=np.int64)
        if self.placement == "cyclic":
            return ranks % self.hosts
        return ranks // self.per_host

    def params_hosts(self) -> tuple:
        """Params.hosts for the schedules: each rank's host, numbered in ring order (the
        identity order: host numbers as placed); empty on one host."""
        if self.hosts == 1:
            return ()
        return tuple(int(h) for h in self.host_of(np.arange(self.p)))

    def units(self, ranks) -> tuple:
        """(host, leaf, group) of each rank."""
        host = self.host_of(ranks)
        leaf = host // (self.hosts_per_leaf or self.hosts)
        return host, leaf, leaf // (self.leaves_per_spine or self.leaves)

    def level(self, a, b) -> np.ndarray:
        """The level of each message between ranks a and b (arrays): 0..3."""
        ha, la, ga = self.units(a)
        hb, lb, gb = self.units(b)
        return np.where(ha == hb, 0, np.where(la == lb, 1, np.where(ga == gb, 2, 3)))

    # -- shared resources --------------------------------------------------------

    def resource_layout(self) -> dict:
        """name -> (first id, count) of each kind of resource (module docstring)."""
        nic = self.p if self.nic == "rank" else self.hosts
        out, at = {}, 0
        for name, count in (("nic_out", nic), ("nic_in", nic), ("leaf_up", self.leaves),
                            ("leaf_down", self.leaves), ("spine_up", self.groups),
                            ("spine_down", self.groups), ("bus", self.hosts)):
            out[name] = (at, count)
            at += count
        return out

    def resource_beta(self) -> np.ndarray:
        """Seconds per byte of every resource (inf-free; the bus's 0 when there is none:
        it is then never crossed)."""
        lay = self.resource_layout()
        total = sum(c for _, c in lay.values())
        beta = np.zeros(total)
        nic_beta = self.inter.beta
        nics_per_leaf = (self.hosts_per_leaf or self.hosts) * (
            self.per_host if self.nic == "rank" else 1)
        leaf_beta = nic_beta * self.oversubscription / nics_per_leaf
        spine_beta = leaf_beta * self.oversubscription / (self.leaves_per_spine or self.leaves)
        for name, value in (("nic_out", nic_beta), ("nic_in", nic_beta),
                            ("leaf_up", leaf_beta), ("leaf_down", leaf_beta),
                            ("spine_up", spine_beta), ("spine_down", spine_beta),
                            ("bus", self.bus or 0.0)):
            first, count = lay[name]
            beta[first:first + count] = value
        return beta

    def paths(self, src, dst) -> np.ndarray:
        """The resources each message from src to dst crosses (module docstring), one
        row per message, -1 where it crosses fewer: shape (len(src), 6)."""
        lay = self.resource_layout()
        hs, ls, gs = self.units(src)
        hd, ld, gd = self.units(dst)
        lvl = np.where(hs == hd, 0, np.where(ls == ld, 1, np.where(gs == gd, 2, 3)))
        ns = np.asarray(src) if self.nic == "rank" else hs
        nd = np.asarray(dst) if self.nic == "rank" else hd
        out = np.full((len(hs), 6), -1, dtype=np.int64)
        net = lvl >= 1
        out[:, 0] = np.where(net, lay["nic_out"][0] + ns, -1)
        out[:, 1] = np.where(net, lay["nic_in"][0] + nd, -1)
        out[:, 2] = np.where(lvl >= 2, lay["leaf_up"][0] + ls, -1)
        out[:, 3] = np.where(lvl >= 2, lay["leaf_down"][0] + ld, -1)
        out[:, 4] = np.where(lvl >= 3, lay["spine_up"][0] + gs, -1)
        out[:, 5] = np.where(lvl >= 3, lay["spine_down"][0] + gd, -1)
        if self.bus:
            out[:, 0] = np.where(lvl == 0, lay["bus"][0] + hs, out[:, 0])
        return out

    # -- symmetry ----------------------------------------------------------------

    def _unit_arrays(self) -> list:
        ranks = np.arange(self.p)
        host, leaf, group = self.units(ranks)
        return [ranks if self.nic == "rank" else host, host, leaf, group]

    def period(self) -> int:
        """The least T dividing p such that moving every rank by T (mod p) maps each
        host, leaf and spine group (and NIC) onto one: the topology's translation
        symmetry (p: none)."""
        p = self.p
        units = self._unit_arrays()
        for t in (d for d in range(1, p + 1) if p % d == 0):
            if all(_maps_onto(u, np.roll(u, -t)) for u in units):
                return t
        return p

    def orbits(self, shift: int) -> tuple:
        """Moving every rank by `shift` (a multiple of period()) permutes the
        resources: (canon, mult) per resource id, canon the least id of its orbit and
        mult (p / shift) / the orbit's size (how many of the p / shift moves map a
        message of one period onto it, per message: 1 unless the orbit is shorter)."""
        p, lay = self.p, self.resource_layout()
        total = sum(c for _, c in lay.values())
        perm = np.arange(total)
        ranks = np.arange(p)
        moved = (ranks + shift) % p
        nic = self.nic == "rank"
        (h0, l0, g0), (h1, l1, g1) = self.units(ranks), self.units(moved)
        for names, a, b in ((("nic_out", "nic_in"), ranks if nic else h0, moved if nic else h1),
                            (("leaf_up", "leaf_down"), l0, l1),
                            (("spine_up", "spine_down"), g0, g1), (("bus",), h0, h1)):
            for name in names:
                first = lay[name][0]
                perm[first + a] = first + b
        canon, x, size = np.arange(total), np.arange(total), np.zeros(total, dtype=np.int64)
        for k in range(1, p // shift + 1):
            x = perm[x]
            canon = np.minimum(canon, x)
            size = np.where((size == 0) & (x == np.arange(total)), k, size)
        return canon, (p // shift) / np.maximum(size, 1)

    # -- reading one ---------------------------------------------------------------

    def describe(self) -> str:
        """One line: the shape and what is shared."""
        shape = f"{self.hosts} x {self.per_host}"
        if self.hosts_per_leaf and self.hosts_per_leaf < self.hosts:
            shape += f", {self.hosts_per_leaf} hosts a leaf"
            if self.leaves_per_spine and self.leaves_per_spine < self.leaves:
                shape += f", {self.leaves_per_spine} leaves a spine"
            if self.oversubscription != 1:
                shape += f", oversubscribed {self.oversubscription:g}:1"
        if self.nic == "host" and self.hosts > 1:
            shape += ", a NIC per host"
        if self.ports > 1:
            shape += f", {self.ports} ports"
        if self.placement != "block":
            shape += f", {self.placement} placement"
        return shape


def _maps_onto(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a[i] -> b[i] is one bijection of unit ids (each unit of a goes whole to
    one unit of b, and no two to the same)."""
    m = np.full(int(a.max()) + 1, -1, dtype=np.int64)
    m[a] = b
    if not np.array_equal(m[a], b):
        return False
    used = m[m >= 0]
    return len(np.unique(used)) == len(used)


# -- from a file or the command line -----------------------------------------------

FILE_KEYS = ("hosts", "per_host", "hosts_per_leaf", "leaves_per_spine", "oversubscription",
             "nic", "placement", "ports", "cores", "gamma", "copy", "overhead", "step",
             "wake", "chunk_bytes", "fingerprint", "bus", "levels")


def load(path: str) -> dict:
    """A topology file's settings (JSON: FILE_KEYS; "levels" maps host, leaf, spine,
    core to {"alpha": s, "beta": s/B}); ValueError naming the file and the key."""
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise ValueError(f"topology {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"topology {path}: not JSON ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"topology {path}: not a JSON object")
    unknown = sorted(set(d) - set(FILE_KEYS))
    if unknown:
        raise ValueError(f"topology {path}: unknown keys {', '.join(unknown)} (known: "
                         f"{', '.join(FILE_KEYS)})")
    levels = d.get("levels", {})
    bad = sorted(set(levels) - set(LEVELS)) if isinstance(levels, dict) else ["levels"]
    if bad:
        raise ValueError(f"topology {path}: levels {', '.join(bad)} (known: {', '.join(LEVELS)})")
    for name, v in levels.items():
        if not (isinstance(v, dict) and set(v) == {"alpha", "beta"}):
            raise ValueError(f"topology {path}: level {name} needs alpha and beta, got {v!r}")
    return d


def from_calibration(cal, per_host: int, intra: str = "shm", inter: str = "gloo") -> dict:
    """Settings from a ringcoll.model calibration (a machine's measured constants):
    the host level from transport `intra` and the leaf level (the NIC) from `inter`
    where the calibration has it, each as the model takes it for per_host ranks
    (its "<transport>/crowded" set when they outnumber the calibration's cores),
    with that set's overhead, step, wake and ports, and the calibration's gamma,
    copy, cores, segment size and header."""
    here = cal.link(intra, per_host)
    levels = {"host": {"alpha": here.alpha, "beta": here.beta}}
    if inter in cal.transports and cal.transports[inter] is not None:
        there = cal.link(inter, per_host)
        levels["leaf"] = {"alpha": there.alpha, "beta": there.beta}
    return {"levels": levels, "overhead": here.overhead, "step": here.step,
            "wake": here.wake, "ports": here.ports, "gamma": cal.gamma["float32"],
            "copy": cal.copy, "cores": here.cores or cal.cores,
            "chunk_bytes": here.chunk_bytes or cal.chunk_bytes,
            "fingerprint": cal.fingerprint if here.fingerprint < 0 else bool(here.fingerprint)}


def build(settings: dict, default: Topology) -> Topology:
    """`default` with settings (a file's, then the command line's) applied; levels'
    links replace intra (host), inter (leaf), spine and core."""
    kw = {k: v for k, v in settings.items() if k != "levels" and v is not None}
    links = {"host": "intra", "leaf": "inter", "spine": "spine", "core": "core"}
    for name, v in (settings.get("levels") or {}).items():
        kw[links[name]] = Link(float(v["alpha"]), float(v["beta"]))
    known = {f.name for f in fields(Topology)}
    return replace(default, **{k: v for k, v in kw.items() if k in known})


def lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)
