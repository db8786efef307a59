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

Two hosts, for real (tests/netns.py builds them: a network namespace each, joined by
a veth pair, with a host name and a /dev/shm of its own): 2 hosts x 2 ranks under
`torchrun --nnodes 2 --nproc_per_node 2` with a c10d rendezvous on host 0's veth
address run every collective with every algorithm that provides it, equal bit for
bit to the exact values and to gloo's; RINGCOLL_DEBUG shows shared memory within a
host and gloo between them, and a group whose ranks alternate between the hosts
runs its ring host by host. Killing one host's ranks (SIGKILL) makes the other
host's ranks raise at once naming them; cutting the link between the hosts makes
them raise when the group's timeout runs out. Skipped, with the reason, where the
namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.netns import TwoHosts

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


def _results_of(tmp_path, cmds):
    """Runs one command per rank (each prints "RESULT <json>") and returns the
    results, every rank's output in the failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=tmp_path) for cmd in cmds]
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


def _ranks_in_namespaces(tmp_path, setups):
    """One process per rank, rank r inside `unshare <flags>` running `setups[r]`
    (shell) before Python; returns each rank's result."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    store = tmp_path / "store"
    return _results_of(tmp_path, [
        ["unshare", *flags, "--propagation", "private", "sh", "-c",
         f"{setup} && exec {sys.executable} {script} {r} {len(setups)} {store}"]
        for r, (flags, setup) in enumerate(setups)])


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
# --------------------------------------------------------------------------------
# two hosts: network namespaces joined by a veth pair (tests/netns.py)

WORKER = REPO / "tests" / "hosts_worker.py"
_unavailable: list = []  # the probe's answer, once per session


@pytest.fixture
def two_hosts():
    if not _unavailable:
        _unavailable.append(TwoHosts.unavailable())
    if _unavailable[0] is not None:
        pytest.skip(f"two hosts of namespaces cannot be made here: {_unavailable[0]}")
    hosts = TwoHosts()
    try:
        hosts.open()
        yield hosts
    finally:
        hosts.close()
    assert not hosts.leftovers(), f"left behind: {hosts.leftovers()}"


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RINGCOLL_", "GLOO_", "MASTER_", "TORCHELASTIC_", "NCCL_"))
           and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **extra)
    return env


