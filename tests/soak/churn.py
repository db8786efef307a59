"""Churn: a group made and ended while other calls are in flight (thread 0's step:
every rank makes groups in one order, so one thread alone makes them).

The thread issues calls on its own groups (left in flight, as the other threads' are),
every rank calls new_group over the step's ranks, its members issue calls on the new
group and end it one of five ways:

- destroy_inflight: destroy_process_group(group) with its calls in flight, then wait
  for each (destroy completes the work issued before it, as gloo does);
- destroy_quiet: wait for each, then destroy;
- then_destroy: the last call's then() callback destroys the group, from the thread
  that completed the future (the backend's);
- abort_quiet: wait for each, then abort (pg.abort(), its backend's abort() or
  _abort_process_group);
- abort_inflight: abort with the calls in flight, then wait for each: a call may
  complete or fail (listed: `abort-inflight`);

then issue one more call on it (what destroy and abort left: listed,
`ended-group-call`), and complete the calls on the thread's own groups."""

from __future__ import annotations

from datetime import timedelta

from tests.soak.observe import attempt, summarize


def end_group(how, pg):
    """Destroys or aborts `pg` the plan's way."""
    import torch
    import torch.distributed as dist

    if how == "destroy":
        dist.destroy_process_group(pg)
    elif how == "pg.abort":
        pg.abort()
    elif how == "backend.abort":
        pg._get_backend(torch.device("cpu")).abort()
    elif how == "_abort_process_group":
        dist.distributed_c10d._abort_process_group(pg)
    else:
        raise ValueError(f"soak: no way to end a group called {how!r}")


def new_group(backend, ranks, algo, timeout_s):
    """new_group on the run's backend (every rank calls it, members or not)."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    if backend == "gloo":
        return dist.new_group(ranks, timeout=timeout, backend="gloo")
    import ringcoll

    return dist.new_group(ranks, timeout=timeout, backend="ringcoll",
                          pg_options=ringcoll.Options(algo=algo) if algo else None)


def run_churn(run, key, step):
    """The churn step of ThreadRun (threads.py)."""
    r = run.r
    r.stats.add("churns")
    around = []
    for c, spec in enumerate(step["around"]):
        if run.member(spec.group) is not None:
            it = run.issue(f"{key}.a{c}", spec)
            if it is not None:
                around.append((f"{key}.a{c}", it))
    ranks, gk = step["ranks"], step["key"]
    o = r.obs[key] = {"call": f"new_group({ranks}) as {gk}, then {step['end']}"}
    try:
        pg = new_group(r.backend, ranks, step["algo"], r.plan["pg_timeout_s"])
    except Exception as e:  # noqa: BLE001 - written down; stops the thread
        run.error(key, "new_group", e)
    member = r.rank in ranks
    r.groups[gk] = (ranks, pg if member else None, ranks.index(r.rank) if member else None)
    try:
        if member:
            _use_and_end(run, key, step, pg, o)
    finally:
        del r.groups[gk]  # (gloo's group object goes with its last reference)
    for k, it in around:
        run.finish(k, it, "wait")


def _use_and_end(run, key, step, pg, o):
    end = step["end"]
    how = "destroy" if end.startswith("destroy") or end == "then_destroy" else step["how"]
    calls = []
    for c, spec in enumerate(step["calls"]):
        it = run.issue(f"{key}.c{c}", spec)
        if it is not None:
            calls.append((f"{key}.c{c}", it))
    inflight = end in ("destroy_inflight", "abort_inflight")
    if inflight:
        ok, got = attempt(lambda: end_group(how, pg))
        o["end"] = "returned" if ok else f"raised {got}"
    if end == "then_destroy":
        _then_destroy(run, key, calls[-1][1], pg, o)
    for k, it in calls:
        # A call in flight at an abort may fail on ringcoll (as on NCCL): planned.
        run.finish(k, it, "wait", planned=end == "abort_inflight")
    if end in ("destroy_quiet", "abort_quiet"):
        ok, got = attempt(lambda: end_group(how, pg))
        o["end"] = "returned" if ok else f"raised {got}"
    ak = f"{key}.after"
    it = run.issue(ak, step["after"], planned=True)
    if it is not None:
        run.finish(ak, it, "wait", planned=True)


def _then_destroy(run, key, it, pg, o):
    """destroy_process_group(group) from inside the then() callback of the group's
    last call; the callback writes down what it saw and what destroy did."""
    seen = {}

    def callback(f):
        seen["done"] = f.done()
        ok, v = attempt(f.value)
        seen["value"] = summarize(v, it.storages) if ok else f"raised {v}"
        ok, got = attempt(lambda: end_group("destroy", pg))
        seen["destroy"] = "returned" if ok else f"raised {got}"
        return True
    ok, fut = attempt(it.works[0].get_future)
    if not ok:
        o["then_destroy"] = f"get_future raised {fut}"
        return
    ok, got = attempt(fut.then(callback).wait)
    o["then_destroy"] = {**seen, "returned": got if ok else f"raised {got}"}
