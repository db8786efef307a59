"""One world, watched: its ranks (real processes, rank.py) run one round's program on
one backend; a watchdog in this process turns a world that makes no progress for
--stall-s seconds into a hang, with every rank's Python stacks (faulthandler, on
SIGUSR1) and native stacks (gdb -batch, tests/mp.py's), then kills it."""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import signal
import tempfile
import time

from tests.soak.rank import rank_main

NATIVE_FRAMES = 30  # per thread, in a hang's native stacks (a GIL wait is ~8 deep)
# The libraries whose symbols gdb reads for them: ringcoll's, Python's, the C and C++
# runtimes, c10 and torch's Python binding (where a GIL wait or a tensor's release
# shows); not libtorch_cpu (gloo, c10d), whose symbols take gdb 15-20 s to read.
NATIVE_LIBS = ("ringcoll/_C", "libc\\.so", "libstdc", "libpython", "libc10\\.so",
               "libtorch_python")


def _stacks_of(procs, live, tmp):
    """Every live rank's Python stacks (faulthandler on SIGUSR1) and native stacks
    (gdb, every rank at once)."""
    from concurrent.futures import ThreadPoolExecutor

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


def run_world(knobs, plan: dict, backend: str, transport: str | None, ctx) -> dict:
    """One run of the round's program: starts its world, watches it, returns what
    happened (each rank's report, a hang with every stack, crashes, a killed rank,
    what was left in /dev/shm)."""
    p = plan["p"]
    res = {"round": plan["round"], "backend": backend, "transport": transport,
           "ranks": {}, "hang": None, "crashes": [], "killed": None, "seconds": 0.0,
           "ops": 0}
    t0 = time.monotonic()
    shm_before = _shm_entries()
    with tempfile.TemporaryDirectory(prefix="ringcoll-soak-") as tmp:
        beat = ctx.Array("q", p, lock=False)  # each rank's progress: the watchdog's
        issued = ctx.Array("q", p, lock=False)  # each rank's calls issued: when to kill
        reported = ctx.Array("q", p, lock=False)  # ranks whose threads are done
        pipes = [ctx.Pipe(duplex=False) for _ in range(p)]
        procs = [ctx.Process(target=rank_main, args=(r, plan, backend, transport, tmp,
                                                     pipes[r][1], beat, issued, reported),
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
