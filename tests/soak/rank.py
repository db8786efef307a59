"""A rank of one run of a round's program: on gloo (the judge) or on ringcoll over one
transport. It makes the plan's groups, runs one thread per program (threads.py) and
the round's event if it is this rank's, then destroys the world with the threads'
final calls in flight, waits for them, and reports its counts and observations."""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from datetime import timedelta

from tests.soak.churn import end_group, new_group
from tests.soak.errors import Stop, classify
from tests.soak.observe import attempt
from tests.soak.threads import Caller, Rank, Stats, ThreadRun

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYRING = os.path.join(ROOT, "examples", "pyring.py")


def _event(plan, rank, groups, stats, done, log):
    """This rank's abort or destroy of a group, from its own thread, once this rank
    has issued the plan's number of calls (not after the round's threads are done)."""
    ev = plan["event"]
    while not stats.event_due.wait(0.05):
        if done.is_set():
            return
    _, pg, _ = groups[ev["group"]]
    if pg is None:
        return
    log["event_fired_at_op"] = ev["at_op"]
    try:
        end_group(ev["how"], pg)
    except Exception as e:  # noqa: BLE001 - reported
        log["event_error"] = f"{type(e).__name__}: {e}"


def _redirect(tmp, rank):
    """The rank's output to files the harness reads: its log, its Python stacks on
    SIGUSR1 (a hang's), and a fatal signal's stacks."""
    import faulthandler

    log = open(os.path.join(tmp, f"rank{rank}.log"), "w")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    stacks = open(os.path.join(tmp, f"stacks{rank}.txt"), "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    fatal = open(os.path.join(tmp, f"fatal{rank}.txt"), "w")
    faulthandler.enable(file=fatal, all_threads=True)  # (faulthandler keeps its files)


def _init_world(plan, rank, backend, transport, tmp):
    """init_process_group on the backend; RINGCOLL_ALGO is the world group's algorithm."""
    import torch.distributed as dist

    os.environ.update({"RINGCOLL_ALGO_MODULES": PYRING, "GLOO_SOCKET_IFNAME": "lo",
                       "OMP_NUM_THREADS": "1"})
    if transport:
        os.environ["RINGCOLL_TRANSPORT"] = transport
    world_algo = plan["groups"][0]["algo"]
    if world_algo is None or backend != "ringcoll":
        os.environ.pop("RINGCOLL_ALGO", None)
    else:
        os.environ["RINGCOLL_ALGO"] = world_algo
    if backend == "ringcoll":
        import ringcoll  # noqa: F401 - registers the backend

    dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=rank,
                            world_size=plan["p"],
                            timeout=timedelta(seconds=plan["pg_timeout_s"]))
    os.environ.pop("RINGCOLL_ALGO", None)  # the other groups: Options(algo=...) or the default


def _make_groups(plan, rank, backend, stats):
    """The plan's groups, in its order: key -> (ranks, group or None, group rank)."""
    import torch.distributed as dist

    groups = {}
    for i, g in enumerate(plan["groups"]):
        if g["world"]:
            pg = dist.group.WORLD
        else:
            try:
                pg = new_group(backend, g["ranks"], g["algo"], plan["pg_timeout_s"])
            except Exception as e:  # noqa: BLE001 - counted; its thread skips it
                stats.add("errors_unclear" if classify(e) == "unclear" else "errors_clear",
                          {"call": f"new_group {i} ({g['algo']}, ranks {g['ranks']})",
                           "error": f"{type(e).__name__}: {e}"[:600]})
                pg = None
        member = rank in g["ranks"] and pg is not None
        groups[i] = (g["ranks"], pg if member else None,
                     g["ranks"].index(rank) if member else None)
    return groups


def _run_threads(r: Rank):
    workers = [ThreadRun(r, t) for t in range(r.plan["threads"])]

    def guarded(w):
        try:
            w.run()
        except BaseException:  # noqa: BLE001 - a harness bug: counted, shown
            r.stats.add("errors_unclear", {"thread": w.t, "call": "(the harness)",
                                           "error": traceback.format_exc()[-1500:]})
    threads = [threading.Thread(target=guarded, args=(w,), name=f"soak-{w.t}")
               for w in workers]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def _destroy_with_finals(r: Rank):
    """destroy_process_group() with the threads' final calls in flight, then wait()
    for each: destroy completes what was issued before it (gloo does)."""
    import torch.distributed as dist

    final = Caller(r, "final")
    if dist.is_initialized():  # (_abort_process_group of the default group ends it)
        ok, got = attempt(dist.destroy_process_group)
        r.obs["final.destroy"] = "returned" if ok else f"raised {got}"
    for key, it in r.finals:
        try:
            final.finish(key, it, "wait")
        except Stop:
            pass  # (written down; the next one still completes)


def rank_main(rank, plan, backend, transport, tmp, conn, beat, issued, reported):
    """One rank of one run (the module docstring)."""
    _redirect(tmp, rank)
    import warnings

    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")  # torch's deprecation notes, once per call
    torch.set_num_threads(1)
    ev = plan["event"]
    stats = Stats(beat, issued, rank, ev["at_op"] if ev and ev["rank"] == rank else None)
    info = {}
    _init_world(plan, rank, backend, transport, tmp)
    groups = _make_groups(plan, rank, backend, stats)
    store = dist.FileStore(os.path.join(tmp, "gates"), plan["p"])
    store.set_timeout(timedelta(seconds=plan["pg_timeout_s"]))
    r = Rank(plan, rank, backend, groups, store, stats)
    conn.send(("ready", None))
    done = threading.Event()
    event = (threading.Thread(target=_event, args=(plan, rank, groups, stats, done, info),
                              name="soak-event", daemon=True)
             if ev and ev["kind"] != "kill" and ev["rank"] == rank else None)
    if event:
        event.start()
    _run_threads(r)
    done.set()
    if event:
        event.join()
    # What this rank did so far reaches the harness now, should the rest hang.
    conn.send(("report", {"counts": dict(stats.c), "samples": stats.samples,
                          "obs": dict(r.obs), **info}))
    _barrier(rank, reported, beat, plan["pg_timeout_s"])
    _destroy_with_finals(r)
    conn.send(("report", {"counts": stats.c, "samples": stats.samples, "obs": r.obs,
                          **info}))
    conn.send(("exited", None))
    conn.close()


def _barrier(rank, reported, beat, timeout_s):
    """No rank destroys the world before every rank's threads are done, as a program
    ends with a barrier: the final calls (and dropped ones) need their peers to issue
    them. It waits while some rank makes progress (the ranks' beats); once none has
    for the group's timeout (a rank was killed or died, or its threads are stuck),
    it goes on."""
    reported[rank] = 1
    last, since = sum(beat), time.monotonic()
    while not all(reported) and time.monotonic() - since < timeout_s:
        time.sleep(0.01)
        if sum(beat) != last:
            last, since = sum(beat), time.monotonic()
