"""The cost model: what a collective costs, derived from its schedules.

    from ringcoll import model
    cal = model.load()                                  # RINGCOLL_MODEL or defaults
    model.predict("rhd", "all_reduce", p=4, nbytes=1 << 20, transport="shm", cal=cal)
    model.terms(...)                                    # the same, as alpha/beta/gamma counts

Nothing here is written per algorithm: every count comes from the schedules the
extension builds (`_C.schedule_table`, every rank), so a new algorithm is modelled
the moment it is registered.

Assumptions (each a simplification that the measurements of `python -m
ringcoll.model` judge):

  * loads    In step s rank r handles the transfers its schedule lists there. The
             executor cuts each into segments of at most RINGCOLL_CHUNK_BYTES; every
             segment is a message, paid at both ends. Rank r's load in step s is
               msgs   segments it sends plus segments it receives,
               bytes  bytes it sends plus bytes it receives,
               reduced  bytes it receives and reduces into place,
             and costs  alpha * msgs + beta * bytes + gamma * reduced  seconds.
             alpha and beta belong to the transport (shm, gloo), gamma to the dtype.
             A local transfer (peer = the rank itself, as one-shot folds its own
             input in, as a Bruck all-to-all packs the blocks it forwards) is no
             message: a local reduce pays gamma on its bytes, a local copy `copy`
             on its bytes (the memcpy rate staging pays), in the step it is in.
  * ports    A rank moves `ports` of a step's transfers at once (a transport's
             calibrated constant; 1, one after another, by default): with e_i =
             alpha * msgs_i + beta * bytes_i for each transfer (the header's: one
             per peer), its messages cost max(max_i e_i, sum_i e_i / ports), the
             simulator's rule (ringcoll.sim.cost), on top of what it reduces and
             copies. `--calibrate` fits ports = 1..4 and keeps the best.
  * steps    A step lasts as long as its slowest rank, and steps follow one another:
             a call costs  overhead + sum over steps of the step's time. The
             executor has no barrier between steps and pipelines segments across
             them, but each step's segments wait for the previous step's, so on
             this critical path the per-step maximum is the simple, slightly
             pessimistic choice (forwarding, which saves a copy, is not credited).
  * rounds   Every step in which anything moves also costs `step` once: the
             latency of one round of hand-offs (the receiver noticing what the
             sender published), paid once however many messages the step carries,
             while alpha is what each message costs its two ends. When ranks
             outnumber cores a round can wait for a rank to be scheduled again: on
             this 2-core VM 4 ranks over shm take 36 us (oneshot, 4 rounds with the
             header) and 80 us (ring, 7 rounds) for the same 512-byte all-reduce
             (benchmarks/results/model-cpu.txt). How a fit shares that between
             `step` and the per-message cost is up to the measurements: the
             committed calibration puts nearly all of it in alpha (2.6 us a message
             end with crowded ranks against 0.03 us without; `step` 0.7 us).
  * header   With RINGCOLL_FINGERPRINT on (the default) every call opens with one
             64-byte header to and from each peer of the rank's schedule and each of
             its ring neighbours: a step of its own, counted the same way.
  * cores    Ranks share the host's cores. When p ranks outnumber the c cores, a
             step cannot take less than the work of all its ranks spread over c
             cores (sum over ranks of their cost / c), and every message pays
             `wake` on top of alpha: a rank waiting for it has yielded its core and
             must be scheduled again. Crowded ranks change every constant (waiting
             turns from spinning into sleeping), so a calibration may carry a
             second set per transport, "<transport>/crowded", fitted on worlds
             with more ranks than cores and used for them.
  * staging  Before its schedule runs, a collective's entry copies what the schedule
             must not work on in place (csrc/backend/api.cc): reduce-scatter copies
             its whole input into the working buffer and its block out again (n +
             n/p bytes), all-gather copies its input into its block (n/p), reduce
             copies a non-root's input (n), all-reduce and broadcast work in place
             on contiguous tensors (0). Each rank pays `copy` per byte copied (the
             host's single-thread memcpy, timed like gamma), as one step of its
             own: the slowest rank's copy, or all ranks' spread over the cores.
  * overhead A constant per call (issuing it, waking the worker, completing the
             Work), paid once.

A size is the collective's buffer as ringcoll.bench counts it (the all-reduce
tensor, the whole reduce-scatter input, the whole all-gather output, the broadcast
tensor), cut into elements of the dtype (float32 unless said otherwise).

Calibration (`python -m ringcoll.model --calibrate`) fits overhead, alpha, beta
and step per transport (and wake when one set serves both crowded and uncrowded
worlds, the only fit that can tell it from alpha) by least squares over measured
calls (relative error, the counts above as the design matrix), times the CPU
reducer for gamma per dtype and a memcpy for copy.
A calibration is a small JSON file (see Calibration); RINGCOLL_MODEL names the one
`auto` and `python -m ringcoll.model` use. Without it they use DEFAULTS below.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import _C

# The bench's collective names (torch's) -> the schedule's (ringcoll.check) and
# RINGCOLL_ALGO's: every collective ringcoll runs.
SCHEDULE_NAME = {"all_reduce": "allreduce", "reduce_scatter": "reduce_scatter",
                 "all_gather": "allgather", "broadcast": "broadcast", "reduce": "reduce",
                 "gather": "gather", "scatter": "scatter", "all_to_all": "alltoall"}
SELECT_NAME = {"all_reduce": "allreduce", "reduce_scatter": "reducescatter",
               "all_gather": "allgather", "broadcast": "broadcast", "reduce": "reduce",
               "gather": "gather", "scatter": "scatter", "all_to_all": "alltoall"}
COLLECTIVES = tuple(SCHEDULE_NAME)
# p blocks of n / p elements: n is a multiple of p
BLOCKED = ("reduce_scatter", "all_gather", "gather", "scatter", "all_to_all")
TRANSPORTS = ("shm", "gloo")  # the host transports; "nccl" is CUDA's (GPU_LINK)
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
HEADER_BYTES = 64
DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_COPY = 1e-10  # ~10 GB/s single-thread memcpy; calibrations carry their own


class CalibrationError(ValueError):
    """A calibration file that cannot be used; the message names the file and why."""


@dataclass
class LinkCost:
    """One transport's constants, in seconds (per call, per message end, per byte
    end, per message when ranks outnumber cores, per step in which anything moves),
    and what sets a transport apart from the calibration's host transports where
    it does: its own segment size (chunk_bytes, 0: the calibration's), whether its
    calls carry the header (fingerprint, -1: the calibration's), its own seconds
    per byte reduced and copied (gamma, copy; -1: the calibration's), and whether it
    runs steps in batches (layered: a stream-ordered transport, NCCL, posts the
    steps of a layer as one batch, engine/plan.h, and pays a layer as one step),
    the cores of the host its ranks share (cores, 0: the calibration's), and how many
    of a step's transfers a rank moves at once (ports: the module docstring's
    `ports`; 1, one after another, unless a calibration measured more)."""
    overhead: float
    alpha: float
    beta: float
    wake: float = 0.0
    step: float = 0.0
    chunk_bytes: int = 0
    fingerprint: int = -1
    gamma: float = -1.0
    copy: float = -1.0
    layered: bool = False
    cores: int = 0
    ports: int = 1


@dataclass
class Calibration:
    transports: dict  # name -> LinkCost
    gamma: dict       # dtype -> seconds per byte reduced
    cores: int        # cores of the host the ranks share
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    fingerprint: bool = True
    source: str = "defaults"  # where it came from, for logs and tables
    meta: dict = field(default_factory=dict)
    copy: float = DEFAULT_COPY  # seconds per byte a rank's entry copies (staging)

    def link(self, transport: str, p: int = 1) -> LinkCost:
        """The constants of `transport` for p ranks: those of "<transport>/crowded"
        when the ranks outnumber the cores and the calibration has them."""
        if p > self.cores and f"{transport}/crowded" in self.transports:
            return self.transports[f"{transport}/crowded"]
        if transport not in self.transports:
            raise CalibrationError(f"{self.source}: no constants for transport {transport!r} "
                                   f"(has: {', '.join(self.transports)})")
        return self.transports[transport]

    def to_json(self) -> dict:
        return {"version": 1, "cores": self.cores, "chunk_bytes": self.chunk_bytes,
                "fingerprint": self.fingerprint, "copy": self.copy,
                "transports": {k: asdict(v) for k, v in self.transports.items()},
                "gamma": dict(self.gamma), "meta": self.meta}


# Rounded from benchmarks/results/model-cpu.json (2-core AMD EPYC VM, shared and
# noisy): what auto uses when RINGCOLL_MODEL names no calibration. Ratios between
# transports and between per-call, per-message and per-byte terms matter for the
# choice more than the absolute figures.
DEFAULTS = Calibration(
    transports={"shm": LinkCost(overhead=7.0e-6, alpha=2.7e-8, beta=2.5e-11),
                "shm/crowded": LinkCost(overhead=2.0e-5, alpha=2.6e-6, beta=5.6e-11, step=7.2e-7),
                "gloo": LinkCost(overhead=1.75e-4, alpha=4.7e-5, beta=2.7e-10),
                "gloo/crowded": LinkCost(overhead=2.4e-4, alpha=5.3e-5, beta=1.9e-10),
                # CUDA tensors over NCCL (GPU_CALIBRATION below)
                "nccl": None},
    gamma={"float32": 4.8e-11, "float64": 4.6e-11, "float16": 4.7e-11, "bfloat16": 4.6e-11},
    copy=4.8e-11, cores=os.cpu_count() or 1, source="defaults")


# The GPU transport: CUDA tensors over NCCL point-to-point, ringcoll's kernels on the
# GPU, steps run as batches (engine/plan.h), a batch's messages to different peers
# at once (alpha fits to 0: a batch costs `step` whatever its peers), no header
# (RINGCOLL_GPU_FINGERPRINT=0), 8 MiB segments (RINGCOLL_GPU_CHUNK_BYTES), the GPU
# machine's 16 cores. Rounded from benchmarks/results/model-gpu-h200.json
# (benchmarks/gpu_calibrate.py: one H200 shared by 2-4 ranks over NCCL's socket
# transport); gamma and copy are the reduce and copy kernels' seconds per byte
# (about 1 TB/s, benchmarks/results/kernel-bw-h200-stopword.txt).
GPU_LINK = LinkCost(overhead=4.8e-5, alpha=0.0, beta=2.3e-10, step=3.1e-5,
                    chunk_bytes=8 << 20, fingerprint=0, gamma=1.0e-12, copy=1.0e-12,
                    layered=True, cores=16)
DEFAULTS.transports["nccl"] = GPU_LINK


def from_json(d: dict, source: str) -> Calibration:
    """A Calibration from parsed JSON; CalibrationError naming `source` if malformed."""
    def bad(why):
        return CalibrationError(f"calibration {source}: {why}")
    if not isinstance(d, dict) or d.get("version") != 1:
        raise bad("not a version-1 ringcoll cost model calibration (need {\"version\": 1, ...})")
    try:
        links = {}
        for name, v in d["transports"].items():
            links[name] = LinkCost(**{k: float(v[k]) for k in ("overhead", "alpha", "beta")},
                                   wake=float(v.get("wake", 0.0)),
                                   step=float(v.get("step", 0.0)),
                                   chunk_bytes=int(v.get("chunk_bytes", 0)),
                                   fingerprint=int(v.get("fingerprint", -1)),
                                   gamma=float(v.get("gamma", -1.0)),
                                   copy=float(v.get("copy", -1.0)),
                                   layered=bool(v.get("layered", False)),
                                   cores=int(v.get("cores", 0)),
                                   ports=int(v.get("ports", 1)))
        gamma = {k: float(v) for k, v in d["gamma"].items()}
        cores = int(d["cores"])
        copy = float(d.get("copy", DEFAULT_COPY))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise bad(f"missing or malformed field ({type(e).__name__}: {e})") from None
    for name, lc in links.items():
        for k in ("overhead", "alpha", "beta", "wake", "step", "chunk_bytes", "cores"):
            v = getattr(lc, k)
            if not (v >= 0 and np.isfinite(v)):
                raise bad(f"transport {name} {k} = {v} is not a finite number >= 0")
        if lc.ports < 1:
            raise bad(f"transport {name} ports = {lc.ports} is not a whole number >= 1")
    if not (copy >= 0 and np.isfinite(copy)):
        raise bad(f"copy = {copy} is not a finite number >= 0")
    if cores < 1 or not links or "float32" not in gamma:
        raise bad("needs cores >= 1, at least one transport and gamma for float32")
    return Calibration(links, gamma, cores, int(d.get("chunk_bytes", DEFAULT_CHUNK_BYTES)),
                       bool(d.get("fingerprint", True)), source, dict(d.get("meta", {})),
                       copy)


def load(path: str | None = None) -> Calibration:
    """The calibration at `path`, else at $RINGCOLL_MODEL, else DEFAULTS."""
    path = path or os.environ.get("RINGCOLL_MODEL") or None
    if path is None:
        return DEFAULTS
    try:
        with open(path) as f:
            d = json.load(f)
    except OSError as e:
        raise CalibrationError(f"calibration {path}: cannot read it ({e})") from None
    except json.JSONDecodeError as e:
        raise CalibrationError(f"calibration {path}: not JSON ({e})") from None
    return from_json(d, path)


def save(cal: Calibration, path: str) -> None:
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(cal.to_json(), f, indent=1)
        f.write("\n")


def providers(collective: str, p: int | None = None, n: int | None = None,
              nbytes: int | None = None) -> list[str]:
    """The registered algorithms that provide `collective` (bench name) and, when p
    (and n, nbytes) are given, declare that they serve it (ringcoll.schedules.Applies)."""
    return [a for a in _C.algorithms() if SELECT_NAME[collective] in _C.provides(a)
            and (p is None or not _C.refusal(a, SELECT_NAME[collective], p,
                                             -1 if n is None else n,
                                             -1 if nbytes is None else nbytes))]


def refusal(algo: str, collective: str, p: int, nbytes: int, elem: int = 4) -> str:
    """'' when algo's collective serves p ranks and nbytes (cut into elements as
    elements() does), else why not, naming its declaration."""
    return _C.refusal(algo, SELECT_NAME[collective], p, elements(collective, nbytes, p, elem),
                      nbytes, 0)  # root 0, as the model's schedules


def elements(collective: str, nbytes: int, p: int, elem: int) -> int:
    """Elements of the buffer for `nbytes`, as ringcoll.bench rounds them: the
    selector's size (select.h) in elements, a multiple of p where it is p blocks.
    All-to-all's is what each rank sends, n / p to each rank (its schedule's buffer,
    Params.n, holds the sends and the receives: 2n)."""
    n = max(1, nbytes // elem)
    if collective in BLOCKED:
        n = max(p, n // p * p)
    return n


def alltoall_counts(p: int, n: int) -> list:
    """The even all-to-all of n elements a rank (a multiple of p): n / p to each."""
    return [[n // p] * p for _ in range(p)]


# _C.schedule_table's kinds, by _C.schedule's names
KINDS = {"send": 0, "recv_copy": 1, "recv_reduce": 2, "recv_reduce_first": 3}


@dataclass(frozen=True, eq=False)
class Transfers:
    """Every rank's schedule of one call as one table: `rows` (int64, one row per
    transfer, in rank, step and schedule order) holds (rank, step, kind, peer,
    begin, end) with kind as in KINDS; `steps` is the most steps any rank has,
    `scratch` the most scratch elements any rank asks for. `rows` is read-only:
    transfers() hands out cached tables."""
    p: int
    rows: np.ndarray
    steps: int
    scratch: int


# A few entries: a table of p = 1024 ranks runs to hundreds of MB, and callers
# (auto, the report, the simulator's table) visit each key once or a few times in a row.
@functools.lru_cache(maxsize=8)
def transfers(algo: str, collective: str, p: int, n: int, hosts: tuple = ()) -> Transfers:
    """The registered schedules of `algo` for `collective` (bench name), p ranks
    and n elements, built in the extension for every rank at once; `hosts`: each
    rank's host (schedule.h's Params::hosts; empty: one host)."""
    if collective == "all_to_all":  # its schedules need the counts
        from .. import check

        tr = transfers_of(check.schedules(algo, "all_to_all", p, n,
                                          counts=alltoall_counts(p, n), hosts=hosts))
        tr.rows.setflags(write=False)
        return tr
    rows, steps, scratch = _C.schedule_table(algo, SCHEDULE_NAME[collective], p, n,
                                             hosts=list(hosts))
    rows = rows.numpy()
    rows.setflags(write=False)
    return Transfers(p, rows, max(steps, default=0), max(scratch, default=0))


def transfers_of(scheds) -> Transfers:
    """Transfers of schedules given as data (one dict per rank, as _C.schedule
    returns them)."""
    rows = [(r, s, KINDS[kind], peer, b, e)
            for r, sched in enumerate(scheds)
            for s, step in enumerate(sched["steps"])
            for kind, peer, b, e in step["transfers"]]
    return Transfers(len(scheds), np.array(rows, dtype=np.int64).reshape(-1, 6),
                     max((len(x["steps"]) for x in scheds), default=0),
                     max((x.get("scratch", 0) for x in scheds), default=0))


@dataclass(frozen=True, eq=False)
class Payments:
    """What each rank pays, one row per (step, rank, peer) payment as the module
    docstring counts them: every non-empty transfer, and with the header two
    messages of HEADER_BYTES (out and in, one message each way: a segment is never
    smaller than 64 bytes) to each of the rank's peers and ring neighbours in step
    0. `steps` counts the header step; the arrays are parallel."""
    p: int
    steps: int
    step: np.ndarray
    rank: np.ndarray
    peer: np.ndarray
    msgs: np.ndarray
    nbytes: np.ndarray
    reduced: np.ndarray
    copied: np.ndarray

    def per_step(self, weights: np.ndarray) -> np.ndarray:
        """`weights` (one per row) summed per step and rank: shape (steps, p)."""
        return np.bincount(self.step * self.p + self.rank, weights,
                           self.steps * self.p).reshape(self.steps, self.p)

    def counts(self, concurrent: bool = False, ports: int = 1, alpha: float = 0.0,
               beta: float = 0.0) -> np.ndarray:
        """(msgs, bytes, reduced, copied) per step and rank: shape (steps, p, 4). With
        `concurrent` (a batched transport: one NCCL group's messages to different
        peers move at once), msgs is the most any one peer of the rank exchanges
        with it in the step, not their sum. With ports > 1 (the module docstring's
        `ports`, priced at alpha and beta), a rank's msgs and bytes in a step are
        those of its costliest payment where that one outlasts the rest moving
        `ports` at once, else their sums / ports: the counts whose price is
        max(max_i e_i, sum_i e_i / ports), as the simulator's."""
        msgs, nbytes = self.per_step(self.msgs), self.per_step(self.nbytes)
        if concurrent and len(self.msgs):
            key = (self.step * self.p + self.rank) * self.p + self.peer
            per_peer = np.bincount(key, self.msgs, self.steps * self.p * self.p)
            msgs = per_peer.reshape(self.steps, self.p, self.p).max(axis=2)
        elif ports > 1 and len(self.msgs):
            e = alpha * self.msgs + beta * self.nbytes
            key = self.step * self.p + self.rank
            last = np.lexsort((e, key))  # each key's costliest payment comes last
            ends = np.flatnonzero(np.r_[key[last][1:] != key[last][:-1], True])
            top = last[ends]
            one = np.zeros((2, self.steps * self.p))
            one[:, key[top]] = self.msgs[top], self.nbytes[top]
            alone = (one[0] * alpha + one[1] * beta).reshape(msgs.shape)
            spread = (msgs * alpha + nbytes * beta) / ports
            use_one = alone >= spread
            msgs = np.where(use_one, one[0].reshape(msgs.shape), msgs / ports)
            nbytes = np.where(use_one, one[1].reshape(msgs.shape), nbytes / ports)
        return np.stack([msgs, nbytes] + [self.per_step(w) for w in (self.reduced,
                                                                     self.copied)], axis=-1)