def _wait(procs, timeout):
    """Each process's exit code, None for one still running after `timeout` s."""
    deadline = time.monotonic() + timeout
    codes = []
    for pr in procs:
        try:
            codes.append(pr.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def _results(out: Path) -> dict:
    return {int(f.stem[4:]): json.loads(f.read_text()) for f in out.glob("rank*.json")}


def _story(hosts: TwoHosts, out: Path, codes=None) -> str:
    """Everything a failure needs: exit codes, every log, every rank's result."""
    parts = [f"hosts {hosts.names} at {hosts.addrs}, exit codes {codes}"]
    for log in sorted(list(hosts.dir.glob("*.log")) + list(out.glob("*.log"))):
        parts.append(f"---- {log.name}\n{log.read_text(errors='replace')[-6000:]}")
    for r, res in sorted(_results(out).items()):
        parts.append(f"---- rank {r}: {json.dumps(res, indent=1)[:6000]}")
    return "\n".join(parts)


DEBUG_LINE = re.compile(r"\[ringcoll rank (\d+)/4\] RINGCOLL_ALGO=(\S*) .*RINGCOLL_TRACE=(\S*) "
                        r"transport=(\S+) links=(\S+) hosts=(\S+)")


@needs_namespaces
def test_two_hosts_torchrun_every_collective_and_algorithm(two_hosts):
    h = two_hosts
    out = h.dir / "out"
    out.mkdir()
    env = _env(RINGCOLL_DEBUG="1")
    procs = []
    for k in (0, 1):
        # --node_rank is not given: the c10d rendezvous ignores it and numbers the
        # hosts in the order they join.
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                "--nproc_per_node", "2", "--rdzv_backend", "c10d",
                "--rdzv_endpoint", f"{h.addrs[0]}:29400", "--rdzv_id", f"rc-{h.tag}",
                "--rdzv_conf", "join_timeout=60", "--max_restarts", "0",
                "--monitor_interval", "0.2", str(WORKER), "grid", str(out)]
        procs.append(h.spawn(k, argv, env, h.dir / f"host{k}.log"))
    codes = _wait(procs, 150)
    story = _story(h, out, codes)
    assert codes == [0, 0], story
    res = _results(out)
    assert sorted(res) == [0, 1, 2, 3], story
    for r, x in res.items():
        assert "error" not in x and x["failures"] == [], story
        assert x["checks"] >= 120, story  # every collective of every algorithm ran
        assert len(x["algorithms"]) >= 7, story

    # Hosts: torchrun puts each host's two ranks side by side; which host gets
    # ranks 0 and 1 is the rendezvous's choice.
    host_of = [res[r]["hostname"] for r in range(4)]
    assert sorted(host_of) == sorted(h.names * 2), story
    assert host_of[0] == host_of[1] != host_of[2] == host_of[3], story
    assert len({res[r]["host"] for r in range(4)}) == 2, story  # ringcoll's own identity

    def want_links(me, hosts):
        return ["" if q == me else "shm" if hosts[q] == hosts[me] else "gloo"
                for q in range(4)]

    for r in range(4):
        assert res[r]["links"] == want_links(r, host_of), story

    # RINGCOLL_DEBUG: every ringcoll group of every rank says shared memory within
    # the host and gloo to the other host ("-": the rank itself).
    logs = "".join((h.dir / f"host{k}.log").read_text(errors="replace") for k in (0, 1))
    lines = DEBUG_LINE.findall(logs)
    world = [ln for ln in lines if ln[2] == ""]
    assert len(world) == 4 * (1 + len(res[0]["algorithms"])), story  # WORLD, one per algo
    for rank, algo, _, transport, links, hosts in world:
        want = ",".join(x or "-" for x in want_links(int(rank), host_of))
        assert (transport, links) == ("shm+gloo", want), (rank, algo, transport, links)
        assert hosts == "0,0,1,1", (rank, algo, hosts)  # the layout twolevel reads
    for algo, a in res[0]["algorithms"].items():
        op = next(op for c, op in (("allreduce", "all_reduce"),
                                   ("allgather", "all_gather_into_tensor"),
                                   ("alltoall", "all_to_all_single")) if c in a["provides"])
        assert re.search(rf"\] {op} \d+ B: {algo} \(RINGCOLL_ALGO={algo}\)", logs), algo

    # The ring runs host by host: in a group whose ranks alternate between the hosts
    # (group rank = local rank * 2 + host), a ring all-reduce sends only to the next
    # rank of that order and receives only from the previous one.
    inter = {x["interleaved"]["rank"]: (x["interleaved"], x["hostname"]) for x in res.values()}
    g_host = [inter[i][1] for i in range(4)]
    assert g_host[0] == g_host[2] != g_host[1] == g_host[3], story
    order = [0, 2, 1, 3]
    for i, (x, _) in inter.items():
        at = order.index(i)
        assert x["ok"] and x["links"] == want_links(i, g_host), story
        assert x["sends_to"] == [order[(at + 1) % 4]], story
        assert x["recvs_from"] == [order[(at - 1) % 4]], story
    inter_lines = [ln for ln in lines if ln[2] != ""]
    assert sorted(int(ln[0]) for ln in inter_lines) == [0, 1, 2, 3], story
    for rank, _, _, transport, links, _ in inter_lines:
        want = ",".join(x or "-" for x in want_links(int(rank), g_host))
        assert (transport, links) == ("shm+gloo", want), (rank, transport, links)


def _kill_world(h: TwoHosts, timeout_s: int):
    """Ranks 0-1 on host 0 and 2-3 on host 1, all-reducing in a loop; returns
    (procs, out, pids of the ranks once each has done a few all-reduces)."""
    out = h.dir / "out"
    out.mkdir()
    env = _env(GROUP_TIMEOUT_S=str(timeout_s), SURVIVORS="0,1", MASTER_PORT="29500")
    argv = [sys.executable, str(WORKER), "kill", str(out)]
    procs = [h.spawn_ranks(k, argv, env, 2, out) for k in (0, 1)]
    deadline = time.monotonic() + 90
    while len(list(out.glob("running*"))) < 4 and time.monotonic() < deadline:
        if any(pr.poll() is not None for pr in procs):
            break
        time.sleep(0.05)
    pids = {int(f.name[len("running"):]): int(f.read_text()) for f in out.glob("running*")}
    assert sorted(pids) == [0, 1, 2, 3], _story(h, out, [pr.poll() for pr in procs])
    return procs, out, pids


