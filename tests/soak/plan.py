"""A round's plan and its program: the same on every rank and on every backend, drawn
from (--seed, the round's number) alone.

A plan (plan_round) says the world size, each thread's groups and their algorithms,
whether the round is judged by gloo or has an event, and one seed per thread. From a
thread's seed every rank draws that thread's program (thread_program): a list of
steps, each one of

- window: async calls on the thread's own groups, then completed (the completion
  style is the rank's, drawn by threads.Completion from the rank's own seed);
- chain: a call whose then() callback issues the next call on the thread's chain
  group, and so on (or, as PowerSGD's DDP hook, issues and waits for the rest inside
  the first callback);
- gate: a call one rank waits for with a short timeout before its peers issue it (they
  wait on the store until then): wait(timeout) times out, then wait() completes it;
- objects: an object collective (all_gather_object, broadcast_object_list, ...);
- invalid: a call whose arguments every rank gets wrong alike, refused when issued;
- churn (thread 0 alone: every rank must create groups in one order): new_group, calls
  on it while the thread's other calls are in flight, then destroy_process_group of
  it (its calls in flight, or waited, or from inside a then() callback) or its abort,
  and a call on it afterwards;
- final: calls issued and not waited for: the rank destroys the world with them in
  flight (destroy_process_group()), then waits for each.

Judged rounds draw every kind of step; rounds with an event (one rank aborts or
destroys a group, or is killed, at a random moment) draw windows, chains and object
collectives only: they are judged by "a clear error within the timeout", not by gloo.
"""

from __future__ import annotations

import random

from tests.soak.calls import (CHAINABLE, GLOO_FUTURES, INVALID_KINDS, OBJECT_KINDS, SYMMETRIC,
                              Spec, draw_spec)

# Step weights per kind; churn is thread 0's alone, gate, invalid and churn judged
# rounds' alone.
STEPS = {"window": 10, "chain": 1.5, "objects": 1, "gate": 1, "invalid": 0.5, "churn": 1.2}
CHAIN_LEN = (1, 6)
# How a churn group ends (weights).
CHURN_ENDS = {"destroy_inflight": 3, "destroy_quiet": 1, "then_destroy": 2,
              "abort_quiet": 1, "abort_inflight": 1}
ABORTS = ("pg.abort", "backend.abort", "_abort_process_group")
OBJECT_MAX_BYTES = 1 << 18


def algorithm_choices() -> list:
    """What a group's RINGCOLL_ALGO may be (None: the default)."""
    import ringcoll

    names = [None, "auto", "pyring"] + [n for n in ringcoll.algorithms()]
    names += ["allreduce=oneshot:0-64K,rhd:64K-1M,ring;broadcast=tree;reduce=tree",
              "allreduce=twoshot;reducescatter=rhd;allgather=twoshot;barrier=oneshot",
              "allreduce=swing:0-1M,biring;allgather=bruck",
              "allreduce=auto;allgather=auto"]
    return names


