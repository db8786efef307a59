"""Soak: ringcoll under what torch programs do to a backend, randomized, for as long
as asked, with a watchdog that turns any stall into a failure with every stack.

    python tests/soak/soak.py                                   # 2 minutes, four transports
    python tests/soak/soak.py --ops 20000 --out benchmarks/results/soak-cpu.json
    python tests/soak/soak.py --seed 7 --only-round 12          # one round of a run, again

Each round starts a new world of ranks (real processes, 2-4 by default) on one
transport (RINGCOLL_TRANSPORT=shm, gloo, stream and auto, round by round). Every rank
runs --threads Python threads; thread t owns three process groups: one over every
rank (thread 0's is the default group), one over a random subset of the ranks (one
rank included) and one that only its future callbacks issue on. Each group gets an
algorithm drawn from the built-in ones, the Python ones (ringcoll.schedules.SHIPPED
and examples/pyring.py), `auto` and per-collective selections, through
RINGCOLL_ALGO (the default group) or ringcoll.Options(algo=...).

A thread issues windows of async calls of every kind ringcoll runs (all_reduce,
reduce_scatter_tensor, reduce_scatter, all_gather_into_tensor, all_gather, broadcast,
reduce, gather, scatter, all_to_all_single, all_to_all, barrier, the coalesced
calls, isend/irecv pairs and batch_isend_irecv) with random sizes (0 to --max-bytes),
dtypes, ops and roots, and completes each window one way: wait() in order, reversed
or shuffled, is_completed() polled in a tight loop (no sleep), the future's wait(), a
then() callback, inputs dropped before the wait, or everything (tensors and Work)
dropped. Now and then a callback starts a chain: each completed call's callback
issues the next one, from the backend's thread; or (PowerSGD's DDP hook) the first
one's callback issues the rest and waits for each. What is issued on a group comes from
an RNG seeded alike on every rank (c10d's rule: one order per group, and point-to-point
pairs that match); how it is completed comes from one seeded per rank.

In a share of the rounds (--events) one rank aborts a group (ProcessGroup.abort, its
backend's abort or _abort_process_group) or destroys one (destroy_process_group) from
a thread of its own, or the harness SIGKILLs a rank, once that rank has issued a
random number of calls. The survivors must then fail with a clear error within the
group's timeout: a DistBackendError naming the collective, its sequence number and a
peer, or saying the group was aborted or shut down. A thread stops issuing at its
first error and waits out what it issued; the round ends when every thread is done,
and a new world starts.

Every result is checked against an exact reference computed on the rank from the
known inputs (small integers, so sums are exact in every dtype). A watchdog in this
process turns a round that makes no progress for --stall-s seconds into a hang: it
prints every rank's Python stacks (faulthandler, on SIGUSR1) and native stacks (gdb
-batch, tests/mp.py's), then kills the world. The summary counts operations, hangs,
crashes, wrong results, Works polled past their timeout (stuck), errors with a clear
cause and without one, errors in rounds where nothing was done to cause them,
errors that came later than the group's timeout allows, and rounds that left entries
in /dev/shm; --out writes it as JSON with the command, machine, torch and ringcoll
versions and the seed. The exit status is 1 when anything but a clear, caused error
happened. A round's calls are a function of (--seed, its number and the knobs); a
failure prints the command that reruns its round alone (--only-round).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import platform
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import timedelta

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # run as a script: import tests.* from the root, not this folder
    sys.path[0] = ROOT
PYRING = os.path.join(ROOT, "examples", "pyring.py")


# --- The knobs, in one place -------------------------------------------------------

@dataclass
class Knobs:
    ops: int = 0  # stop starting rounds after this many operations (0: --seconds alone)
    seconds: float = 120.0  # ... or after this many seconds (0: --ops alone)
    seed: int = 1
    # RINGCOLL_TRANSPORT, round by round (auto, the default, is shm within a host: the
    # same links, its own selection)
    transports: tuple = ("shm", "gloo", "stream", "auto")
    nproc: tuple = (2, 3, 4)  # world sizes, drawn per round
    threads: int = 3  # Python threads per rank, each with its own groups
    max_bytes: int = 4 << 20  # largest buffer of one call (all of its blocks)
    events: bool = True  # abort / destroy / kill in some rounds
    event_share: float = 0.3  # share of rounds with an event
    round_ops: int = 240  # calls drawn per round and rank, over its threads
    window: int = 6  # calls issued before a thread completes them, at most
    pg_timeout_s: float = 15.0  # every group's timeout: the bound on a survivor's error
    stall_s: float = 45.0  # no progress this long (> pg_timeout_s) is a hang
    only_round: int | None = None  # run this round alone (a failure's rerun)
    out: str | None = None  # the JSON summary's path
    inject: tuple = ()  # tests of the harness itself: hang, wrong, crash (round 0)


# How a window of calls is completed (weights), per rank.
MODES = {"wait": 3, "reverse": 1, "shuffle": 1, "poll": 3, "poll_all": 1, "future": 1,
         "then": 2, "wait_timeout": 1, "drop_inputs": 1, "drop_all": 1}
CHAIN_SHARE = 0.15  # share of windows whose first call's callback starts a chain
CHAIN_LEN = (1, 6)
WAIT_INSIDE_SHARE = 0.3  # share of chains a rank runs inside one callback, waiting
SMALL_SHARE = 0.25  # share of calls with a count from {0, 1, p-1, p+1}
ERROR_SAMPLES = 20  # messages kept per kind of outcome and rank
LATE_S = 10  # an error later than the group's timeout plus this, after its call, is late
NATIVE_FRAMES = 30  # per thread, in a hang's native stacks (a GIL wait is ~8 deep)
# The libraries whose symbols gdb reads for them: ringcoll's, Python's, the C and C++
# runtimes, c10 and torch's Python binding (where a GIL wait or a tensor's release
# shows); not libtorch_cpu (gloo, c10d), whose symbols take gdb 15-20 s to read.
NATIVE_LIBS = ("ringcoll/_C", "libc\\.so", "libstdc", "libpython", "libc10\\.so",
               "libtorch_python")
PREMUL_FACTOR = 2.0
# A clear error: the call (ringcoll::<op> #<seq> (rank r of p)) and a cause that names
# a peer, an abort or a shutdown; or c10d's own refusal of a group destroyed or aborted.
CLEAR_CALL = re.compile(r"ringcoll::\w+ #\d+ \(rank \d+ of \d+\)")
CLEAR_STOP = re.compile(r"abort\(\)|process group was (aborted|shut down)|destroy_process_group")
CLEAR_GROUP = re.compile(r"(process group|group) (was |has been |is )?"
                         r"(aborted|shut down|destroyed)|Invalid process group"
                         r"|is not initialized in the world group map|is not registered",
                         re.I)


def parse_args(argv) -> Knobs:
    d = Knobs()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=d.ops, help="operation budget (0: none)")
    ap.add_argument("--seconds", type=float, default=d.seconds, help="time budget (0: none)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--transports", default=",".join(d.transports))
    ap.add_argument("--nproc", default=",".join(map(str, d.nproc)), help="world sizes, 1-8")
    ap.add_argument("--threads", type=int, default=d.threads)
    ap.add_argument("--max-bytes", type=int, default=d.max_bytes)
    ap.add_argument("--events", choices=("on", "off"), default="on")
    ap.add_argument("--round-ops", type=int, default=d.round_ops)
    ap.add_argument("--pg-timeout-s", type=float, default=d.pg_timeout_s)
    ap.add_argument("--stall-s", type=float, default=d.stall_s)
    ap.add_argument("--only-round", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the summary as JSON here")
    ap.add_argument("--inject", default="",
                    help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    k = Knobs(ops=a.ops, seconds=a.seconds, seed=a.seed,
              transports=tuple(t for t in a.transports.split(",") if t),
              nproc=tuple(int(n) for n in a.nproc.split(",")), threads=a.threads,
              max_bytes=a.max_bytes, events=a.events == "on", round_ops=a.round_ops,
              pg_timeout_s=a.pg_timeout_s, stall_s=a.stall_s,
              only_round=a.only_round,
              out=a.out, inject=tuple(x for x in a.inject.split(",") if x))
    for t in k.transports:
        if t not in ("shm", "gloo", "stream", "auto"):
            ap.error(f"--transports: {t!r} is not one of shm, gloo, stream, auto")
    if not all(1 <= n <= 8 for n in k.nproc):
        ap.error(f"--nproc: {a.nproc!r}: world sizes from 1 to 8 (the exact inputs' bound)")
    if k.stall_s <= k.pg_timeout_s:
        ap.error(f"--stall-s {k.stall_s} must exceed --pg-timeout-s {k.pg_timeout_s}: a "
                 "survivor may rightly wait that long for its error")
    for x in k.inject:
        if x not in ("hang", "wrong", "crash"):
            ap.error(f"--inject: {x!r} is not one of hang, wrong, crash")
    if not (k.ops or k.seconds or k.only_round is not None):
        ap.error("give --ops or --seconds a budget")
    return k


# --- A round's plan: the same on every rank, drawn from (seed, round) ----------------

def algorithm_choices(p_group: int, transport: str, knobs: Knobs) -> list:
    """What a group's RINGCOLL_ALGO may be (None: the default)."""
    import ringcoll

    names = [None, "auto", "pyring"] + [n for n in ringcoll.algorithms()]
    names += ["allreduce=oneshot:0-64K,rhd:64K-1M,ring;broadcast=tree;reduce=tree",
              "allreduce=twoshot;reducescatter=rhd;allgather=twoshot;barrier=oneshot",
              "allreduce=swing:0-1M,biring;allgather=bruck",
              "allreduce=auto;allgather=auto"]
    return names


