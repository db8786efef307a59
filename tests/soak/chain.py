"""A chain: new collectives issued from inside then() callbacks.

The trigger call (on one of the thread's own groups) gets a then() callback that
issues the chain's first call on the thread's chain group; each chain call's callback
writes down what it saw (done(), each value), checks the call and issues the next,
from whatever thread completed the future (the backend's). Or, as PowerSGD's DDP hook
does, the first call's callback issues every other call and waits for each inside
itself. Which of the two a rank does is its own draw (alike on every backend).

The thread waits for the chain's end (at most the group's timeout and then some:
past that it is stuck), then waits for the trigger and every chain call and checks
them."""

from __future__ import annotations

import threading
import traceback

from tests.soak.errors import PollTimeout, Stop
from tests.soak.observe import attempt, future_state

WAIT_INSIDE_SHARE = 0.3  # share of chains a rank runs inside one callback, waiting


class Chain:
    def __init__(self, run, key, step):
        self.run, self.key, self.calls = run, key, step["calls"]
        self.inside = run.local.random() < WAIT_INSIDE_SHARE
        self.done = threading.Event()
        self.issued = []  # (key, Issued): the thread completes and checks them
        self.failed = None  # why the chain stopped early

    def start(self, k=0):
        """Issues call k and hangs the next one on its future (or, inside the first
        callback, waits for it there)."""
        import torch

        while k < len(self.calls):
            ck = f"{self.key}.c{k}"
            it = self.run.issue(ck, self.calls[k])
            if it is None:  # not issued on this backend (gloo_refuses): the next one
                k += 1
                continue
            self.issued.append((ck, it))
            fut = torch.futures.collect_all([w.get_future() for w in it.works])
            if self.inside and k > 0:
                attempt(fut.wait)
                self.seen(fut, it, ck)
                k += 1
                continue
            fut.then(lambda f, it=it, ck=ck, k=k: self.guarded(self.callback, f, it, ck, k))
            return
        self.done.set()

    def callback(self, f, it, ck, k):
        self.seen(f, it, ck)
        self.start(k + 1)

    def seen(self, f, it, ck):
        """Writes down what the callback saw of the call's futures; a call that failed
        ends the chain (the thread's wait() for it then says how)."""
        self.run.r.obs[ck]["then"] = saw(f, it)
        ok, _ = attempt(f.wait)
        if not ok:
            raise Stop()

    def guarded(self, fn, *args):
        """A callback's body: an error ends the chain; a harness bug is counted with its
        traceback, never lost on the backend's thread."""
        try:
            fn(*args)
        except Stop:
            self.failed = "an error"
            self.done.set()
        except BaseException:  # noqa: BLE001 - a harness bug: counted, shown
            self.failed = "a harness error"
            self.run.r.stats.add("errors_unclear", {"thread": self.run.t, "key": self.key,
                                                    "error": traceback.format_exc()[-1500:]})
            self.done.set()


def saw(f, it) -> dict:
    """What a then() callback sees of collect_all(the call's futures): done(), and
    each future's state (or what value() raised)."""
    ok, futs = attempt(f.value)
    return {"done": f.done(), "values": [future_state(g, it.storages) for g in futs]
            if ok else f"raised {futs}"}


def run_chain(run, key, step):
    """The chain step of ThreadRun (threads.py)."""
    import torch

    chain = Chain(run, key, step)
    run.r.stats.add("chains")
    trigger = step["trigger"]
    tk = f"{key}.trigger"
    it = run.issue(tk, trigger) if run.member(trigger.group) is not None else None
    if it is None:  # not a member of its group (or gloo refuses it): start at once
        chain.guarded(chain.start)
    else:
        def begin(f):
            run.r.obs[tk]["then"] = saw(f, it)
            ok, _ = attempt(f.value)
            if not ok:  # the trigger failed: the thread's finish() below says how
                chain.failed = "its trigger's error"
                chain.done.set()
                return
            chain.guarded(chain.start)
        torch.futures.collect_all([w.get_future() for w in it.works]).then(begin)
    limit = run.r.limit + 5 * len(step["calls"])
    if not chain.done.wait(limit):
        run.error(key, "chain", PollTimeout(f"the chain did not end within {limit:.0f} s"))
    # The Works' wait() (never inside their own callbacks: gloo marks a Work's future
    # done, running its callbacks, before the Work itself, so that wait() would wait
    # for the callback to return), their state after it, their values.
    if it is not None:
        run.finish(tk, it, "wait")
    for ck, cit in chain.issued:
        run.finish(ck, cit, "wait")
    if chain.failed:
        run.r.obs[key] = {"chain": f"ended by {chain.failed}"}
        raise Stop()
