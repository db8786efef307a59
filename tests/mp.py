"""Multi-process test harness: real processes, tracebacks carried home, timeouts.

    run_world(world_size, fn, *args, timeout=120, transport=None, may_exit=(),
              rank_env=None)

starts `world_size` processes (forked from a server that imported torch: _context); rank r calls
`fn(rank, world_size, *args)` after `init_process_group("ringcoll")` on a shared
FileStore (and, with `gloo=True`, keeps a gloo group on the same ranks at
`tests.mp.GLOO`). A rank that raises sends its formatted traceback to the parent,
which fails the test with every rank's traceback; a world that does not finish in
`timeout` seconds is killed and fails with the ranks that were still running, so
a hang is a failure with a message, never a stuck CI; so is a rank that returned
but does not get through destroy_process_group and exit within EXIT_GRACE_S, and a
rank still running shortly before the kill prints its threads' Python stacks to
stderr. `transport` sets
RINGCOLL_TRANSPORT in every rank (the tests run on "shm" and "gloo"). A rank in
`may_exit` may die without reporting (a test that kills it); its result is None.
`rank_env` gives variables per rank ({"RINGCOLL_HOST": ["a", "b", ...]}; None unsets
the variable in that rank).
`fn` must be a module-level function of an importable module (it is pickled by
name).
"""

from __future__ import annotations

import faulthandler
import io
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import signal
import tempfile
import time
import traceback
from datetime import timedelta

# After a rank reported, how long it may take to tear down and exit.
EXIT_GRACE_S = 30
GLOO = None  # set in each child: a gloo group over the same ranks, for references


def _context():
    """Where ranks come from: a fork server that imported torch and ringcoll once
    (TESTS_MP_START=forkserver, the default), or a fresh interpreter per rank
    (TESTS_MP_START=spawn). A spawned rank imports torch anew, about 0.7 s of CPU:
    on 2 cores a world of 2 took 1.5 s to start and one of 4 took 3.4 s, against
    0.1-0.2 s forked, over about 300 worlds in the suite. The rank's environment is
    the parent's at run_world (plus `env`) either way (_child); what torch reads only
    at import (TORCH_DISTRIBUTED_DEBUG is re-read below) is the parent's."""
    method = os.environ.get("TESTS_MP_START", "forkserver")
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"TESTS_MP_START={method!r}: expected forkserver or spawn")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["torch", "torch.distributed", "ringcoll", "tests.mp"])
    return ctx


def _exit_as_spawned(code):
    """A forked rank's os._exit: a rank ends with os._exit after a fork but with
    sys.exit when spawned, and only the latter runs atexit handlers and C++ static
    destructors. A hang or crash there is a bug the harness must name (EXIT_GRACE_S),
    so a forked rank runs them too before it exits. libc's exit is called with the
    GIL held (PyDLL; CDLL releases it): a destructor or handler that touches Python
    (one does in test_fsdp2's ranks) would otherwise die in PyThreadState_Get, which
    a spawned rank, whose destructors run after the interpreter finalized, never
    does."""
    import atexit
    import ctypes
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    ctypes.PyDLL(None).exit(code)


def _same_output_as(parent):
    """A forked rank's stdout and stderr are the fork server's, opened when it
    started; a spawned one's are the parent's at run_world, where pytest captures
    them for the test (capfd, and the output shown with a failure): take those."""
    for fd in (1, 2):
        try:
            new = os.open(f"/proc/{parent}/fd/{fd}", os.O_WRONLY | os.O_APPEND)
        except OSError:
            continue
        os.dup2(new, fd)
        os.close(new)