def _survivors(h, out, procs, cut_at, timeout_s):
    """Host 0's ranks: exit 1 after raising within the timeout; their results."""
    codes = _wait(procs[:1], timeout_s + 30)
    story = _story(h, out, codes)
    assert codes == [0], story
    shell = (out / "host0.log").read_text()
    assert "rank 0 exit 1" in shell and "rank 1 exit 1" in shell, story
    res = _results(out)
    for r in (0, 1):
        x = res.get(r, {})
        assert "raised" in x and "error" not in x, story
        assert x["raised"].startswith("DistBackendError: ringcoll::allreduce #"), story
        assert x["raised_at"] - cut_at < timeout_s + 2, story
        assert "destroy_seconds" in x, story
    return res, story


def _names_host1(msg: str) -> bool:
    """The message names rank 2 or 3 (past its own "(rank R of 4): " label)."""
    return re.search(r"\brank [23]\b", msg.split("): ", 1)[1]) is not None


@needs_namespaces
def test_two_hosts_killed_host_is_named_at_once(two_hosts):
    h = two_hosts
    procs, out, pids = _kill_world(h, timeout_s=10)
    on_host1 = set(h.pids(1))
    assert {pids[2], pids[3]} <= on_host1 and not {pids[0], pids[1]} & on_host1
    cut_at = time.time()
    for r in (2, 3):
        os.kill(pids[r], signal.SIGKILL)
    res, story = _survivors(h, out, procs, cut_at, 10)
    assert _wait(procs[1:], 10) == [0], story
    shell1 = (out / "host1.log").read_text()
    assert "rank 2 exit 137" in shell1 and "rank 3 exit 137" in shell1, story  # SIGKILL
    for r in (0, 1):
        msg = res[r]["raised"]
        # the peer's closed connection (gloo), or another survivor's report of it
        assert _names_host1(msg) and ("failed (gloo:" in msg or "exited" in msg), story
        assert res[r]["raised_at"] - cut_at < 3, story  # at once, not at the timeout


@needs_namespaces
def test_two_hosts_cut_link_times_out_naming_a_peer(two_hosts):
    h = two_hosts
    procs, out, pids = _kill_world(h, timeout_s=5)
    cut_at = time.time()
    subprocess.run(["ip", "-n", h.names[1], "link", "set", h.veths[1], "down"],
                   check=True, timeout=20)
    res, story = _survivors(h, out, procs, cut_at, 5)
    msgs = [res[r]["raised"] for r in (0, 1)]
    for r in (0, 1):
        assert "Timed out after 5000 ms" in msgs[r], story
        assert re.search(r"waiting for rank \d", msgs[r]), story
        assert res[r]["raised_at"] - res[r]["last_ok"] >= 4.9, story
    # The rank whose gloo peer is on the other host names it; its neighbour, which
    # waits on it over shared memory, may name that neighbour instead.
    assert any(_names_host1(m) for m in msgs), story


LEAVER = textwrap.dedent("""
    import json, os, sys, time
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    import ringcoll

    rank, store = int(sys.argv[1]), sys.argv[2]
    out = {"rank": rank, "pid": os.getpid()}
    dist.init_process_group("ringcoll", init_method=f"file://{store}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=60))
    out["links"] = list(dist.group.WORLD._get_backend(torch.device("cpu")).links)
    x = torch.ones(1000)
    dist.all_reduce(x)
    if rank == 1:
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)  # leaves while rank 0 waits for it in the next all-reduce
    t0 = time.monotonic()
    try:
        dist.all_reduce(x)
        out["error"] = "no error"
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["seconds"] = time.monotonic() - t0
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
""")


@needs_namespaces
def test_a_peer_in_another_pid_namespace_that_exits_is_named_at_once(tmp_path):
    # Each rank in a PID namespace of its own (both are pid 1 there) over one
    # /dev/shm: a pid means nothing to the other rank, so liveness must not use it.
    script = tmp_path / "leaver.py"
    script.write_text(LEAVER)
    res = _results_of(tmp_path, [["unshare", "-p", "-f", "--mount-proc", sys.executable,
                                  str(script), str(r), str(tmp_path / "store")]
                                 for r in range(2)])
    assert [r["pid"] for r in res] == [1, 1], res  # really in namespaces of their own
    assert res[0]["links"] == ["", "shm"], res
    assert "rank 1 (pid 1) exited" in res[0]["error"], res
    assert res[0]["seconds"] < 20, res  # at once, not at the 60 s timeout