def payments(tr: Transfers, elem: int, chunk_bytes: int, fingerprint: bool,
             layers=None) -> Payments:
    """tr's payments for elements of `elem` bytes cut into segments of at most
    chunk_bytes (the executor skips empty transfers on both sides, so they pay
    nothing). `layers` (one per step): the batch each step runs in on a
    stream-ordered transport, which then counts as one step."""
    p, rows = tr.p, tr.rows
    rows = rows[rows[:, 4] < rows[:, 5]]
    seg = max(1, chunk_bytes // elem) * elem
    nb = (rows[:, 5] - rows[:, 4]) * elem
    header = bool(fingerprint and p > 1)
    steps = tr.steps
    step = rows[:, 1]
    if layers is not None and len(layers):
        layers = np.asarray(layers, dtype=np.int64)
        step, steps = layers[step], int(layers.max()) + 1
    step, rank, peer = step + header, rows[:, 0], rows[:, 3]
    moved = peer != rank  # a local transfer moves nothing
    msgs = np.where(moved, -(-nb // seg), 0)
    reduced = np.where(rows[:, 2] >= KINDS["recv_reduce"], nb, 0)  # either operand order
    copied = np.where(~moved & (rows[:, 2] == KINDS["recv_copy"]), nb, 0)  # a local copy
    nb = np.where(moved, nb, 0)
    if header:
        pairs = _header_pairs(p, (rank * p + peer)[moved])
        k = len(pairs)
        step = np.concatenate([np.zeros(k, np.int64), step])
        rank = np.concatenate([pairs // p, rank])
        peer = np.concatenate([pairs % p, peer])
        msgs = np.concatenate([np.full(k, 2), msgs])
        nb = np.concatenate([np.full(k, 2 * HEADER_BYTES), nb])
        reduced = np.concatenate([np.zeros(k, np.int64), reduced])
        copied = np.concatenate([np.zeros(k, np.int64), copied])
    f = np.float64
    return Payments(p, steps + header, step, rank, peer, msgs.astype(f), nb.astype(f),
                    reduced.astype(f), copied.astype(f))


def _header_pairs(p: int, keys: np.ndarray, dense_max: int = 4096) -> np.ndarray:
    """The distinct rank * p + peer keys among `keys` and every rank's ring
    neighbours, without a rank's own key, in increasing order: by a dense p x p
    mark up to p = dense_max (faster than sorting), else by sorting."""
    ranks = np.arange(p)
    keys = np.concatenate([keys, ranks * p + (ranks + 1) % p, ranks * p + (ranks - 1) % p])
    if p <= dense_max:
        mark = np.zeros(p * p, dtype=bool)
        mark[keys] = True
        mark[ranks * p + ranks] = False
        return np.flatnonzero(mark)
    keys = np.unique(keys)
    return keys[keys // p != keys % p]


def critical_path(cost: np.ndarray, counts: np.ndarray, per_host: int, cores: int):
    """The call's critical path from each rank's cost (steps, p) and counts
    (steps, p, 4: msgs, bytes, reduced, copied) per step, as the module docstring
    says: a step takes its slowest rank's time, or, on a host whose per_host ranks
    outnumber its cores and whose work spread over the cores takes longer, that
    host's sums / cores (the slowest such host; ties go to the lowest rank or host).
    Returns (seconds of the steps, summed; terms()'s counts, whose copy bytes are
    the steps' local copies: staging_term's are added to them)."""
    steps = np.arange(cost.shape[0])
    r = np.argmax(cost, axis=1)
    t, row = cost[steps, r], counts[steps, r]
    if per_host > cores and cost.size:
        hosts = cost.shape[1] // per_host
        spread = cost.reshape(-1, hosts, per_host).sum(axis=2) / cores
        h = np.argmax(spread, axis=1)
        worse = spread[steps, h] > t
        t = np.where(worse, spread[steps, h], t)
        row = np.where(worse[:, None],
                       counts.reshape(-1, hosts, per_host, 4).sum(axis=2)[steps, h] / cores, row)
    crowded = per_host > cores
    moves = counts[:, :, 0].any(axis=1).sum()  # rounds: steps in which anything moves
    msgs, nbytes, reduced, copied = row.sum(axis=0)
    return float(t.sum()), np.array([1.0, msgs, nbytes, reduced,
                                     msgs if crowded else 0.0, copied, moves])


def staging_bytes(collective: str, p: int, n: int, elem: int) -> np.ndarray:
    """Per rank: the bytes its call copies before and after the schedule (the
    module docstring's `staging`; the root of reduce, gather and scatter is rank 0,
    as in its schedules). Gather, scatter and all-to-all address the user's blocks
    and copy only a rank's own block (the root's, for gather and scatter)."""
    nb, block = n * elem, n // p * elem
    per = {"reduce_scatter": nb + block, "all_gather": block, "all_to_all": block}.get(
        collective, 0)
    out = np.full(p, float(per))
    if collective == "reduce" and p > 1:
        out[1:] = nb
    if collective in ("gather", "scatter"):
        out[0] = block
    return out


def loads(algo, collective, p, nbytes, dtype="float32", chunk_bytes=DEFAULT_CHUNK_BYTES,
          fingerprint=True, layered=False, ports=1, alpha=0.0, beta=0.0) -> np.ndarray:
    """(msgs, bytes, reduced, copied) per step and rank, shape (steps, p, 4), the header
    step first when `fingerprint`; per batch instead of per step when `layered`,
    where a batch's messages to different peers count once; with ports > 1, as
    many transfers at once (priced at alpha and beta: Payments.counts)."""
    elem = DTYPE_BYTES[dtype]
    n = elements(collective, nbytes, p, elem)
    layers = (layers_of(algo, collective, p, n, max(1, chunk_bytes // elem))
              if layered else None)
    return payments(transfers(algo, collective, p, n), elem, chunk_bytes, fingerprint,
                    layers).counts(concurrent=layered, ports=ports, alpha=alpha, beta=beta)


@functools.lru_cache(maxsize=64)
def layers_of(algo: str, collective: str, p: int, n: int, seg_elems: int) -> tuple:
    """The batch of each step on a stream-ordered transport (_C.schedule_layers)."""
    if collective == "all_to_all":
        raise ValueError("the cost model has no GPU (layered) prediction of all_to_all: its "
                         "schedules need the counts, which schedule_layers does not take")
    return tuple(_C.schedule_layers(algo, SCHEDULE_NAME[collective], p, n, seg_elems))


def staging_term(collective: str, p: int, n: int, elem: int, per_host: int, cores: int) -> float:
    """The staging step's critical path in bytes copied, p ranks in hosts of
    per_host: the slowest rank's, or, on a host whose ranks outnumber its cores and
    whose copies spread over the cores take longer, that host's sum / cores (as
    critical_path)."""
    if p < 2:
        return 0.0  # one rank moves nothing, so it stages nothing either
    copied = staging_bytes(collective, p, n, elem).reshape(-1, per_host)
    worst = float(copied.max())
    if per_host > cores:
        worst = max(worst, float(copied.sum(axis=1).max()) / cores)
    return worst


def terms(algo, collective, p, nbytes, transport, cal: Calibration, dtype="float32"):
    """The call's cost as counts: (1, alpha msgs, beta bytes, gamma bytes, wake msgs,
    copy bytes, steps) along its critical path under `cal`; predict() is their dot
    product with the constants. ringcoll.check.NotApplicable where the algorithm
    declares it does not serve the call (ringcoll.schedules.Applies)."""
    why = refusal(algo, collective, p, nbytes, DTYPE_BYTES[dtype])
    if why:
        from ..check import NotApplicable

        raise NotApplicable(why)
    link = cal.link(transport, p)
    g = link.gamma if link.gamma >= 0 else cal.gamma.get(dtype, cal.gamma["float32"])
    fingerprint = cal.fingerprint if link.fingerprint < 0 else bool(link.fingerprint)
    cores = link.cores or cal.cores
    alpha = link.alpha + (link.wake if p > cores else 0.0)
    ld = loads(algo, collective, p, nbytes, dtype, link.chunk_bytes or cal.chunk_bytes,
               fingerprint, link.layered, link.ports, alpha, link.beta)
    copy = link.copy if link.copy >= 0 else cal.copy
    per = np.array([alpha, link.beta, g, copy])
    _, t = critical_path(ld @ per, ld, p, cores)
    elem = DTYPE_BYTES[dtype]
    t[5] += staging_term(collective, p, elements(collective, nbytes, p, elem), elem, p, cores)
    return t


def constants(transport, cal: Calibration, dtype="float32", p: int = 1) -> np.ndarray:
    link = cal.link(transport, p)
    g = link.gamma if link.gamma >= 0 else cal.gamma.get(dtype, cal.gamma["float32"])
    return np.array([link.overhead, link.alpha, link.beta, g, link.wake,
                     link.copy if link.copy >= 0 else cal.copy, link.step])


def predict(algo, collective, p, nbytes, transport, cal: Calibration, dtype="float32") -> float:
    """Predicted seconds of one call (p = 1: nothing moves, the overhead only)."""
    return float(terms(algo, collective, p, nbytes, transport, cal, dtype)
                 @ constants(transport, cal, dtype, p))
