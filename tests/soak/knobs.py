"""The soak's knobs, in one place, and its command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

TRANSPORTS = ("shm", "gloo", "stream", "auto")


@dataclass
class Knobs:
    ops: int = 0  # stop starting rounds after this many ringcoll calls (0: --seconds alone)
    seconds: float = 120.0  # ... or after this many seconds (0: --ops alone)
    seed: int = 1
    # RINGCOLL_TRANSPORT: every round's program runs on each of these (and, when it
    # is judged, on gloo first). auto is shm within a host: the same links, its own
    # selection.
    transports: tuple = ("shm", "gloo", "stream")
    nproc: tuple = (2, 3, 4)  # world sizes, drawn per round
    threads: int = 3  # Python threads per rank, each with its own groups
    max_bytes: int = 4 << 20  # largest buffer of one call (all of its blocks)
    events: bool = True  # rounds with an abort / destroy / kill by one rank
    event_share: float = 0.25  # share of rounds with such an event
    round_ops: int = 240  # calls drawn per round and rank, over its threads
    window: int = 6  # calls issued before a thread completes them, at most
    pg_timeout_s: float = 15.0  # every group's timeout: the bound on a survivor's error
    stall_s: float = 45.0  # no progress this long (> pg_timeout_s) is a hang
    only_round: int | None = None  # run this round alone (a failure's rerun)
    out: str | None = None  # the JSON summary's path
    inject: tuple = ()  # tests of the harness itself: hang, wrong, crash, diverge (round 0)
    strict: bool = False  # an open bug's divergence (judge.OPEN) fails the run too


INJECTIONS = ("hang", "wrong", "crash", "diverge")


def parse_args(argv, description="") -> Knobs:
    d = Knobs()
    ap = argparse.ArgumentParser(description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=d.ops,
                    help="ringcoll calls to run, over all ranks and transports (0: none)")
    ap.add_argument("--seconds", type=float, default=d.seconds, help="time budget (0: none)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--transports", default=",".join(d.transports),
                    help=f"RINGCOLL_TRANSPORT values, of {', '.join(TRANSPORTS)}")
    ap.add_argument("--nproc", default=",".join(map(str, d.nproc)), help="world sizes, 1-8")
    ap.add_argument("--threads", type=int, default=d.threads)
    ap.add_argument("--max-bytes", type=int, default=d.max_bytes)
    ap.add_argument("--events", choices=("on", "off"), default="on")
    ap.add_argument("--event-share", type=float, default=d.event_share)
    ap.add_argument("--round-ops", type=int, default=d.round_ops)
    ap.add_argument("--pg-timeout-s", type=float, default=d.pg_timeout_s)
    ap.add_argument("--stall-s", type=float, default=d.stall_s)
    ap.add_argument("--only-round", type=int, default=None)
    ap.add_argument("--out", default=None, help="write the summary as JSON here")
    ap.add_argument("--strict", action="store_true",
                    help="fail on the open bugs docs/TESTS.md lists, too")
    ap.add_argument("--inject", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    k = Knobs(ops=a.ops, seconds=a.seconds, seed=a.seed,
              transports=tuple(t for t in a.transports.split(",") if t),
              nproc=tuple(int(n) for n in a.nproc.split(",")), threads=a.threads,
              max_bytes=a.max_bytes, events=a.events == "on", event_share=a.event_share,
              round_ops=a.round_ops, pg_timeout_s=a.pg_timeout_s, stall_s=a.stall_s,
              only_round=a.only_round, out=a.out,
              inject=tuple(x for x in a.inject.split(",") if x), strict=a.strict)
    for t in k.transports:
        if t not in TRANSPORTS:
            ap.error(f"--transports: {t!r} is not one of {', '.join(TRANSPORTS)}")
    if not k.transports:
        ap.error("--transports: name at least one")
    if not all(1 <= n <= 8 for n in k.nproc):
        ap.error(f"--nproc: {a.nproc!r}: world sizes from 1 to 8 (the exact inputs' bound)")
    if k.threads < 1:
        ap.error("--threads: at least 1")
    if k.stall_s <= k.pg_timeout_s:
        ap.error(f"--stall-s {k.stall_s} must exceed --pg-timeout-s {k.pg_timeout_s}: a "
                 "survivor may rightly wait that long for its error")
    for x in k.inject:
        if x not in INJECTIONS:
            ap.error(f"--inject: {x!r} is not one of {', '.join(INJECTIONS)}")
    if not (k.ops or k.seconds or k.only_round is not None):
        ap.error("give --ops or --seconds a budget")
    return k