def plan_round(knobs, index: int) -> dict:
    rng = random.Random(f"ringcoll-soak/{knobs.seed}/{index}")
    p = rng.choice(knobs.nproc)
    algos = algorithm_choices()
    groups = []  # in creation order (every rank creates them in this order)
    for t in range(knobs.threads):
        for role in ("full", "sub", "chain"):
            ranks = (list(range(p)) if role != "sub"
                     else sorted(rng.sample(range(p), rng.randint(1, p))))
            groups.append({"thread": t, "role": role, "ranks": ranks,
                           "world": t == 0 and role == "full", "algo": rng.choice(algos)})
    event = None
    if knobs.events and rng.random() < knobs.event_share:
        kind = rng.choice(["abort", "destroy", "kill"])
        target = rng.choice([i for i, g in enumerate(groups)
                             if not (kind == "destroy" and g["world"])])
        event = {"kind": kind, "rank": rng.choice(groups[target]["ranks"]),
                 # once that rank has issued this many calls (of about round_ops)
                 "at_op": rng.randint(1, max(1, knobs.round_ops * 2 // 3)),
                 "group": target,
                 "how": rng.choice(ABORTS) if kind == "abort" else kind}
    return {"round": index, "seed": knobs.seed, "p": p, "threads": knobs.threads,
            "groups": groups, "event": event, "judged": event is None,
            "algos": algos, "thread_seeds": [rng.getrandbits(62) for _ in range(knobs.threads)],
            "round_ops": knobs.round_ops, "window": knobs.window,
            "max_bytes": knobs.max_bytes, "pg_timeout_s": knobs.pg_timeout_s,
            "inject": list(knobs.inject) if index == (knobs.only_round or 0) else []}


def describe_plan(plan) -> str:
    algos = sorted({str(g["algo"]) for g in plan["groups"]})
    ev = plan["event"]
    what = "judged by gloo" if ev is None else (
        f"{ev['how']} of group {ev['group']} by rank {ev['rank']} at its call {ev['at_op']}"
        if ev["kind"] != "kill" else f"SIGKILL of rank {ev['rank']} at its call {ev['at_op']}")
    return f"p={plan['p']} threads={plan['threads']} {what}; algorithms {', '.join(algos)}"


def thread_program(plan: dict, t: int) -> list:
    """Thread t's steps (the module docstring), alike on every rank and backend."""
    rng = random.Random(plan["thread_seeds"][t])
    groups = plan["groups"]
    own = [i for i, g in enumerate(groups) if g["thread"] == t and g["role"] != "chain"]
    chain = next(i for i, g in enumerate(groups) if g["thread"] == t and g["role"] == "chain")
    mb = plan["max_bytes"]

    def calls_on(keys, count, kinds=None):
        out = []
        for _ in range(count):
            gi = rng.choice(keys)
            out.append(draw_spec(rng, gi, groups[gi]["ranks"], mb, kinds=kinds))
        return out

    # Every group's first call is one every rank issues and waits for: the stream
    # path's first call on a group blocks until every peer arrives, as NCCL's lazy
    # initialization does (docs/SUPPORTED.md, `stream-first-call`), which a gate
    # (a rank waiting before its peers issue) must not meet.
    steps = [{"op": "window", "calls": [_warm_up(gi) for gi in own + [chain]]}]
    kinds = {k: w for k, w in STEPS.items()
             if plan["judged"] or k in ("window", "chain", "objects")}
    if t != 0:
        kinds.pop("churn", None)
    budget = max(1, plan["round_ops"] // plan["threads"])
    issued = len(steps[0]["calls"])
    while issued < budget:
        kind = rng.choices(list(kinds), list(kinds.values()))[0]
        if kind == "window":
            step = {"op": "window", "calls": calls_on(own, rng.randint(1, plan["window"]))}
            issued += len(step["calls"])
        elif kind == "chain":
            # (a then() callback chains each call on the last one's future: kinds
            # whose Works have a future on gloo too)
            step = {"op": "chain", "trigger": calls_on(own, 1, GLOO_FUTURES)[0],
                    "calls": calls_on([chain], rng.randint(*CHAIN_LEN), CHAINABLE),
                    "seed": rng.getrandbits(62)}
            issued += 1 + len(step["calls"])
        elif kind == "gate":
            gi = rng.choice(own)
            ranks = groups[gi]["ranks"]
            spec = draw_spec(rng, gi, ranks, mb, kinds=SYMMETRIC)
            spec.n = max(spec.n, 1)  # (nothing to wait for in an empty call)
            step = {"op": "gate", "call": spec, "waiter": rng.randrange(len(ranks)),
                    "ms": rng.choice([20, 100, 300])}
            issued += 1
        elif kind == "objects":
            gi = rng.choice(own)
            step = {"op": "objects", "kind": rng.choice(OBJECT_KINDS), "group": gi,
                    "root": rng.randrange(len(groups[gi]["ranks"])),
                    "salt": rng.getrandbits(20),
                    "size": int(2 ** rng.uniform(0, OBJECT_MAX_BYTES.bit_length() - 1))}
            issued += 1
        elif kind == "invalid":
            step = {"op": "invalid", "kind": rng.choice(INVALID_KINDS), "group": rng.choice(own)}
            issued += 1
        else:
            step = _churn_step(rng, plan, own, len(steps))
            issued += len(step["around"]) + len(step["calls"]) + 1
        steps.append(step)
    steps.append({"op": "final", "calls": calls_on(own, rng.randint(1, plan["window"]))})
    return steps


def _warm_up(gi, salt=0):
    import torch

    return Spec(kind="all_reduce", group=gi, dtype=torch.float32, n=1, salt=salt)


def _churn_step(rng, plan, own, index):
    """A group made and ended while the thread's calls on its own groups are in flight."""
    p, groups, mb = plan["p"], plan["groups"], plan["max_bytes"]
    key = f"churn{index}"
    ranks = sorted(rng.sample(range(p), rng.randint(1, p)))
    around = []
    for _ in range(rng.randint(0, 3)):
        gi = rng.choice(own)
        around.append(draw_spec(rng, gi, groups[gi]["ranks"], mb))
    end = rng.choices(list(CHURN_ENDS), list(CHURN_ENDS.values()))[0]
    calls = [_warm_up(key, index)] + [draw_spec(rng, key, ranks, mb)
                               for _ in range(rng.randint(1, 4))]
    if end == "then_destroy":  # the last call's then() destroys the group: one gloo runs
        calls.append(Spec(kind="all_reduce", group=key, dtype=calls[0].dtype,
                          n=rng.randint(1, 1 << 16), salt=rng.getrandbits(40)))
    return {"op": "churn", "key": key, "ranks": ranks, "algo": rng.choice(plan["algos"]),
            "around": around, "calls": calls, "end": end, "how": rng.choice(ABORTS),
            "after": Spec(kind="all_reduce", group=key, dtype=_warm_up(0).dtype, n=3,
                          salt=index)}