def _child(rank, world_size, store_path, fn, args, conn, init_backend, pg_timeout_s, env,
           dump_after_s, exit_grace_s, forked_from=None):
    global GLOO
    if forked_from is not None:
        _same_output_as(forked_from)
    # The environment run_world was called with, exactly: a forked rank starts with
    # the fork server's, which is older.
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():  # None: unset in this rank
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    # A rank still running shortly before the parent kills it prints every thread's
    # Python stack to stderr (pytest shows it with the failure): a hang says where.
    faulthandler.dump_traceback_later(dump_after_s, exit=False)
    # A rank that dies of a signal (an abort in malloc, a segfault) writes its threads'
    # Python stacks to a file the parent puts in the failure's message: CI's summary
    # shows that message, not the rank's stderr.
    global _FATAL
    _FATAL = open(_fatal_path(store_path, rank), "w")
    faulthandler.enable(file=_FATAL, all_threads=True)
    try:
        import torch
        import torch.distributed as dist

        import ringcoll  # noqa: F401  registers the backend

        torch.set_num_threads(1)
        if "TORCH_DISTRIBUTED_DEBUG" in env:  # read at import, before env was set
            dist.set_debug_level_from_env()
        if init_backend:
            dist.init_process_group(
                init_backend,
                init_method=f"file://{store_path}",
                rank=rank,
                world_size=world_size,
                timeout=timedelta(seconds=pg_timeout_s),
            )
            if init_backend != "gloo":
                GLOO = dist.new_group(backend="gloo")
        out = fn(rank, world_size, *args)
        # Serialized here: torch's queue pickling would share tensor memory through
        # file descriptors that vanish when this process exits.
        buf = io.BytesIO()
        torch.save(out, buf)
        # A pipe, not a Queue: send() has written the result when it returns (a
        # Queue's feeder thread needs the GIL later), so a teardown that hangs cannot
        # hide the test's outcome, and the parent tells the two apart.
        conn.send(("ok", buf.getvalue()))
        faulthandler.dump_traceback_later(exit_grace_s * 0.8, exit=False)  # a teardown hang
        if init_backend and dist.is_initialized():  # a test may have aborted it
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
        # The fork server ends the rank with os._exit(code) after this returns; a
        # test's own os._exit (a rank's hard death) stays hard.
        if forked_from is not None:
            os._exit = _exit_as_spawned


_FATAL = None  # a rank's file for faulthandler's report of a fatal signal (_child)


def _fatal_path(store_path, rank):
    return os.path.join(os.path.dirname(store_path), f"fatal-{rank}")


def _died(rank, exitcode, store_path, when="without reporting"):
    """What the parent says of a rank that exited without reporting (or, `when`, at
    another moment): its exit code or signal, and its Python stacks when a fatal
    signal killed it (_child)."""
    how = f"exited with code {exitcode}"
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    try:
        with open(_fatal_path(store_path, rank)) as f:
            stacks = f.read().strip()
    except OSError:
        stacks = ""
    return (f"rank {rank} {how} {when}"
            + (f"; its Python stacks at the signal:\n{stacks}" if stacks else ""))


def _threads_of(pid, native=True):
    """Each thread of a live process: name, state, the kernel function it sleeps in
    and (where readable) its kernel stack; native threads (ours, gloo's) have no
    Python stack, so this is what says which of them is stuck."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"(unreadable: {e})"
    for tid in tids:
        def read(name):
            try:
                with open(f"/proc/{pid}/task/{tid}/{name}") as f:
                    return f.read().strip()
            except OSError:
                return ""
        stat = read("stat")
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        kstack = " <- ".join(l.split()[-1] for l in read("stack").splitlines()[:4])
        lines.append(f"  {tid} {read('comm')!r} state={state} wchan={read('wchan') or '-'}"
                     + (f" kernel: {kstack}" if kstack else ""))
    return "\n".join(lines) + (_native_stacks(pid) if native else "")


def _native_stacks(pid, frames=10, libs=None):
    """Every thread's native stack (gdb, where installed and allowed to attach): a
    hang in C++ (a join, a lock, a wait) shows which call it sits in. `libs`: only
    the shared libraries whose names match these gdb regexes get symbols (the others'
    frames read ??): gdb takes 15-20 s on a loaded 2-core machine to read
    libtorch_cpu's, 2-3 s without them."""
    import re
    import shutil
    import subprocess

    if shutil.which("gdb") is None:
        return ""
    only = []
    if libs is not None:
        only = ["-iex", "set auto-solib-add off"]
        for lib in libs:
            only += ["-ex", f"sharedlibrary {lib}"]
    try:
        out = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", *only, "-ex", "set pagination off",
             "-ex", f"thread apply all bt {frames}"],
            capture_output=True, text=True, timeout=45).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"\n  (gdb: {e})"
    keep = []
    for line in out.splitlines():
        if line.startswith("Thread "):
            keep.append("  " + line)
        elif line.startswith("#"):
            # "#3  0x... in ns::f (args...) at file.cc:12" -> "#3 ns::f at file.cc:12"
            m = re.match(r"(#\d+)\s+(?:0x[0-9a-f]+ in )?(\S+).*?((?: at | from )\S+)?$", line)
            keep.append("    " + (" ".join(g.strip() for g in m.groups() if g) if m else line)[:200])
    return "\n  native stacks (gdb):\n" + "\n".join(keep) if keep else ""


