"""Soak: ringcoll under what torch programs do to a backend, randomized, for as long
as asked, judged by torch's own gloo backend running the same programs.

    python tests/soak/soak.py                                 # 2 minutes, three transports
    python tests/soak/soak.py --ops 100000 --seconds 0 --out benchmarks/results/soak.json
    python tests/soak/soak.py --seed 7 --only-round 12        # one round of a run, again

Each round draws a program from (--seed, its number): a world of ranks (real
processes, 2-4 by default), --threads Python threads per rank, each with process
groups of its own (one over every rank, a random subset, one its callbacks issue on),
each group with an algorithm drawn from the built-in ones, the Python ones, `auto`
and per-collective selections; and for each thread a list of steps (plan.py): windows
of async calls of every kind ringcoll runs (the collectives, the coalesced ones,
isend/irecv pairs and batch_isend_irecv) with random sizes, dtypes, ops and roots,
completed in and out of order, by tight is_completed() polls, futures, then()
callbacks and futures chained after wait(), or dropped; chains of calls issued from
inside then() callbacks (or waited for inside one, as PowerSGD's DDP hook); wait(timeout)
on a call the peers have not issued yet, then wait(); object collectives; calls every
rank gets wrong alike; groups made with new_group and destroyed (with their calls in
flight, or from inside a then() callback) or aborted while other groups have calls in
flight; and last, calls left in flight when the rank destroys the world.

The same program runs on torch's gloo backend first (the judge), then on ringcoll over
each of --transports (RINGCOLL_TRANSPORT shm, gloo, stream). Every rank writes down
what it saw of every call (observe.py): whether issuing it raised and what; whether
its values are exact; is_completed() and is_success() after it completed; its
future's done(), value() (as structure: dtypes, shapes, which of the call's tensors it
holds) or what value() raised; what a then() callback saw; what wait(timeout) did; what
destroy and abort left. judge.py compares ringcoll's record with gloo's call by call:
a difference fails the run unless docs/SUPPORTED.md lists it with its reason
("Where ringcoll differs from gloo").

In a share of the rounds (--event-share) one rank instead aborts a group (pg.abort(),
its backend's abort() or _abort_process_group) or destroys one from a thread of its
own, or the harness SIGKILLs a rank, at a random call: gloo cannot judge those (its
abort stops nothing, and a killed peer leaves it waiting out its timeout), so they run
on ringcoll alone and are judged as before: the survivors must fail with a clear error
within the group's timeout (a DistBackendError naming the call, its sequence number
and a peer, or saying the group was aborted or shut down).

Every result is checked against an exact reference computed on the rank from the known
inputs (small integers, so sums are exact in every dtype). A watchdog in this process
turns a run that makes no progress for --stall-s seconds into a hang: it prints every
rank's Python and native stacks, then kills the world. A run fails on a hang, a crash,
a wrong result, a Work polled past its timeout, an error the program did not plan (in a
judged round) or an unclear or late one (in a round with an event), shared memory left
in /dev/shm, or a divergence from gloo that docs/SUPPORTED.md does not list. --out
writes the summary as JSON with the command, machine, torch and ringcoll versions and
the seed; the exit status is 1 if any run failed. A round's program is a function of
(--seed, its number and the knobs); a failure prints the command that reruns its round
alone (--only-round).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shlex
import sys
import time
from dataclasses import asdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if __name__ == "__main__":  # run as a script: import tests.* from the root, not this folder
    sys.path[0] = ROOT

from tests.soak.judge import agree, check_listed, judge  # noqa: E402
from tests.soak.knobs import parse_args  # noqa: E402
from tests.soak.plan import describe_plan, plan_round  # noqa: E402
from tests.soak.report import (divergences, failures_of, machine, print_failure,  # noqa: E402
                               print_summary, tally, versions)
from tests.soak.world import run_world  # noqa: E402


def run_round(knobs, index: int, ctx, command: str) -> dict:
    """A round: its program on gloo (when judged), then on ringcoll over each transport."""
    plan = plan_round(knobs, index)
    rnd = {"round": index, "plan": describe_plan(plan), "p": plan["p"],
           "event": plan["event"], "judged": plan["judged"], "runs": [],
           "rerun": f"{command} --only-round {index}" if knobs.only_round is None
           else command}
    ref = None
    if plan["judged"]:
        ref = run_world(knobs, plan, "gloo", None, ctx)
        rnd["runs"].append(ref)
    first = None
    for transport in knobs.transports:
        run = run_world(knobs, plan, "ringcoll", transport, ctx)
        if ref is not None:
            if failures_of(ref, knobs.strict) or len(ref["ranks"]) < plan["p"]:
                run["no_judge"] = "the gloo run failed: nothing to compare with"
            else:
                run["judge"] = judge(ref, run)
                if first is None:
                    first = run
                else:
                    run["agree"] = agree(first, run)
        rnd["runs"].append(run)
    return rnd


def _print_round(rnd, strict):
    parts = [f"{'gloo' if r['backend'] == 'gloo' else r['transport']} {r['ops']} calls "
             f"{r['seconds']} s" + (f" {divergences(r)} divergences" if divergences(r) else "")
             for r in rnd["runs"]]
    bad = [r for r in rnd["runs"] if failures_of(r, strict)]
    print(f"round {rnd['round']}: {rnd['plan']}: {'; '.join(parts)}"
          f"{'  FAILED' if bad else ''}", flush=True)
    for run in bad:
        print_failure(rnd, run, strict)


def _strip(rnd):
    """A round as the JSON summary keeps it: the observations are the judge's input,
    too large to keep (the judge's samples and counts stay)."""
    for run in rnd["runs"]:
        for rep in run["ranks"].values():
            rep.pop("obs", None)
    return rnd


def main(argv=None) -> int:
    knobs = parse_args(sys.argv[1:] if argv is None else argv, __doc__.split("\n\n")[0])
    check_listed()
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "ringcoll", "tests.soak.rank"])
    started = time.monotonic()
    vers, mach = versions(), machine()
    print(f"soak: seed {knobs.seed}, transports {','.join(knobs.transports)} judged by gloo, "
          f"nproc {','.join(map(str, knobs.nproc))}, {knobs.threads} threads, max "
          f"{knobs.max_bytes} B, events {'on' if knobs.events else 'off'}, budget "
          f"{knobs.ops or '-'} calls / {knobs.seconds or '-'} s; torch {vers['torch']}, "
          f"ringcoll {vers['ringcoll_commit']}", flush=True)
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
        rnd = run_round(knobs, index, ctx, command)
        total_ops += sum(r["ops"] for r in rnd["runs"] if r["backend"] == "ringcoll")
        _print_round(rnd, knobs.strict)
        rounds.append(_strip(rnd))
        index += 1
    failed = [r for r in rounds if any(failures_of(run, knobs.strict) for run in r["runs"])]
    summary = {"command": command, "seed": knobs.seed, "knobs": asdict(knobs),
               "machine": mach, "versions": vers, "rounds": len(rounds),
               "seconds": round(time.monotonic() - started, 1),
               "totals": tally(rounds, knobs.strict),
               "failed_rounds": failed,
               "clear_error_samples": [s for r in rounds for run in r["runs"]
                                       for rep in run["ranks"].values()
                                       for s in rep["samples"]["errors_clear"][:2]][:40]}
    print_summary(summary)
    if knobs.out:
        os.makedirs(os.path.dirname(os.path.abspath(knobs.out)), exist_ok=True)
        with open(knobs.out, "w") as f:
            json.dump(summary, f, indent=1, default=str)
        print(f"  written to {knobs.out}")
    print("soak: " + ("PASSED" if not failed else f"FAILED ({len(failed)} rounds)"))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
