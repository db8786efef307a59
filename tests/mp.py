"""Multi-process test harness: real processes, tracebacks carried home, timeouts.

    run_world(world_size, fn, *args, timeout=120, transport=None, may_exit=(),
              rank_env=None)

spawns `world_size` fresh processes; rank r calls
`fn(rank, world_size, *args)` after `init_process_group("ringcoll")` on a shared
FileStore (and, with `gloo=True`, keeps a gloo group on the same ranks at
`tests.mp.GLOO`). A rank that raises sends its formatted traceback to the parent,
which fails the test with every rank's traceback; a world that does not finish in
`timeout` seconds is killed and fails with the ranks that were still running, so
a hang is a failure with a message, never a stuck CI. `transport` sets
RINGCOLL_TRANSPORT in every rank (the tests run on "shm" and "gloo"). A rank in
`may_exit` may die without reporting (a test that kills it); its result is None.
`rank_env` gives variables per rank ({"RINGCOLL_HOST": ["a", "b", ...]}).
`fn` must be a module-level function of an importable module (spawn pickles it by
name).
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import queue
import tempfile
import time
import traceback
from datetime import timedelta

GLOO = None  # set in each child: a gloo group over the same ranks, for references


def _child(rank, world_size, store_path, fn, args, results, init_backend, pg_timeout_s, env):
    global GLOO
    os.environ.update(env)
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
        results.put((rank, "ok", buf.getvalue()))
        if init_backend and dist.is_initialized():  # a test may have aborted it
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - everything goes to the parent
        results.put((rank, "error", traceback.format_exc()))


def run_world(world_size, fn, *args, timeout=180, init_backend="ringcoll",
              pg_timeout_s=60, env=None, transport=None, may_exit=(), rank_env=None):
    """Runs fn on world_size ranks; returns the list of per-rank return values."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    env = {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", **(env or {})}
    if transport is not None:
        env["RINGCOLL_TRANSPORT"] = transport
    with tempfile.TemporaryDirectory(prefix="ringcoll-test-") as tmp:
        store_path = os.path.join(tmp, "store")
        procs = [
            ctx.Process(
                target=_child,
                args=(r, world_size, store_path, fn, args, results, init_backend,
                      pg_timeout_s,
                      {**env, **{k: v[r] for k, v in (rank_env or {}).items()}}),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        outcomes = {}
        while len(outcomes) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, payload = results.get(timeout=min(left, 1.0))
                outcomes[rank] = (status, payload)
            except queue.Empty:
                # A rank that died without reporting (segfault, os._exit) fails now.
                dead = [r for r, p in enumerate(procs)
                        if r not in outcomes and p.exitcode is not None]
                for r in [r for r in dead if r in may_exit]:
                    outcomes[r] = ("exited", None)
                    dead.remove(r)
                if dead:
                    time.sleep(0.5)  # let a last report drain
                    while not results.empty():
                        rank, status, payload = results.get_nowait()
                        outcomes[rank] = (status, payload)
                    for r in dead:
                        if r not in outcomes:
                            outcomes[r] = ("error",
                                           f"rank {r} exited with code {procs[r].exitcode} "
                                           "without reporting")
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    missing = [r for r in range(world_size) if r not in outcomes]
    errors = [f"--- rank {r} ---\n{payload}" for r, (status, payload) in sorted(outcomes.items())
              if status == "error"]
    if missing:
        errors.append(f"ranks {missing} did not finish within {timeout} s (hang?) and were killed")
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