def plan_round(knobs: Knobs, index: int) -> dict:
    rng = random.Random(f"ringcoll-soak/{knobs.seed}/{index}")
    p = rng.choice(knobs.nproc)
    transport = knobs.transports[index % len(knobs.transports)]
    groups = []  # in creation order (every rank creates them in this order)
    for t in range(knobs.threads):
        for role in ("full", "sub", "chain"):
            ranks = (list(range(p)) if role != "sub"
                     else sorted(rng.sample(range(p), rng.randint(1, p))))
            groups.append({"thread": t, "role": role, "ranks": ranks,
                           "world": t == 0 and role == "full",
                           "algo": rng.choice(algorithm_choices(len(ranks), transport, knobs))})
    event = None
    if knobs.events and rng.random() < knobs.event_share:
        kind = rng.choice(["abort", "destroy", "kill"])
        target = rng.choice([i for i, g in enumerate(groups)
                             if not (kind == "destroy" and g["world"])])
        event = {"kind": kind, "rank": rng.choice(groups[target]["ranks"]),
                 # once that rank has issued this many calls (of about round_ops)
                 "at_op": rng.randint(1, max(1, knobs.round_ops * 2 // 3)),
                 "group": target,
                 "how": rng.choice(["pg.abort", "backend.abort", "_abort_process_group"])
                 if kind == "abort" else kind}
    return {"round": index, "seed": knobs.seed, "transport": transport, "p": p,
            "threads": knobs.threads, "groups": groups, "event": event,
            "thread_seeds": [rng.getrandbits(62) for _ in range(knobs.threads)],
            "round_ops": knobs.round_ops, "window": knobs.window,
            "max_bytes": knobs.max_bytes, "pg_timeout_s": knobs.pg_timeout_s,
            "inject": list(knobs.inject) if index == (knobs.only_round or 0) else []}


def describe_plan(plan) -> str:
    algos = sorted({str(g["algo"]) for g in plan["groups"]})
    ev = plan["event"]
    what = "no event" if ev is None else (
        f"{ev['how']} of group {ev['group']} by rank {ev['rank']} at its call {ev['at_op']}"
        if ev["kind"] != "kill" else f"SIGKILL of rank {ev['rank']} at its call {ev['at_op']}")
    return (f"{plan['transport']} p={plan['p']} threads={plan['threads']} {what}; "
            f"algorithms {', '.join(algos)}")


# --- Exact inputs and references (ranks' side) -------------------------------------

def _dtypes():
    import torch

    return [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
            torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool,
            torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64]


def _kind_of(dtype) -> str:
    import torch

    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return "float8"
    return "float" if dtype.is_floating_point else "int"


def reduce_ops_for(dtype) -> list:
    """The (op, dtype) pairs ringcoll supports (docs/SUPPORTED.md)."""
    return {"bool": ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
            "complex": ["SUM", "AVG", "PREMUL_SUM"],
            "float8": ["SUM", "MIN", "MAX"],
            "float": ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"],
            "int": ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"],
            }[_kind_of(dtype)]


def _hash(n, rank, salt):
    """A per-(element, rank, call) pseudo-random int64 in [0, 2^19): a block that lands
    in the wrong place shows, whatever its offset."""
    import torch

    i = torch.arange(n, dtype=torch.int64)
    h = (i * 2654435761 + (rank * 7919 + salt % 1000003 + 1) * 40503) & 0xFFFFFFFF
    return (h ^ (h >> 13)) & 0x7FFFF


def values(n, dtype, rank, salt, op=None, p=1):
    """Rank `rank`'s input of one call: small integers whose reduction over p <= 8 ranks
    is exact in `dtype` (`op` None: any values the dtype holds exactly, for calls that
    only move data)."""
    import torch

    kind = _kind_of(dtype)
    h = _hash(n, rank, salt)
    if kind == "bool":
        return (h & 1).bool()
    signed = dtype != torch.uint8
    if op is None:
        lo, hi = {"float8": (-7, 7), "int": (-100, 100) if signed else (0, 200)}.get(
            kind, (-256, 256))  # (bfloat16 holds the integers to 256)
        if dtype == torch.int8:
            lo, hi = -128, 127
    elif op == "PRODUCT":  # 2 at one rank per element, else 1, signs random: |prod| = 2
        two = (h % p) == rank
        v = 1 + two.to(torch.int64)
        if signed:
            v = v * (1 - 2 * ((h >> 7) & 1))
        return v.to(dtype)
    elif op in ("MIN", "MAX"):
        lo, hi = (-5, 5) if signed else (0, 10)
    elif op in ("BAND", "BOR", "BXOR"):
        lo, hi = 0, 63
    elif kind == "float8":
        lo, hi = -1, 1  # |sum| <= 8: exact in both float8 types
    elif op == "AVG":  # multiples of p: the mean is an integer
        lo, hi = ((-1, 1) if signed else (0, 1)) if dtype.itemsize == 1 else (-3, 3)
        return (p * ((h % (hi - lo + 1)) + lo)).to(dtype)
    else:  # SUM, PREMUL_SUM: |2 * sum| <= 48
        lo, hi = (-3, 3) if signed else (0, 3)
    v = (h % (hi - lo + 1)) + lo
    if kind == "complex":
        im = (_hash(n, rank, salt + 1) % (hi - lo + 1)) + lo
        return torch.complex(v.double(), im.double()).to(dtype)
    return v.to(dtype)


def reference(inputs, op, dtype, p):
    """The exact reduction of every rank's input, widened (float64, int64, complex128;
    bool stays bool)."""
    import torch

    kind = _kind_of(dtype)
    if kind == "bool":
        s = torch.stack(inputs)
        if op in ("SUM", "MAX", "BOR"):
            return s.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return s.all(0)
        return (s.to(torch.int64).sum(0) % 2).bool()  # BXOR
    wide = {"complex": torch.complex128, "int": torch.int64}.get(kind, torch.float64)
    w = torch.stack([t.to(wide) for t in inputs])
    if op == "SUM":
        return w.sum(0)
    if op == "AVG":
        return w.sum(0) / p if kind != "int" else torch.div(w.sum(0), p, rounding_mode="trunc")
    if op == "PREMUL_SUM":
        return (w * PREMUL_FACTOR).sum(0)
    if op == "PRODUCT":
        return w.prod(0)
    if op == "MIN":
        return w.min(0).values
    if op == "MAX":
        return w.max(0).values
    out = w[0].clone()
    for t in w[1:]:
        out = out & t if op == "BAND" else out | t if op == "BOR" else out ^ t
    return out


def differs(got, want) -> str | None:
    """None if `got` (in its dtype) equals `want` (exact, widened or not), else where."""
    import torch

    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if want.dtype == got.dtype and got.dtype.itemsize == 1:
        a, b = got.view(torch.uint8), want.view(torch.uint8)
    else:
        wide = want.dtype if want.dtype in (torch.float64, torch.int64, torch.complex128,
                                            torch.bool) else {
            "complex": torch.complex128, "int": torch.int64}.get(_kind_of(got.dtype),
                                                                  torch.float64)
        if got.dtype == torch.bool:
            wide = torch.bool
        a, b = got.to(wide), want.to(wide)
    if torch.equal(a, b):
        return None
    bad = (a != b).nonzero().flatten()
    i = int(bad[0])
    return (f"{bad.numel()} of {a.numel()} elements differ, first at {i}: got "
            f"{a[i].item()} want {b[i].item()}")


# --- The calls: one function per kind, drawn and issued the same way on every rank ---

@dataclass
class Spec:
    """One call as every rank of its group draws it."""
    kind: str
    group: int  # index into the plan's groups
    dtype: object
    n: int  # elements per block
    op: str = "SUM"
    root: int = 0  # group rank
    salt: int = 0
    sizes: list = field(default_factory=list)  # all_to_all / coalesced / p2p sizes
    shift: int = 1  # p2p_batch: rank r sends to r + shift
    equal: bool = False  # all_to_all_single: no split sizes (equal blocks)
    tag: int = 0
    pairs: dict = field(default_factory=dict)  # p2p_pairs: group rank -> its peer

    def name(self, seq=None):
        extra = f" {self.op}" if self.kind in REDUCING else ""
        extra += f" root {self.root}" if self.kind in ROOTED else ""
        return (f"{self.kind}({str(self.dtype).replace('torch.', '')}, {self.n} el{extra}) "
                f"on group {self.group}" + (f" call {seq}" if seq is not None else ""))


class FutureWork:
    """A Work's face on the Future that all_reduce_coalesced and all_gather_coalesced
    return when async (torch hands back work.get_future() there)."""

    def __init__(self, fut):
        self.fut = fut

    def is_completed(self):
        return self.fut.done()

    def wait(self, timeout=None):
        return self.fut.wait()

    def get_future(self):
        return self.fut


@dataclass
class Issued:
    spec: Spec
    works: list  # the Works to complete
    inputs: list  # what only the call reads (dropped in the 'drop_inputs' mode)
    outputs: list  # what the check reads
    check: object  # outputs -> None | what differs; None: nothing to check
    issued_at: float = field(default_factory=time.monotonic)


REDUCING = {"all_reduce", "reduce_scatter_tensor", "reduce_scatter", "reduce",
            "all_reduce_coalesced", "coalesced_reduce_scatter"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
P2P = {"p2p_batch", "p2p_pairs"}
# kind -> weight
KINDS = {"all_reduce": 6, "reduce_scatter_tensor": 3, "reduce_scatter": 1,
         "all_gather_into_tensor": 3, "all_gather": 2, "broadcast": 3, "reduce": 2,
         "gather": 1, "scatter": 1, "all_to_all_single": 2, "all_to_all": 1,
         "barrier": 1, "all_reduce_coalesced": 1, "all_gather_coalesced": 1,
         "coalesced_all_gather": 1, "coalesced_reduce_scatter": 1,
         "p2p_batch": 2, "p2p_pairs": 1}


def _count(rng, p, itemsize, max_bytes, blocks):
    """Elements per block: often an edge ({0, 1, p-1, p+1}), else log-uniform up to
    max_bytes over all `blocks` blocks of the call."""
    most = max(1, max_bytes // max(1, blocks * itemsize))
    if rng.random() < SMALL_SHARE:
        return min(most, rng.choice([0, 1, max(p - 1, 0), p + 1]))
    return min(most, int(2 ** rng.uniform(0, max(0.0, (most).bit_length() - 1))))


def draw_spec(rng, gi, group, max_bytes) -> Spec:
    p = len(group["ranks"])
    kinds = [k for k in KINDS if not (k in P2P and p == 1)
             and not (k == "p2p_pairs" and p % 2)]
    kind = rng.choices(kinds, [KINDS[k] for k in kinds])[0]
    dtype = rng.choice(_dtypes())
    s = Spec(kind=kind, group=gi, dtype=dtype, n=0, salt=rng.getrandbits(40),
             root=rng.randrange(p), tag=rng.randrange(4))
    if kind in REDUCING:
        s.op = rng.choice(reduce_ops_for(dtype))
    blocks = {"reduce_scatter_tensor": p, "reduce_scatter": p,
              "all_gather_into_tensor": p, "all_gather": p, "gather": p, "scatter": p,
              "all_to_all_single": p * p, "all_to_all": p * p,
              "coalesced_all_gather": 3 * p, "coalesced_reduce_scatter": 3 * p,
              "all_gather_coalesced": 3 * p, "all_reduce_coalesced": 3}.get(kind, 1)
    s.n = _count(rng, p, dtype.itemsize, max_bytes, blocks)
    if kind in ("all_to_all_single", "all_to_all"):  # sizes[j][k]: j sends k this many
        s.equal = kind == "all_to_all_single" and rng.random() < 0.4
        s.sizes = [[s.n if s.equal else rng.randint(0, s.n) for _ in range(p)]
                   for _ in range(p)]
    elif kind in ("all_reduce_coalesced", "all_gather_coalesced", "coalesced_all_gather",
                  "coalesced_reduce_scatter"):
        s.sizes = [rng.randint(0, s.n) for _ in range(rng.randint(1, 3))]
    elif kind == "p2p_batch":  # every rank sends to r+shift and receives from r-shift
        s.shift = rng.randrange(1, p)
        s.sizes = [rng.randint(0, s.n) for _ in range(p)]  # what rank j sends
    elif kind == "p2p_pairs":  # a perfect matching; the lower rank sends first
        order = list(range(p))
        rng.shuffle(order)
        s.sizes = [rng.randint(0, s.n) for _ in range(p)]
        for a, b in zip(order[::2], order[1::2]):
            s.pairs[a], s.pairs[b] = b, a
    return s


def issue(spec: Spec, pg, me: int, p: int) -> Issued:
    """Issues one call on `pg` (this rank is group rank `me` of p), async."""
    import torch
    import torch.distributed as dist

    k, dt, n, salt = spec.kind, spec.dtype, spec.n, spec.salt
    op = (dist._make_nccl_premul_sum(PREMUL_FACTOR) if spec.op == "PREMUL_SUM"
          else getattr(dist.ReduceOp, spec.op))
    mine = (lambda m, r=me, s=salt: values(m, dt, r, s, spec.op if k in REDUCING else None, p))
    of = (lambda m, r, s=salt: values(m, dt, r, s, spec.op if k in REDUCING else None, p))

    def ref(m, s=salt):
        return reference([of(m, r, s) for r in range(p)], spec.op, dt, p)

    def empty(m):
        return torch.full((m,), 3, dtype=torch.int64).to(dt)  # not a result: shows

    if k == "all_reduce":
        x = mine(n)
        w = dist.all_reduce(x, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], lambda o: differs(o[0], ref(n)))
    if k == "reduce_scatter_tensor":
        x, out = mine(p * n), empty(n)
        w = dist.reduce_scatter_tensor(out, x, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [x], [out],
                      lambda o: differs(o[0], ref(p * n)[me * n:(me + 1) * n]))
    if k == "reduce_scatter":
        xs = [mine(p * n)[j * n:(j + 1) * n].clone() for j in range(p)]
        out = empty(n)
        w = dist.reduce_scatter(out, xs, op=op, group=pg, async_op=True)
        return Issued(spec, [w], xs, [out],
                      lambda o: differs(o[0], ref(p * n)[me * n:(me + 1) * n]))
    if k == "all_gather_into_tensor":
        x, out = mine(n), empty(p * n)
        w = dist.all_gather_into_tensor(out, x, group=pg, async_op=True)
        return Issued(spec, [w], [x], [out],
                      lambda o: differs(o[0], torch.cat([of(n, r) for r in range(p)])))
    if k == "all_gather":
        x, outs = mine(n), [empty(n) for _ in range(p)]
        w = dist.all_gather(outs, x, group=pg, async_op=True)
        return Issued(spec, [w], [x], outs, lambda o: next(
            (f"block {r}: {d}" for r in range(p) if (d := differs(o[r], of(n, r)))), None))
    if k == "broadcast":
        x = mine(n) if me == spec.root else empty(n)
        w = dist.broadcast(x, group_src=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], lambda o: differs(o[0], of(n, spec.root)))
    if k == "reduce":
        x = mine(n)
        w = dist.reduce(x, group_dst=spec.root, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], (lambda o: differs(o[0], ref(n)))
                      if me == spec.root else None)
    if k == "gather":
        x = mine(n)
        outs = [empty(n) for _ in range(p)] if me == spec.root else None
        w = dist.gather(x, gather_list=outs, group_dst=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], [x], outs or [], (lambda o: next(
            (f"block {r}: {d}" for r in range(p) if (d := differs(o[r], of(n, r)))), None))
            if me == spec.root else None)
    if k == "scatter":
        xs = ([of(p * n, spec.root)[j * n:(j + 1) * n].clone() for j in range(p)]
              if me == spec.root else None)
        out = empty(n)
        w = dist.scatter(out, scatter_list=xs, group_src=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], xs or [], [out], lambda o: differs(
            o[0], of(p * n, spec.root)[me * n:(me + 1) * n]))
    if k == "all_to_all_single":
        S = spec.sizes  # S[j][k]: what rank j sends rank k
        x = mine(sum(S[me]))
        out = empty(sum(S[j][me] for j in range(p)))
        splits = (dict(output_split_sizes=[S[j][me] for j in range(p)],
                       input_split_sizes=list(S[me])) if not spec.equal else {})
        w = dist.all_to_all_single(out, x, group=pg, async_op=True, **splits)

        def want():
            return torch.cat([of(sum(S[j]), j)[sum(S[j][:me]):sum(S[j][:me + 1])]
                              for j in range(p)])
        return Issued(spec, [w], [x], [out], lambda o: differs(o[0], want()))
    if k == "all_to_all":
        S = spec.sizes
        x = mine(sum(S[me]))
        xs = [x[sum(S[me][:j]):sum(S[me][:j + 1])].clone() for j in range(p)]
        outs = [empty(S[j][me]) for j in range(p)]
        w = dist.all_to_all(outs, xs, group=pg, async_op=True)
        return Issued(spec, [w], xs, outs, lambda o: next(
            (f"block {j}: {d}" for j in range(p) if (d := differs(
                o[j], of(sum(S[j]), j)[sum(S[j][:me]):sum(S[j][:me + 1])]))), None))
    if k == "barrier":
        return Issued(spec, [dist.barrier(group=pg, async_op=True)], [], [], None)
    if k == "all_reduce_coalesced":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        w = FutureWork(dist.all_reduce_coalesced(xs, op=op, group=pg, async_op=True))
        return Issued(spec, [w], [], xs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes)
             if (d := differs(o[i], ref(m, s=salt + 17 * i)))), None))
    if k == "all_gather_coalesced":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [[empty(m) for m in spec.sizes] for _ in range(p)]
        w = FutureWork(dist.all_gather_coalesced(outs, xs, group=pg, async_op=True))
        return Issued(spec, [w], xs, [t for ts in outs for t in ts], lambda o: next(
            (f"rank {r} tensor {i}: {d}" for r in range(p) for i, m in enumerate(spec.sizes)
             if (d := differs(o[r * len(spec.sizes) + i], of(m, r, salt + 17 * i)))), None))
    if k == "coalesced_all_gather":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [empty(p * m) for m in spec.sizes]
        with dist._coalescing_manager(group=pg, async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x, group=pg)
        return Issued(spec, list(cm.works), xs, outs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes) if (d := differs(
                o[i], torch.cat([of(m, r, salt + 17 * i) for r in range(p)])))), None))
    if k == "coalesced_reduce_scatter":
        xs = [mine(p * m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [empty(m) for m in spec.sizes]
        with dist._coalescing_manager(group=pg, async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.reduce_scatter_tensor(o, x, op=op, group=pg)
        return Issued(spec, list(cm.works), xs, outs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes) if (d := differs(
                o[i], ref(p * m, s=salt + 17 * i)[me * m:(me + 1) * m]))), None))
    if k == "p2p_batch":
        to, frm = (me + spec.shift) % p, (me - spec.shift) % p
        x, out = mine(spec.sizes[me]), empty(spec.sizes[frm])
        ops = [dist.P2POp(dist.isend, x, group_peer=to, group=pg, tag=spec.tag),
               dist.P2POp(dist.irecv, out, group_peer=frm, group=pg, tag=spec.tag)]
        if (me // spec.shift) % 2:  # the order within a batch must not matter
            ops.reverse()
        ws = dist.batch_isend_irecv(ops)
        return Issued(spec, list(ws), [x], [out],
                      lambda o: differs(o[0], of(spec.sizes[frm], frm)))
    if k == "p2p_pairs":
        peer = spec.pairs[me]
        x, out = mine(spec.sizes[me]), empty(spec.sizes[peer])

        def send():
            return dist.isend(x, group_dst=peer, group=pg, tag=spec.tag)

        def recv():
            return dist.irecv(out, group_src=peer, group=pg, tag=spec.tag)
        ws = [send(), recv()] if me < peer else [recv(), send()]
        return Issued(spec, ws, [x], [out], lambda o: differs(o[0], of(spec.sizes[peer], peer)))
    raise ValueError(f"soak: no call kind {k!r}")


# --- A rank: its threads, their windows, chains and the event -----------------------

def classify(e: BaseException) -> str:
    """"clear": the message names the call (op, sequence number, this rank) and a cause
    (a peer other than this rank, abort(), a shutdown), or is c10d's refusal of a
    group that was destroyed; else "unclear" ("transfers aborted", waiting for oneself)."""
    text = str(e)
    if CLEAR_GROUP.search(text):
        return "clear"
    call = CLEAR_CALL.search(text)
    if not call:
        return "unclear"
    me = re.search(r"rank (\d+) of", call.group(0)).group(1)
    rest = text[call.end():]
    peers = {m for m in re.findall(r"rank (\d+)", rest)}
    if peers - {me} or CLEAR_STOP.search(rest):
        return "clear"
    return "unclear"


class Stats:
    """One rank's counts and samples; a lock only around the counters (never held
    across a call into torch)."""

    def __init__(self, beat, issued, rank, event_at=None):
        self.lock = threading.Lock()
        self.beat, self.issued, self.rank = beat, issued, rank
        self.event_at, self.event_due = event_at, threading.Event()
        self.c = {"issued": 0, "completed": 0, "checked": 0, "unchecked": 0, "wrong": 0,
                  "errors_clear": 0, "errors_unclear": 0, "errors_late": 0, "stuck": 0,
                  "chains": 0}
        self.samples = {k: [] for k in ("wrong", "errors_clear", "errors_unclear",
                                        "errors_late", "stuck")}

    def add(self, what, sample=None, n=1):
        with self.lock:
            self.c[what] += n
            if sample is not None and len(self.samples[what]) < ERROR_SAMPLES:
                self.samples[what].append(sample)
            issued = self.c["issued"]
            self.beat[self.rank] += 1  # the watchdog's progress (this rank's slot)
        if what == "issued":
            self.issued[self.rank] = issued  # the harness kills on it
            if self.event_at is not None and issued >= self.event_at:
                self.event_due.set()


class PollTimeout(Exception):
    pass


class RankThread:
    """Thread t of a rank: draws its calls from the shared seed, completes each window
    its own way (the rank's seed)."""

    def __init__(self, t, plan, rank, groups, stats):
        self.t, self.plan, self.rank, self.stats = t, plan, rank, stats
        self.shared = random.Random(plan["thread_seeds"][t])
        self.local = random.Random(plan["thread_seeds"][t] * 31 + rank + 1)
        self.groups = groups  # index -> (spec dict, pg or None if not a member, me)
        self.mine = [i for i, g in enumerate(plan["groups"]) if g["thread"] == t]
        self.chain_group = next(i for i in self.mine if plan["groups"][i]["role"] == "chain")
        self.broken = False
        self.inject_wrong = "wrong" in plan["inject"] and rank == 0 and t == 0
        self.chain_done = threading.Event()
        self.chain_done.set()
        self.limit = plan["pg_timeout_s"] + 10  # a Work polled longer than this is stuck
        self.modes = dict(MODES)

    # Outcomes
    def failed(self, spec, seq, e, where, issued_at=None):
        kind = "stuck" if isinstance(e, PollTimeout) else (
            "errors_" + classify(e))
        sample = {"thread": self.t, "where": where,
                  "call": spec.name(seq) if spec else f"call {seq}",
                  "error": f"{type(e).__name__}: {e}"[:600]}
        self.stats.add(kind, sample)
        waited = time.monotonic() - issued_at if issued_at else 0.0
        if waited > self.plan["pg_timeout_s"] + LATE_S:
            self.stats.add("errors_late", {**sample, "seconds": round(waited, 1)})
        self.broken = True

    def checked(self, it, seq, outputs):
        self.record(it, seq, it.check(outputs) if it.check else None)

    def poll(self, w):
        deadline, spins = time.monotonic() + self.limit, 0
        while not w.is_completed():
            spins += 1
            if spins % 4096 == 0 and time.monotonic() > deadline:
                raise PollTimeout(f"is_completed() still False {self.limit:.0f} s after "
                                  "polling began (the group's timeout passed)")

    # Issuing
    def issue(self, spec, seq):
        _, pg, me = self.groups[spec.group]
        self.stats.add("issued")
        return issue(spec, pg, me, len(self.plan["groups"][spec.group]["ranks"]))

    def run(self):
        per_thread = max(1, self.plan["round_ops"] // self.plan["threads"])
        seq = 0
        while seq < per_thread:
            window = []
            for _ in range(self.shared.randint(1, self.plan["window"])):
                gi = self.shared.choice([i for i in self.mine if i != self.chain_group])
                spec = draw_spec(self.shared, gi, self.plan["groups"][gi],
                                 self.plan["max_bytes"])
                seq += 1
                window.append((seq, spec))
            chain_seed = self.shared.getrandbits(62) if self.shared.random() < CHAIN_SHARE \
                else None
            if self.broken:
                continue  # keep drawing (same sequence as the others); issue nothing
            issued = []
            for s, spec in window:
                if self.groups[spec.group][1] is None:
                    continue  # not a member of that group
                try:
                    issued.append((s, self.issue(spec, s)))
                except Exception as e:  # noqa: BLE001 - counted
                    self.failed(spec, s, e, "issue")
                    break
            if chain_seed is not None and not self.broken and \
                    self.groups[self.chain_group][1] is not None:  # (its creation failed)
                self.chain_done.wait()  # one chain at a time: its group's order is fixed
                # Started by the first call's callback; at once where this rank issued
                # none (not a member of the window's group): every rank starts it.
                self.start_chain(issued[0][1] if issued else None, chain_seed)
            self.complete(issued, self.local.choices(list(self.modes),
                                                     list(self.modes.values()))[0])
            if "hang" in self.plan["inject"] and self.rank == 0 and self.t == 0:
                threading.Event().wait()  # the harness's own test: a stall
            if ("crash" in self.plan["inject"] and self.rank == self.plan["p"] - 1
                    and seq >= 10):
                os.kill(os.getpid(), signal.SIGSEGV)  # ... and a rank's death
        self.chain_done.wait()

    # Completing a window
    def complete(self, issued, mode):
        if mode == "drop_all":
            self.stats.add("unchecked", n=len(issued))
            issued.clear()
            return
        if mode == "drop_inputs":
            for _, it in issued:
                it.inputs = None
        order = list(issued)
        if mode == "reverse":
            order.reverse()
        elif mode == "shuffle":
            self.local.shuffle(order)
        if mode == "poll_all":
            try:
                for _, it in order:
                    for w in it.works:
                        self.poll(w)
            except PollTimeout as e:
                self.failed(order[0][1].spec, order[0][0], e, "poll_all",
                            order[0][1].issued_at)
                return
        for seq, it in order:
            self.finish(seq, it, mode)

    def finish(self, seq, it, mode):
        try:
            if mode in ("poll", "poll_all"):
                for w in it.works:
                    self.poll(w)
            if mode == "future":
                for w in it.works:
                    w.get_future().wait()
            elif mode == "then":  # the check runs in the callback, on the backend's thread
                import torch

                def check(f, it=it):
                    for g in f.value():
                        g.wait()  # raises the call's error
                    return it.check(it.outputs) if it.check else None
                fut = torch.futures.collect_all([w.get_future() for w in it.works])
                self.record(it, seq, fut.then(check).wait())
                return
            elif mode == "wait_timeout":
                for w in it.works:
                    w.wait(timedelta(seconds=self.plan["pg_timeout_s"] + 5))
            else:
                for w in it.works:
                    w.wait()
        except Exception as e:  # noqa: BLE001 - counted
            self.failed(it.spec, seq, e, mode, it.issued_at)
            return
        self.checked(it, seq, it.outputs)

    def record(self, it, seq, problem):
        """A completed call whose check (None: none) already ran."""
        self.stats.add("completed")
        if it.check is None:
            return
        if self.inject_wrong:  # the first checked result of rank 0
            self.inject_wrong, problem = False, "injected by --inject wrong"
        self.stats.add("checked")
        if problem:
            self.stats.add("wrong", {"thread": self.t, "call": it.spec.name(seq),
                                     "spec": {k: str(v) for k, v in vars(it.spec).items()},
                                     "differs": problem})

    # Chains: each call's callback issues the next (on the chain group, from whatever
    # thread completes the future: the backend's)
    def start_chain(self, trigger, seed):
        rng = random.Random(seed)  # what the chain issues: alike on every rank
        left = [rng.randint(*CHAIN_LEN)]
        # How this rank chains: each call from the last one's callback, or (PowerSGD's
        # DDP hook) the rest issued and waited for inside the first one's callback, on
        # the thread that completed it (the chain group's own).
        inside = [random.Random(seed * 31 + self.rank).random() < WAIT_INSIDE_SHARE,
                  False]
        self.chain_done.clear()
        self.stats.add("chains")
        gi = self.chain_group

        def step(seq):
            import torch

            spec = None
            try:
                spec = draw_spec(rng, gi, self.plan["groups"][gi], self.plan["max_bytes"])
                it = self.issue(spec, seq)
                fut = torch.futures.collect_all([w.get_future() for w in it.works])
            except Exception as e:  # noqa: BLE001 - counted
                self.failed(spec, seq, e, "chain issue")
                self.chain_done.set()
                return
            if inside[1]:  # in the first call's callback
                try:
                    # collect_all's future fails as soon as one of its futures does
                    # (a peer was killed): that is this call's outcome.
                    results = fut.wait()
                except Exception as e:  # noqa: BLE001 - counted
                    self.failed(spec, seq, e, "chain wait", it.issued_at)
                    self.chain_done.set()
                    return
                done(results, it, seq, waited=True)
            else:
                inside[1] = inside[0]
                fut.then(lambda f, it=it, seq=seq: done(f, it, seq))

        def done(f, it, seq, waited=False):
            try:
                for g in (f if waited else f.value()):
                    g.wait()
            except Exception as e:  # noqa: BLE001 - counted
                self.failed(it.spec, seq, e, "chain callback", it.issued_at)
                self.chain_done.set()
                return
            try:
                self.checked(it, seq, it.outputs)
            except Exception as e:  # noqa: BLE001 - a check that raised is a harness bug
                self.stats.add("errors_unclear", {"thread": self.t, "call": it.spec.name(seq),
                                                  "error": "check raised: " + repr(e)})
            left[0] -= 1
            if left[0] and not self.broken:
                step(-left[0])
            else:
                self.chain_done.set()

        import torch

        if trigger is None:
            step(-left[0])
            return
        try:
            fut = torch.futures.collect_all([w.get_future() for w in trigger.works])
        except Exception as e:  # noqa: BLE001 - counted
            self.failed(trigger.spec, 0, e, "chain trigger")
            self.chain_done.set()
            return
        fut.then(lambda f: step(-left[0]))


def _event(plan, rank, groups, stats, done, log):
    """This rank's abort or destroy of a group, from its own thread, once this rank
    has issued the plan's number of calls (not after the round's threads are done)."""
    import torch
    import torch.distributed as dist

    ev = plan["event"]
    while not stats.event_due.wait(0.05):
        if done.is_set():
            return
    _, pg, _ = groups[ev["group"]]
    if pg is None:
        return
    log["event_fired_at_op"] = ev["at_op"]
    try:
        if ev["how"] == "pg.abort":
            pg.abort()
        elif ev["how"] == "backend.abort":
            pg._get_backend(torch.device("cpu")).abort()
        elif ev["how"] == "_abort_process_group":
            dist.distributed_c10d._abort_process_group(pg)
        else:
            dist.destroy_process_group(pg)
    except Exception as e:  # noqa: BLE001 - reported
        log["event_error"] = f"{type(e).__name__}: {e}"


def _rank_main(rank, plan, tmp, conn, beat, issued, reported):
    """A rank of the round: the groups, the threads, the event; reports its counts,
    then destroys the groups and exits."""
    import faulthandler

    log = open(os.path.join(tmp, f"rank{rank}.log"), "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    stacks = open(os.path.join(tmp, f"stacks{rank}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    fatal = open(os.path.join(tmp, f"fatal{rank}.txt"), "w")
    faulthandler.enable(file=fatal, all_threads=True)
    os.environ.update({"RINGCOLL_TRANSPORT": plan["transport"],
                       "RINGCOLL_ALGO_MODULES": PYRING, "GLOO_SOCKET_IFNAME": "lo",
                       "OMP_NUM_THREADS": "1"})
    world_algo = plan["groups"][0]["algo"]
    if world_algo is None:
        os.environ.pop("RINGCOLL_ALGO", None)
    else:
        os.environ["RINGCOLL_ALGO"] = world_algo
    import warnings

    import torch
    import torch.distributed as dist

    import ringcoll

    warnings.filterwarnings("ignore")  # torch's deprecation notes, once per call
    torch.set_num_threads(1)
    p = plan["p"]
    ev = plan["event"]
    stats = Stats(beat, issued, rank, ev["at_op"] if ev and ev["rank"] == rank else None)
    info = {}
    timeout = timedelta(seconds=plan["pg_timeout_s"])
    dist.init_process_group("ringcoll", init_method=f"file://{tmp}/store", rank=rank,
                            world_size=p, timeout=timeout)
    os.environ.pop("RINGCOLL_ALGO", None)  # the other groups: Options(algo=...) or the default
    groups = {}
    for i, g in enumerate(plan["groups"]):
        if g["world"]:
            pg = dist.group.WORLD
        else:
            opts = ringcoll.Options(algo=g["algo"]) if g["algo"] else None
            try:
                pg = dist.new_group(g["ranks"], timeout=timeout, backend="ringcoll",
                                    pg_options=opts)
            except Exception as e:  # noqa: BLE001 - counted; its thread skips it
                stats.add("errors_unclear" if classify(e) == "unclear" else "errors_clear",
                          {"call": f"new_group {i} ({g['algo']}, ranks {g['ranks']})",
                           "error": f"{type(e).__name__}: {e}"[:600]})
                pg = None
        member = rank in g["ranks"] and pg is not None
        groups[i] = (g, pg if member else None, g["ranks"].index(rank) if member else None)
    conn.send(("ready", None))
    done = threading.Event()
    event = (threading.Thread(target=_event, args=(plan, rank, groups, stats, done, info),
                              name="soak-event", daemon=True)
             if ev and ev["kind"] != "kill" and ev["rank"] == rank else None)
    if event:
        event.start()
    workers = [RankThread(t, plan, rank, groups, stats) for t in range(plan["threads"])]

    def guarded(w):
        try:
            w.run()
        except BaseException:  # noqa: BLE001 - a harness bug: counted, shown
            stats.add("errors_unclear", {"thread": w.t, "call": "(the harness)",
                                         "error": traceback.format_exc()[-1500:]})
    threads = [threading.Thread(target=guarded, args=(w,), name=f"soak-{w.t}")
               for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done.set()
    if event:
        event.join()
    conn.send(("report", {"counts": stats.c, "samples": stats.samples, **info}))
    # No rank tears down before every rank's threads are done, as a program ends
    # with a barrier: a call this rank dropped may still be in flight, and
    # destroy_process_group lets it finish only while its peers make progress (it
    # fails one that waited 2 s: docs/FAILURES.md); peers still busy with other
    # groups' calls on a loaded machine took longer, and the error in a round with
    # no event counted as uncaused. A round with an event (a killed rank never
    # reports) waits at most the group's timeout.
    reported[rank] = 1
    deadline = time.monotonic() + plan["pg_timeout_s"]
    while not all(reported) and (not ev or time.monotonic() < deadline):
        time.sleep(0.01)
    if dist.is_initialized():  # (_abort_process_group of the default group ends it)
        dist.destroy_process_group()
    conn.send(("exited", None))
    conn.close()


# --- The harness: rounds, the watchdog, the summary ---------------------------------

def _stacks_of(procs, live, tmp):
    """Every live rank's Python stacks (faulthandler on SIGUSR1) and native stacks
    (gdb, every rank at once)."""
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, ROOT)
    from tests.mp import _native_stacks, _threads_of  # the kernel's view; gdb's

    for r in live:
        try:
            os.kill(procs[r].pid, signal.SIGUSR1)
        except OSError:
            pass
    time.sleep(1.0)
    with ThreadPoolExecutor(max(1, len(live))) as pool:
        native = list(pool.map(lambda r: _native_stacks(procs[r].pid, frames=NATIVE_FRAMES,
                                                        libs=NATIVE_LIBS), live))
    out = []
    for r, nat in zip(live, native):
        try:
            with open(os.path.join(tmp, f"stacks{r}.txt")) as f:
                py = f.read().strip()
        except OSError:
            py = "(none)"
        out.append(f"--- rank {r} (pid {procs[r].pid}): Python stacks ---\n{py}\n"
                   f"--- rank {r}: threads and native stacks ---\n"
                   f"{_threads_of(procs[r].pid, native=False)}{nat}")
    return "\n".join(out)


def _shm_entries() -> set:
    try:
        return {e for e in os.listdir("/dev/shm") if "ringcoll" in e}
    except OSError:
        return set()


def _tail(path, lines=30):
    try:
        with open(path) as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def run_round(knobs: Knobs, plan: dict, ctx) -> dict:
    """One world: starts it, watches it, returns what happened."""
    p = plan["p"]
    res = {"round": plan["round"], "plan": describe_plan(plan), "ranks": {},
           "hang": None, "crashes": [], "killed": None, "seconds": 0.0, "ops": 0}
    t0 = time.monotonic()
    shm_before = _shm_entries()
    with tempfile.TemporaryDirectory(prefix="ringcoll-soak-") as tmp:
        beat = ctx.Array("q", p, lock=False)  # each rank's progress: the watchdog's
        issued = ctx.Array("q", p, lock=False)  # each rank's calls issued: when to kill
        reported = ctx.Array("q", p, lock=False)  # ranks whose threads are done
        pipes = [ctx.Pipe(duplex=False) for _ in range(p)]
        procs = [ctx.Process(target=_rank_main, args=(r, plan, tmp, pipes[r][1], beat,
                                                               issued, reported),
                             daemon=True) for r in range(p)]
        for pr in procs:
            pr.start()
        for _, w in pipes:
            w.close()
        readers = {pipes[r][0]: r for r in range(p)}
        state = {r: "starting" for r in range(p)}
        last_beats, last_progress = list(beat), time.monotonic()
        ev = plan["event"]
        while readers:
            for conn in mpc.wait(list(readers), timeout=0.2):
                r = readers[conn]
                try:
                    what, payload = conn.recv()
                except (EOFError, OSError):
                    del readers[conn]
                    procs[r].join(timeout=5)
                    if state[r] != "exited" and r != res["killed"]:
                        code = procs[r].exitcode
                        res["crashes"].append({
                            "rank": r, "state": state[r], "exitcode": code,
                            "fatal": _tail(os.path.join(tmp, f"fatal{r}.txt"), 60),
                            "log": _tail(os.path.join(tmp, f"rank{r}.log"))})
                    continue
                last_progress = time.monotonic()
                state[r] = what
                if what == "report":
                    res["ranks"][r] = payload
            now = time.monotonic()
            if list(beat) != last_beats:
                last_beats, last_progress = list(beat), now
            if (ev and ev["kind"] == "kill" and res["killed"] is None
                    and issued[ev["rank"]] >= ev["at_op"] and state[ev["rank"]] == "ready"):
                os.kill(procs[ev["rank"]].pid, signal.SIGKILL)
                res["killed"] = ev["rank"]
            if now - last_progress > knobs.stall_s:
                live = [r for r in range(p) if procs[r].is_alive()]
                res["hang"] = {
                    "stalled_s": round(now - last_progress, 1),
                    "states": {r: state[r] for r in range(p)},
                    "stacks": _stacks_of(procs, live, tmp),
                    "logs": {r: _tail(os.path.join(tmp, f"rank{r}.log")) for r in range(p)}}
                break
        for pr in procs:
            pr.join(timeout=0 if res["hang"] else 10)
            if pr.is_alive():
                if not res["hang"]:  # reported, but did not exit: a teardown hang
                    res["hang"] = {"stalled_s": 10, "states": {r: state[r] for r in range(p)},
                                   "stacks": _stacks_of(procs, [procs.index(pr)], tmp),
                                   "logs": {}}
                pr.kill()
                pr.join()
        # Every rank's calls, those that never reported (killed, crashed, hung) too.
        res["ops"] = sum(issued)
    # Segments are unlinked once mapped, so nothing stays in /dev/shm, a killed rank's
    # included. (Another program's entries come and go: only lasting ones count.)
    left = _shm_entries() - shm_before
    if left:
        time.sleep(1.0)
        left &= _shm_entries()
    res["shm_left"] = sorted(left)
    res["seconds"] = round(time.monotonic() - t0, 2)
    return res


def _versions() -> dict:
    import torch

    import ringcoll

    try:
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"torch": torch.__version__, "ringcoll_commit": commit,
            "ringcoll_build": {k: str(v) for k, v in ringcoll.build_info().items()},
            "algorithms": list(ringcoll.algorithms()), "python": platform.python_version()}


def _machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu": model, "load_at_start": list(os.getloadavg())}


def tally(rounds) -> dict:
    """Totals over rounds, and per transport."""
    def zero():
        return {"rounds": 0, "ops": 0, "checked": 0, "unchecked": 0, "wrong": 0, "hangs": 0,
                "crashes": 0, "stuck": 0, "errors_clear": 0, "errors_unclear": 0,
                "errors_late": 0, "shm_left": 0,
                "errors_uncaused": 0, "events": 0, "events_fired": 0, "chains": 0,
                "seconds": 0.0}
    out = {"all": zero()}
    for rr in rounds:
        for key in ("all", rr["transport"]):
            t = out.setdefault(key, zero())
            t["rounds"] += 1
            t["ops"] += rr["ops"]
            t["seconds"] = round(t["seconds"] + rr["seconds"], 1)
            t["hangs"] += rr["hang"] is not None
            t["crashes"] += len(rr["crashes"])
            t["shm_left"] += bool(rr.get("shm_left"))
            t["events"] += rr["event"] is not None
            t["events_fired"] += rr["killed"] is not None or any(
                "event_fired_at_op" in rep for rep in rr["ranks"].values())
            for rep in rr["ranks"].values():
                c = rep["counts"]
                for k in ("checked", "unchecked", "wrong", "stuck", "errors_clear",
                          "errors_unclear", "errors_late", "chains"):
                    t[k] += c[k]
                if rr["event"] is None:
                    t["errors_uncaused"] += c["errors_clear"] + c["errors_unclear"]
    return out


def failures_of(rr) -> list:
    """What in a round counts against ringcoll."""
    bad = []
    if rr["hang"]:
        bad.append("hang")
    if rr["crashes"]:
        bad.append("crash")
    if rr.get("shm_left"):
        bad.append("shm_left")
    for rep in rr["ranks"].values():
        c = rep["counts"]
        for k in ("wrong", "errors_unclear", "errors_late", "stuck"):
            if c[k]:
                bad.append(k)
        if rr["event"] is None and c["errors_clear"]:
            bad.append("errors_uncaused")
        if rep.get("event_error"):
            bad.append("event_error")
    return sorted(set(bad))


def main(argv=None) -> int:
    knobs = parse_args(sys.argv[1:] if argv is None else argv)
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "ringcoll"])
    started = time.monotonic()
    versions, machine = _versions(), _machine()
    print(f"soak: seed {knobs.seed}, transports {','.join(knobs.transports)}, nproc "
          f"{','.join(map(str, knobs.nproc))}, {knobs.threads} threads, max "
          f"{knobs.max_bytes} B, events {'on' if knobs.events else 'off'}, budget "
          f"{knobs.ops or '-'} ops / {knobs.seconds or '-'} s; torch {versions['torch']}, "
          f"ringcoll {versions['ringcoll_commit']}", flush=True)
    rounds, total_ops, index = [], 0, 0
    indices = [knobs.only_round] if knobs.only_round is not None else None
    while True:
        if indices is not None:
            if not indices:
                break
            index = indices.pop()
        elif ((knobs.ops and total_ops >= knobs.ops)
              or (knobs.seconds and time.monotonic() - started >= knobs.seconds)):
            break
        plan = plan_round(knobs, index)
        rr = run_round(knobs, plan, ctx)
        rr.update({"transport": plan["transport"], "p": plan["p"], "event": plan["event"]})
        rounds.append(rr)
        ops = rr["ops"]
        total_ops += ops
        bad = failures_of(rr)
        errs = sum(rep["counts"]["errors_clear"] + rep["counts"]["errors_unclear"]
                   for rep in rr["ranks"].values())
        print(f"round {index}: {rr['plan']}: {ops} ops, {errs} errors, "
              f"{rr['seconds']} s{'  FAILED: ' + ', '.join(bad) if bad else ''}", flush=True)
        if bad:
            rr["rerun"] = f"{command} --only-round {index}" if knobs.only_round is None \
                else command
            _print_failure(rr)
        index += 1
    totals = tally(rounds)
    summary = {"command": command, "seed": knobs.seed, "knobs": asdict(knobs),
               "machine": machine, "versions": versions,
               "seconds": round(time.monotonic() - started, 1), "totals": totals,
               "failed_rounds": [r for r in rounds if failures_of(r)],
               "clear_error_samples": [s for r in rounds for rep in r["ranks"].values()
                                       for s in rep["samples"]["errors_clear"][:2]][:40]}
    a = totals["all"]
    print(f"\nsoak summary ({summary['seconds']} s, {a['rounds']} rounds):")
    cols = ["rounds", "ops", "checked", "unchecked", "wrong", "hangs", "crashes", "stuck",
            "errors_clear", "errors_unclear", "errors_uncaused", "errors_late", "shm_left",
            "events", "events_fired", "chains"]
    width = {c: max(len(c), 7) + 2 for c in cols}
    print("  " + f"{'transport':<10}" + "".join(f"{c:>{width[c]}}" for c in cols))
    for key, t in totals.items():
        print("  " + f"{key:<10}" + "".join(f"{t[c]:>{width[c]}}" for c in cols))
    if knobs.out:
        os.makedirs(os.path.dirname(os.path.abspath(knobs.out)), exist_ok=True)
        with open(knobs.out, "w") as f:
            json.dump(summary, f, indent=1, default=str)
        print(f"  written to {knobs.out}")
    ok = not summary["failed_rounds"]
    print("soak: " + ("PASSED" if ok else f"FAILED ({len(summary['failed_rounds'])} rounds)"))
    return 0 if ok else 1


def _print_failure(rr):
    print(f"  rerun: {rr['rerun']}")
    for r, rep in sorted(rr["ranks"].items()):
        for k in ("wrong", "errors_unclear", "errors_late", "stuck"):
            for s in rep["samples"][k][:3]:
                print(f"  rank {r} {k}: {json.dumps(s, default=str)[:800]}")
        if rr["event"] is None:
            for s in rep["samples"]["errors_clear"][:3]:
                print(f"  rank {r} error without an event: {json.dumps(s)[:800]}")
        if rep.get("event_error"):
            print(f"  rank {r} event raised: {rep['event_error']}")
    if rr.get("shm_left"):
        print(f"  left in /dev/shm: {rr['shm_left']}")
    for c in rr["crashes"]:
        print(f"  rank {c['rank']} died (exit code {c['exitcode']}, after '{c['state']}'):\n"
              f"{c['fatal']}\n{c['log']}")
    if rr["hang"]:
        h = rr["hang"]
        print(f"  HANG: no progress for {h['stalled_s']} s; rank states {h['states']}\n"
              f"{h['stacks']}")
        for r, t in h["logs"].items():
            if t.strip():
                print(f"  --- rank {r}'s output ---\n{t}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