def run_world(world_size, fn, *args, timeout=180, init_backend="ringcoll",
              pg_timeout_s=60, env=None, transport=None, may_exit=(), rank_env=None,
              exit_grace_s=EXIT_GRACE_S):
    """Runs fn on world_size ranks; returns the list of per-rank return values."""
    ctx = _context()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
    if transport is not None:
        env["RINGCOLL_TRANSPORT"] = transport
    outcomes = {}  # rank -> (status, payload); a later "error" (teardown) replaces "ok"
    late = []  # ranks that reported but did not exit
    crashed = []  # ranks that reported success, then died of a signal or exited non-zero
    stuck = {}  # rank -> its threads as the kernel saw them before the kill
    with tempfile.TemporaryDirectory(prefix="ringcoll-test-") as tmp:
        store_path = os.path.join(tmp, "store")
        pipes = [ctx.Pipe(duplex=False) for _ in range(world_size)]
        procs = [
            ctx.Process(
                target=_child,
                args=(r, world_size, store_path, fn, args, pipes[r][1], init_backend,
                      pg_timeout_s,
                      {**env, **{k: v[r] for k, v in (rank_env or {}).items()}},
                      max(timeout - 15, timeout * 0.75), exit_grace_s,
                      None if ctx.get_start_method() == "spawn" else os.getpid()),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        for _, w in pipes:
            w.close()  # the children hold the write ends: EOF once a child is gone
        open_readers = {pipes[r][0]: r for r in range(world_size)}

        def drain(until, done):
            """Reads reports until `done()`, `until`, or every child closed its pipe."""
            while open_readers and not done():
                left = until - time.monotonic()
                if left <= 0:
                    return
                for conn in mpc.wait(list(open_readers), timeout=min(left, 1.0)):
                    r = open_readers[conn]
                    try:
                        status, payload = conn.recv()
                    except EOFError:  # the child closed its end: it is exiting or dead
                        del open_readers[conn]
                        conn.close()
                        if r not in outcomes:  # died without a word (a kill, os._exit)
                            procs[r].join(timeout=5)
                            outcomes[r] = (("exited", None) if r in may_exit else
                                           ("error", _died(r, procs[r].exitcode, store_path)))
                        continue
                    if status == "error" or r not in outcomes:
                        outcomes[r] = (status, payload)

        def reported():
            return len(outcomes) == world_size

        drain(time.monotonic() + timeout, reported)
        # Every rank succeeded: each gets a while to tear down (destroy_process_group,
        # whose errors still arrive) and exit; one that does not is a hang too, named
        # as such. A rank that failed skips destroy_process_group and may be slow to
        # exit with its group alive; the test fails (or expected that) anyway, so it
        # gets a few seconds, as does a world that is stuck.
        clean = reported() and all(s != "error" for s, _ in outcomes.values())
        exit_until = time.monotonic() + (exit_grace_s if clean else 5)
        if reported():
            drain(exit_until, lambda: False)
        for r, p in enumerate(procs):
            p.join(timeout=max(0.1, exit_until - time.monotonic()))
            if p.is_alive():
                if clean:
                    late.append(r)
                if clean or not reported():  # a hang, reported below with its threads
                    stuck[r] = _threads_of(p.pid, native=len(stuck) < 2)  # gdb: seconds
                p.kill()
                p.join()
            elif (outcomes.get(r, ("",))[0] == "ok" and r not in may_exit
                  and p.exitcode not in (0, None)):
                # A crash in destroy_process_group or at exit (a use-after-free in
                # teardown, say) fails the test even though the result came home.
                crashed.append(_died(r, p.exitcode, store_path,
                                     "after it returned its result (in destroy_process_group "
                                     "or at exit)"))
        for conn in open_readers:
            conn.close()
    missing = [r for r in range(world_size) if r not in outcomes]
    errors = [f"--- rank {r} ---\n{payload}" for r, (status, payload) in sorted(outcomes.items())
              if status == "error"]
    if missing:
        errors.append(f"ranks {missing} did not finish within {timeout} s (hang?) and were killed")
    if late:
        errors.append(f"ranks {late} returned but did not exit within {exit_grace_s} s "
                      "(a hang in destroy_process_group or at exit) and were killed")
    errors += crashed
    if missing or late:
        errors += [f"--- rank {r}'s threads (its Python stacks are on stderr) ---\n{t}"
                   for r, t in sorted(stuck.items())]
    if errors:
        raise AssertionError(f"world of {world_size} failed:\n" + "\n".join(errors))
    import torch

    return [None if outcomes[r][0] == "exited"
            else torch.load(io.BytesIO(outcomes[r][1]), weights_only=False)
            for r in range(world_size)]


def run_checks(world_size, fn, *args, label="", limit=40, **kwargs):
    """run_world for an `fn` that returns a list of failure strings on each rank;
    fails the test with every rank's failures (the first `limit`)."""
    per_rank = run_world(world_size, fn, *args, **kwargs)
    failures = [f"{label}rank {r}: {f}" for r, fs in enumerate(per_rank) for f in fs]
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:limit])
