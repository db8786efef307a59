"""A rank's threads: each runs its program (plan.thread_program) on one backend and
writes down what it saw of every call (observe.py), keyed by the call's place in the
program ("t1.s7.c2": thread 1, step 7, call 2), so that the runs of one program on
gloo and on ringcoll compare key by key.

How a rank completes a window is its own (Completion, seeded by the round, the thread
and the rank): alike on every backend, so both see the same program.

Errors. In a judged round (no event) a call raises only where the program makes it
(a gate's wait(timeout), an invalid call, a call on a group destroyed or aborted, a
call in flight at an abort): any other error is written down and stops the thread
(its peers then meet the group's timeout, which the judge reports as the divergence
it follows from). In a round with an event a thread stops at its first error, which
must be clear (classify) and come within the group's timeout."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import traceback
from datetime import timedelta

from tests.soak.calls import (FUTURE_KINDS, GLOO_NEVER_COMPLETED, P2P, FutureWork,
                              gloo_refuses, issue, issue_invalid, issue_object)
from tests.soak.chain import run_chain
from tests.soak.churn import run_churn
from tests.soak.errors import PollTimeout, Stop, classify
from tests.soak.observe import attempt, etype, future_state, summarize, work_future, work_state
from tests.soak.plan import thread_program

# How a window of calls is completed (weights), per rank.
MODES = {"wait": 3, "reverse": 1, "shuffle": 1, "poll": 3, "poll_all": 1, "future": 1,
         "then": 2, "then_after_wait": 1, "wait_timeout": 1, "drop_inputs": 1,
         "drop_all": 1}
WAIT_INSIDE_SHARE = 0.3  # share of chains a rank runs inside one callback, waiting
ERROR_SAMPLES = 20  # messages kept per kind of outcome and rank
LATE_S = 10  # an error later than the group's timeout plus this, after its call, is late
class Stats:
    """One rank's counts and samples; a lock only around the counters (never held
    across a call into torch)."""

    def __init__(self, beat, issued, rank, event_at=None):
        self.lock = threading.Lock()
        self.beat, self.issued, self.rank = beat, issued, rank
        self.event_at, self.event_due = event_at, threading.Event()
        self.c = {"issued": 0, "completed": 0, "checked": 0, "unchecked": 0, "wrong": 0,
                  "errors_clear": 0, "errors_unclear": 0, "errors_late": 0, "stuck": 0,
                  "errors_planned": 0, "errors_unplanned": 0, "chains": 0, "churns": 0,
                  "gates": 0, "objects": 0}
        self.samples = {k: [] for k in ("wrong", "errors_clear", "errors_unclear",
                                        "errors_late", "stuck", "errors_unplanned")}

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


class Rank:
    """What a rank's threads share: the plan, the backend, the group table
    (key -> (ranks, the ProcessGroup or None where this rank is not a member, this
    rank's group rank)), the store the gates use, the counters, every thread's
    observations and the calls left in flight for the final destroy."""

    def __init__(self, plan, rank, backend, groups, store, stats):
        self.plan, self.rank, self.backend = plan, rank, backend
        self.groups, self.store, self.stats = groups, store, stats
        self.judged = plan["judged"]
        self.obs = {}  # key -> observation (written by the threads and their callbacks)
        self.finals = []  # (key, Issued) issued by the threads' final steps
        self.inject = plan["inject"] if backend == "ringcoll" else []
        self.limit = plan["pg_timeout_s"] + 10  # a Work polled longer than this is stuck


class Caller:
    """Issues calls, completes them and writes down what each showed: what a thread's
    steps, chains and churn, and the rank's final destroy, are made of."""

    def __init__(self, rank: Rank, t):
        self.r, self.t = rank, t
        self.inject_wrong = "wrong" in rank.inject and rank.rank == 0 and t == 0
        self.inject_diverge = "diverge" in rank.inject and rank.rank == 0 and t == 0

    def member(self, key):
        ranks, pg, me = self.r.groups[key]
        return (pg, me, len(ranks)) if pg is not None else None

    # --- Outcomes -----------------------------------------------------------------

    def error(self, key, where, e, issued_at=None, planned=False):
        """An exception: written down at `key`; unless the program planned it, it stops
        the thread (judged round), or is classified and stops it (round with an event)."""
        o = self.r.obs.setdefault(key, {})
        o[where] = etype(e) if not isinstance(e, PollTimeout) else "stuck"
        stats = self.r.stats
        sample = {"thread": self.t, "key": key, "where": where, "call": o.get("call"),
                  "error": f"{type(e).__name__}: {e}"[:600],
                  "traceback": "".join(traceback.format_exception(e))[-1500:]}
        if isinstance(e, PollTimeout):
            stats.add("stuck", sample)
            raise Stop()
        if planned:
            stats.add("errors_planned")
            return
        if self.r.judged:
            stats.add("errors_unplanned", sample)
            raise Stop()
        stats.add("errors_" + classify(e), sample)
        waited = time.monotonic() - issued_at if issued_at else 0.0
        if waited > self.r.plan["pg_timeout_s"] + LATE_S:
            stats.add("errors_late", {**sample, "seconds": round(waited, 1)})
        raise Stop()

    def checked(self, key, it):
        """The call completed: its values against the exact reference."""
        o = self.r.obs[key]
        stats = self.r.stats
        stats.add("completed")
        if it.check is None:
            o["check"] = "none"
            return
        problem = it.check(it.outputs)
        if self.inject_wrong:
            self.inject_wrong, problem = False, "injected by --inject wrong"
        if problem is None:
            o["check"] = "exact"
        elif _bool_bytes(it):
            o["check"] = "bool-bytes"  # gloo's bool SUM: the bytes' sum
        else:
            o["check"] = "differs"
        stats.add("checked")
        if problem and (self.r.backend == "ringcoll" or o["check"] == "differs"):
            stats.add("wrong", {"thread": self.t, "key": key, "backend": self.r.backend,
                                "call": it.spec.name(),
                                "spec": {k: str(v) for k, v in vars(it.spec).items()},
                                "differs": problem})

    # --- Issuing and completing calls ---------------------------------------------

    def issue(self, key, spec, planned=False):
        """Issues `spec` (this rank is a member of its group): the Issued, or None where
        it raised (`planned`: the program expects it may) or the backend refuses it on
        purpose (gloo_refuses: not issued on gloo)."""
        pg, me, p = self.member(spec.group)
        o = self.r.obs[key] = {"call": spec.name(), "kind": spec.kind}
        if self.r.backend == "gloo" and gloo_refuses(spec):
            o["skipped"] = gloo_refuses(spec)
            return None
        self.r.stats.add("issued")
        try:
            it = issue(spec, pg, me, p)
        except Exception as e:  # noqa: BLE001 - written down; stops the thread
            self.error(key, "issue", e, planned=planned)
            return None
        o["works"] = "future" if spec.kind in FUTURE_KINDS else len(it.works)
        if self.inject_diverge:  # the harness's own test: an observation gloo did not make
            self.inject_diverge = False
            o["works"] = "injected by --inject diverge"
        return it

    def observe_done(self, key, it):
        """After a call completed: its Works' state, their futures, its values."""
        o = self.r.obs[key]
        o["state"] = [work_state(w) for w in it.works]
        o["future"] = [future_state(w.fut, it.storages) if isinstance(w, FutureWork)
                       else work_future(w, it.storages) for w in it.works]
        self.checked(key, it)

    def poll(self, w):
        deadline, spins = time.monotonic() + self.r.limit, 0
        while not w.is_completed():
            spins += 1
            if spins % 4096 == 0 and time.monotonic() > deadline:
                raise PollTimeout(f"is_completed() still False {self.r.limit:.0f} s after "
                                  "polling began (the group's timeout passed)")

    def finish(self, key, it, mode, planned=False):
        """Completes one call the window's way and writes down what it saw."""
        o = self.r.obs[key]
        if mode in ("poll", "poll_all") and self.r.judged and \
                it.spec.kind in GLOO_NEVER_COMPLETED:
            mode = "wait"  # (polling them spins forever on gloo)
        try:
            if mode in ("poll", "poll_all"):
                for w in it.works:
                    self.poll(w)
            if mode == "future":
                self.via_future(key, it)
            elif mode == "then":
                self.via_then(key, it)
            elif mode == "then_after_wait":
                for w in it.works:
                    w.wait()
                self.then_after_wait(key, it)
            elif mode == "wait_timeout":
                for w in it.works:
                    got = w.wait(timedelta(seconds=self.r.plan["pg_timeout_s"] + 5))
                    o.setdefault("returned", []).append(
                        got if isinstance(got, bool) else summarize(got, it.storages))
            else:
                for w in it.works:
                    w.wait()
        except Stop:
            raise
        except Exception as e:  # noqa: BLE001 - written down
            self.error(key, "complete", e, it.issued_at, planned)
            return
        self.observe_done(key, it)

    def via_future(self, key, it):
        """Each Work's future's wait(), then the Work's (is_completed() is read after a
        Work's wait(): gloo marks the future done before the Work); where a backend's
        Work has no future (gloo's reduce-scatter and point-to-point), the Work's alone."""
        for w in it.works:
            ok, fut = attempt(w.get_future)
            if ok:
                fut.wait()
            else:
                self.r.obs[key]["via"] = f"get_future raised {fut}"
            w.wait()

    def via_then(self, key, it):
        """A then() on all of the call's futures; the callback writes down what it saw
        (done(), each value) and waits for each (raising the call's error)."""
        import torch

        try:
            futs = [w.get_future() for w in it.works]
        except Exception as e:  # noqa: BLE001 - a Work without a future (gloo)
            self.r.obs[key]["via"] = f"get_future raised {etype(e)}"
            for w in it.works:
                w.wait()
            return
        seen = {}

        def callback(f):
            seen["done"] = f.done()
            seen["values"] = [future_state(g, it.storages) for g in f.value()]
            for g in f.value():
                g.wait()
            return True
        ok, got = attempt(torch.futures.collect_all(futs).then(callback).wait)
        self.r.obs[key]["then"] = {**seen, "returned": got if ok else f"raised {got}"}
        for w in it.works:
            w.wait()  # (raises the call's own error)

    def then_after_wait(self, key, it):
        """Futures chained after wait(): each future's then() callback, added once the
        Work completed, sees it done with its value."""
        out = []
        for w in it.works:
            ok, fut = attempt(w.get_future)
            if not ok:
                out.append(f"get_future raised {fut}")
                continue
            ok, got = attempt(fut.then(lambda f: future_state(f, it.storages)).wait)
            out.append(got if ok else f"raised {got}")
        self.r.obs[key]["then_after_wait"] = out



class ThreadRun(Caller):
    """Thread t of a rank: runs its program, one step at a time."""

    def __init__(self, rank: Rank, t: int):
        super().__init__(rank, t)
        plan = rank.plan
        self.steps = thread_program(plan, t)
        self.local = None  # the rank's own RNG of the step being run (run())

    def run(self):
        plan, rank = self.r.plan, self.r.rank
        for i, step in enumerate(self.steps):
            # How this rank completes the step: drawn per step, so that a call one
            # backend leaves out (gloo_refuses) cannot shift the draws of later steps.
            self.local = random.Random(f"{plan['seed']}/{plan['round']}/{self.t}/{rank}/{i}")
            try:
                getattr(self, "step_" + step["op"])(f"t{self.t}.s{i}", step)
            except Stop:
                self.r.obs[f"t{self.t}.stopped"] = f"after step {i} ({step['op']})"
                return
            self._maybe_inject()

    def _maybe_inject(self):
        inj, r = self.r.inject, self.r
        if "hang" in inj and r.rank == 0 and self.t == 0:
            threading.Event().wait()  # the harness's own test: a stall
        if "crash" in inj and r.rank == r.plan["p"] - 1 and r.stats.c["issued"] >= 10:
            os.kill(os.getpid(), signal.SIGSEGV)  # ... and a rank's death

    def step_window(self, key, step):
        """Issue every call of the window, then complete them the rank's way."""
        mode = self.local.choices(list(MODES), list(MODES.values()))[0]
        order = list(range(len(step["calls"])))
        if mode == "shuffle":
            self.local.shuffle(order)
        elif mode == "reverse":
            order.reverse()
        issued = {}
        for c, spec in enumerate(step["calls"]):
            if self.member(spec.group) is None:
                continue  # not a member of that group
            it = self.issue(f"{key}.c{c}", spec)
            if it is not None:
                issued[c] = (f"{key}.c{c}", it)
        self.complete([issued[c] for c in order if c in issued], mode)

    def complete(self, issued, mode):
        """Completes the window's calls (issued: in the order to complete them)."""
        if mode == "drop_all":
            # gloo loses a point-to-point message whose Work is dropped before it
            # completes (the buffer goes with the Work; the peer waits out its
            # timeout): in a judged round those are completed, the others dropped.
            kept = [(k, it) for k, it in issued if self.r.judged and it.spec.kind in P2P]
            for k in {k for k, _ in issued} - {k for k, _ in kept}:
                self.r.obs[k]["dropped"] = True
            self.r.stats.add("unchecked", n=len(issued) - len(kept))
            issued[:] = kept
            mode = "wait"
        if mode == "drop_inputs":
            for _, it in issued:
                it.inputs = None
        order = list(issued)
        if mode == "poll_all":
            for k, it in order:
                if self.r.judged and it.spec.kind in GLOO_NEVER_COMPLETED:
                    continue  # (finish() waits for them instead)
                try:
                    for w in it.works:
                        self.poll(w)
                except PollTimeout as e:
                    self.error(k, "complete", e)
        for k, it in order:
            self.finish(k, it, mode)

    def step_final(self, key, step):
        """Calls left in flight: the rank destroys the world, then waits for them."""
        for c, spec in enumerate(step["calls"]):
            if self.member(spec.group) is None:
                continue
            it = self.issue(f"{key}.c{c}", spec)
            if it is not None:
                self.r.finals.append((f"{key}.c{c}", it))

    def step_gate(self, key, step):
        """wait(timeout) on a call before the peers issue it (they wait on the store
        until the waiter lets them): it times out on every backend; then wait()
        completes it."""
        spec = step["call"]
        if self.member(spec.group) is None:
            return
        _, me, p = self.member(spec.group)
        gate = f"gate/{key}"
        self.r.stats.add("gates")
        if me != step["waiter"]:
            self.r.store.wait([gate])
            it = self.issue(key, spec)
            if it is not None:
                self.finish(key, it, "wait")
            return
        it = self.issue(key, spec)
        if it is None:
            self.r.store.set(gate, "1")
            return
        o = self.r.obs[key]
        ok, got = attempt(lambda: it.works[0].wait(timedelta(milliseconds=step["ms"])))
        o["wait_timeout"] = got if ok else f"raised {got}"
        o["completed_after_timeout"] = it.works[0].is_completed()
        self.r.store.set(gate, "1")
        self.finish(key, it, "wait")

    def step_objects(self, key, step):
        if self.member(step["group"]) is None:
            return
        pg, me, p = self.member(step["group"])
        o = self.r.obs[key] = {"call": f"{step['kind']}({step['size']} B) on group "
                                       f"{step['group']}", "kind": step["kind"]}
        self.r.stats.add("issued")
        self.r.stats.add("objects")
        t0 = time.monotonic()
        try:
            problem = issue_object(step["kind"], pg, me, p, step["root"], step["salt"],
                                   step["size"])
        except Exception as e:  # noqa: BLE001 - written down
            self.error(key, "complete", e, t0)
            return
        o["check"] = "exact" if problem is None else "differs"
        self.r.stats.add("checked")
        if problem:
            self.r.stats.add("wrong", {"thread": self.t, "key": key, "call": o["call"],
                                       "backend": self.r.backend, "differs": problem})

    def step_invalid(self, key, step):
        """A call every rank gets wrong alike: refused when issued, the group usable."""
        if self.member(step["group"]) is None:
            return
        pg, _, p = self.member(step["group"])
        o = self.r.obs[key] = {"call": f"{step['kind']} on group {step['group']}",
                               "kind": step["kind"]}
        ok, w = attempt(lambda: issue_invalid(step["kind"], pg, p))
        o["issue"] = "returned" if ok else f"raised {w}"
        if ok:  # not refused: its outcome, whatever it is
            ok, got = attempt(w.wait)
            o["complete"] = "returned" if ok else f"raised {got}"
        else:
            self.r.stats.add("errors_planned")

    def step_chain(self, key, step):
        run_chain(self, key, step)

    def step_churn(self, key, step):
        run_churn(self, key, step)


def _bool_bytes(it) -> bool:
    """Whether a bool SUM's outputs hold the right truth values in bytes other than 0
    and 1 (what gloo's bool SUM leaves: the sum of the bytes)."""
    import torch

    if it.spec.op != "SUM" or not it.outputs or any(o.dtype != torch.bool
                                                    for o in it.outputs):
        return False
    return it.check([o.view(torch.uint8).ne(0) for o in it.outputs]) is None
