"""Two "hosts" on this machine, made of Linux namespaces (tests/test_hosts.py and
benchmarks/hosts_netns.py).

    with TwoHosts() as hosts:                  # or TwoHosts.unavailable() -> reason
        hosts.shape("1gbit")                   # optional: tc tbf on both veth ends
        procs = [hosts.spawn(k, ["torchrun", ...], env, log) for k in (0, 1)]
        # or, without torchrun: hosts.spawn_ranks(k, [python, script], env, 2, logdir)

Each host is a network namespace of its own (`ip netns add rc-h<k>-<tag>`), joined to
the other by a veth pair with addresses in a private /30 (10.213.<x>.1 and .2, never
routed anywhere: the pair's two ends are the only interfaces besides each namespace's
loopback). A host's programs run in a shell started by

    ip netns exec rc-h<k>-<tag> unshare -m -u --propagation private sh -c '
        mount -t tmpfs -o size=<shm> tmpfs /dev/shm &&   # a /dev/shm of its own
        mount --bind <dir>/hosts /etc/hosts &&           # both host names -> veth
        hostname rc-h<k>-<tag> || exit 97; exec "$@"' sh ARGV...

(spawn(); spawn_ranks() starts a host's ranks from one such shell instead, which
waits on each by pid and prints its exit code), so it has its own network, host name (UTS) and /dev/shm. The hosts file maps both host
names to their veth addresses: torchrun and gloo resolve the host's own name to pick
the address they listen on, and would otherwise fall back to loopback. The boot id is
the same in every namespace; ringcoll tells the hosts apart by host name.

Teardown (close(), also on an exception) kills whatever still runs in either
namespace (SIGKILL, by pid from `ip netns pids`), waits for the spawned processes and
deletes both namespaces, which deletes the veth pair with them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

SHM_SIZE = "512m"


def _ip(*args, check=True, timeout=20):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise OSError(f"ip {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


class TwoHosts:
    """Two namespaces joined by a veth pair; see the module docstring."""

    def __init__(self, shm_size: str = SHM_SIZE):
        tag = f"{os.getpid() % 10000}{random.randrange(1000):03d}"
        self.tag = tag
        self.names = [f"rc-h0-{tag}", f"rc-h1-{tag}"]  # namespace = host name
        self.veths = [f"rcv0-{tag}", f"rcv1-{tag}"]    # host k's end
        x = random.randrange(1, 255)
        self.addrs = [f"10.213.{x}.1", f"10.213.{x}.2"]
        self.shm_size = shm_size
        self.dir = Path(tempfile.mkdtemp(prefix="ringcoll-hosts-"))
        self.procs: list[subprocess.Popen] = []
        self.made: list[str] = []
        self.build_seconds = 0.0

    # ------------------------------------------------------------------ set-up

    def commands(self) -> list[list[str]]:
        """The ip commands that build the two hosts, in order."""
        n, v, a = self.names, self.veths, self.addrs
        return [["netns", "add", n[0]], ["netns", "add", n[1]],
                ["link", "add", v[0], "type", "veth", "peer", "name", v[1]],
                ["link", "set", v[0], "netns", n[0]], ["link", "set", v[1], "netns", n[1]],
                ["-n", n[0], "addr", "add", f"{a[0]}/30", "dev", v[0]],
                ["-n", n[1], "addr", "add", f"{a[1]}/30", "dev", v[1]],
                ["-n", n[0], "link", "set", "lo", "up"], ["-n", n[1], "link", "set", "lo", "up"],
                ["-n", n[0], "link", "set", v[0], "up"], ["-n", n[1], "link", "set", v[1], "up"]]

    def open(self) -> "TwoHosts":
        t0 = time.monotonic()
        try:
            for cmd in self.commands():
                if cmd[:2] == ["link", "add"]:
                    self.made.append("veth")
                _ip(*cmd)
                if cmd[:2] == ["netns", "add"]:
                    self.made.append(cmd[2])
        except BaseException:
            self.close()
            raise
        (self.dir / "hosts").write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{a} {n}\n" for a, n in zip(self.addrs, self.names)))
        self.build_seconds = time.monotonic() - t0
        return self

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()

    def shape(self, rate: str, burst: str = "256kb", latency: str = "50ms") -> list[str]:
        """Limits both veth ends' egress to `rate` (tc tbf); returns the commands."""
        cmds = []
        for ns, dev in zip(self.names, self.veths):
            cmd = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                   "burst", burst, "latency", latency]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                raise OSError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
            cmds.append(" ".join(cmd))
        return cmds

    # ------------------------------------------------------------------ running

    def shell(self, k: int, body: str) -> list[str]:
        """argv that runs the shell command `body` as host k (see the module
        docstring); arguments appended to it are the shell's "$@"."""
        script = (f"mount -t tmpfs -o size={self.shm_size} tmpfs /dev/shm && "
                  f"mount --bind {self.dir / 'hosts'} /etc/hosts && "
                  f"hostname {self.names[k]} || exit 97; {body}")
        return ["ip", "netns", "exec", self.names[k], "unshare", "-m", "-u",
                "--propagation", "private", "sh", "-c", script, "sh"]

    def _popen(self, argv, env, log):
        with open(log, "wb") as f:
            pr = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                  cwd=self.dir, start_new_session=True)
        self.procs.append(pr)
        return pr

    def spawn(self, k: int, argv: list[str], env: dict, log: Path) -> subprocess.Popen:
        """Runs argv as host k (the shell execs it), stdout and stderr to `log`."""
        return self._popen(self.shell(k, 'exec "$@"') + list(argv), env, log)

    def spawn_ranks(self, k: int, argv: list[str], env: dict, per_host: int,
                    logs: Path) -> subprocess.Popen:
        """Starts ranks k * per_host ... (k + 1) * per_host - 1 of a world of
        2 * per_host (argv each, with RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE,
        MASTER_ADDR = host 0's veth address, MASTER_PORT in env) from one shell as host
        k, which waits on each by pid and prints "rank R exit CODE" (128 + n: killed
        by signal n). Rank r's output goes to logs/rank<r>.log."""
        env = {**env, "LOCAL_WORLD_SIZE": str(per_host), "WORLD_SIZE": str(2 * per_host),
               "MASTER_ADDR": self.addrs[0], "MASTER_PORT": env.get("MASTER_PORT", "29500")}
        body = []
        for local in range(per_host):
            r = k * per_host + local
            body.append(f'RANK={r} LOCAL_RANK={local} "$@" >{logs}/rank{r}.log 2>&1 & p{local}=$!')
        for local in range(per_host):
            body.append(f'wait $p{local}; echo "rank {k * per_host + local} exit $?"')
        return self._popen(self.shell(k, "; ".join(body)) + list(argv), env,
                           logs / f"host{k}.log")

    def pids(self, k: int) -> list[int]:
        """Every process running in host k's network namespace."""
        r = _ip("netns", "pids", self.names[k], check=False)
        return [int(x) for x in r.stdout.split()] if r.returncode == 0 else []

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        for k, ns in enumerate(self.names):
            if ns in self.made:
                for pid in self.pids(k):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for pr in self.procs:
            if pr.poll() is None:
                try:
                    os.killpg(pr.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                pr.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.names:
            if ns in self.made:
                _ip("netns", "del", ns, check=False)
        if "veth" in self.made and self.names[0] not in self.made:
            _ip("link", "del", self.veths[0], check=False)  # made but never moved
        self.made.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """Namespaces or veths of this pair that still exist (nothing after close())."""
        out = [ns for ns in self.names if ns in _ip("netns", "list", check=False).stdout.split()]
        for v in self.veths:
            if _ip("link", "show", v, check=False).returncode == 0:
                out.append(v)
        return out

    @staticmethod
    def unavailable() -> str | None:
        """Why two hosts cannot be made here (None: they can): probes by making and
        deleting a namespace with a mount namespace, tmpfs and host name inside."""
        if os.geteuid() != 0:
            return "needs root (network and mount namespaces, veth pairs)"
        for tool in ("ip", "unshare", "tc"):
            if shutil.which(tool) is None:
                return f"needs `{tool}`, which is not installed"
        probe = TwoHosts(shm_size="1m")
        try:
            probe.open()
            r = subprocess.run(probe.shell(0, "true"), capture_output=True,
                               text=True, timeout=30)
            if r.returncode != 0:
                return f"cannot run a shell in a namespace of its own: {r.stderr.strip()}"
        except (OSError, subprocess.SubprocessError) as e:
            return f"cannot make network namespaces and a veth pair here: {e}"
        finally:
            probe.close()
        return None
