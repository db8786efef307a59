"""Real hosts and real containers, made of Linux namespaces on this machine.

Host identity: ranks use shared memory between them when they can open each
other's probe file in /dev/shm, not when their host names agree. Two ranks with
the same host name but a /dev/shm each (containers on one host, no --ipc=host)
link over gloo; two with different host names over one /dev/shm (--ipc=host)
link over shared memory. Each rank runs in namespaces of its own (`unshare -m`
for a /dev/shm of its own, `unshare -u` for a host name of its own); they meet
through a file store in the test's directory and over loopback.

A /dev/shm too small for a group's segments (a container's default, or less): every
rank's init_process_group raises a clear error naming the bytes needed, the bytes
free and what to do, instead of a rank dying of SIGBUS mid-collective; and with a
smaller RINGCOLL_CHUNK_BYTES the same /dev/shm carries 64 MiB all-reduces. Each case
runs its ranks inside a mount namespace of its own (`unshare -m`) with a small tmpfs
on /dev/shm; it is skipped, with the reason, where such a namespace cannot be made
(not root, no unshare).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

WORLD = textwrap.dedent("""
    import json, os, sys, tempfile, traceback
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from datetime import timedelta

    def rank_main(rank, p, store, q, n):
        out = {"rank": rank}
        try:
            dist.init_process_group("ringcoll", init_method=f"file://{store}", rank=rank,
                                    world_size=p, timeout=timedelta(seconds=30))
            x = torch.full((n,), float(rank + 1))
            dist.all_reduce(x)
            out["ok"] = bool(torch.equal(x, torch.full((n,), float(p * (p + 1) // 2))))
            dist.destroy_process_group()
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
        q.put(out)

    if __name__ == "__main__":
        p, n = int(sys.argv[1]), int(sys.argv[2])
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        store = os.path.join(tempfile.mkdtemp(), "store")
        procs = [ctx.Process(target=rank_main, args=(r, p, store, q, n)) for r in range(p)]
        for pr in procs:
            pr.start()
        res = [q.get(timeout=120) for _ in procs]
        for pr in procs:
            pr.join(60)
        res.sort(key=lambda r: r["rank"])
        res.append({"exitcodes": [pr.exitcode for pr in procs]})
        print("RESULT " + json.dumps(res), flush=True)
""")


def _can_unshare():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
                           capture_output=True, timeout=30)
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(
    not _can_unshare(), reason="a mount namespace with its own /dev/shm cannot be made here "
                               "(needs root and unshare)")


def _world_in_small_shm(tmp_path, shm_mib, p, n, env):
    script = tmp_path / "world.py"
    script.write_text(WORLD)
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           f"mount -t tmpfs -o size={shm_mib}m tmpfs /dev/shm && "
           f"exec {sys.executable} {script} {p} {n}"]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    full_env.update(env, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=full_env,
                         cwd=tmp_path)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result (exit {out.returncode}):\n{out.stdout}\n{out.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


@needs_namespaces
def test_small_dev_shm_is_a_clear_error_on_every_rank(tmp_path):
    # 2 ranks, 1 MiB slots: each rank's two segments need about 8 MiB each; 12 MiB of
    # /dev/shm holds one segment, not the group's four.
    res = _world_in_small_shm(tmp_path, 12, 2, 1 << 20, {"RINGCOLL_TRANSPORT": "shm",
                                                          "RINGCOLL_CHUNK_BYTES": "1048576"})
    *ranks, codes = res
    assert codes["exitcodes"] == [0, 0], res  # raised, not killed by SIGBUS
    for r in ranks:
        err = r.get("error", "")
        assert "could not reserve" in err and "MiB of shared memory in /dev/shm" in err, r
        assert "free there" in err and "RINGCOLL_CHUNK_BYTES" in err, r
        assert "RINGCOLL_TRANSPORT=gloo" in err and "--shm-size" in err, r


@needs_namespaces
def test_small_slots_fit_a_small_dev_shm(tmp_path):
    # The error's advice works: 64 KiB slots in 4 MiB of /dev/shm, 64 MiB all-reduces.
    res = _world_in_small_shm(tmp_path, 4, 2, 16 << 20, {"RINGCOLL_TRANSPORT": "shm",
                                                          "RINGCOLL_CHUNK_BYTES": "65536"})
    *ranks, codes = res
    assert codes["exitcodes"] == [0, 0], res
    assert all(r.get("ok") for r in ranks), res


RANK = textwrap.dedent("""
    import json, os, sys
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    import ringcoll

    rank, p, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    out = {"rank": rank}
    try:
        dist.init_process_group("ringcoll", init_method=f"file://{store}", rank=rank,
                                world_size=p, timeout=timedelta(seconds=30))
        out["links"] = list(dist.group.WORLD._get_backend(torch.device("cpu")).links)
        x = torch.full((1000,), float(rank + 1))
        dist.all_reduce(x)
        out["ok"] = bool(torch.equal(x, torch.full((1000,), float(p * (p + 1) // 2))))
        dist.destroy_process_group()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    print("RESULT " + json.dumps(out), flush=True)
""")


def _ranks_in_namespaces(tmp_path, setups):
    """One process per rank, rank r inside `unshare <flags>` running `setups[r]`
    (shell) before Python; returns each rank's result."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    procs = []
    for r, (flags, setup) in enumerate(setups):
        cmd = ["unshare", *flags, "--propagation", "private", "sh", "-c",
               f"{setup} && exec {sys.executable} {script} {r} {len(setups)} {store}"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=tmp_path))
    results = []
    for r, pr in enumerate(procs):
        try:
            out, err = pr.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {r} did not finish in 120 s")
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"rank {r}: no result (exit {pr.returncode}):\n{out}\n{err[-3000:]}"
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


@needs_namespaces
def test_same_host_name_but_a_dev_shm_each_links_over_gloo(tmp_path):
    # Before host identity by reachability: "opening rank 0's segment ...: No such file".
    own_shm = "mount -t tmpfs -o size=64m tmpfs /dev/shm"
    res = _ranks_in_namespaces(tmp_path, [(["-m"], own_shm), (["-m"], own_shm)])
    assert all(r.get("ok") for r in res), res
    assert [r["links"] for r in res] == [["", "gloo"], ["gloo", ""]], res


@needs_namespaces
def test_other_host_names_over_one_dev_shm_link_over_shared_memory(tmp_path):
    res = _ranks_in_namespaces(tmp_path, [(["-u"], "hostname rc-probe-a"),
                                          (["-u"], "hostname rc-probe-b")])
    assert all(r.get("ok") for r in res), res
    assert [r["links"] for r in res] == [["", "shm"], ["shm", ""]], res
