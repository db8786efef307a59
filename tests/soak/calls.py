"""The calls: what one call is (Spec), how every rank of its group draws it from the
same RNG, how a rank issues it (async) and what checks its result exactly; the object
collectives and the calls every backend must refuse; and what torch's gloo backend
refuses that ringcoll runs (the judge's first listed difference)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tests.soak.exact import PREMUL_FACTOR, differs, dtypes, kind_of, reduce_ops_for, values, reference

REDUCING = {"all_reduce", "reduce_scatter_tensor", "reduce_scatter", "reduce",
            "all_reduce_coalesced", "coalesced_reduce_scatter"}
ROOTED = {"broadcast", "reduce", "gather", "scatter"}
P2P = {"p2p_batch", "p2p_pairs"}
# kind -> weight
KINDS = {"all_reduce": 6, "reduce_scatter_tensor": 3, "reduce_scatter": 1,
         "all_gather_into_tensor": 3, "all_gather": 2, "broadcast": 3, "reduce": 2,
         "gather": 1, "scatter": 1, "all_to_all_single": 2, "all_to_all": 1,
         "barrier": 1, "all_reduce_coalesced": 1, "all_gather_coalesced": 1,
         "coalesced_all_gather": 1, "coalesced_reduce_scatter": 1,
         "p2p_batch": 2, "p2p_pairs": 1}
# Calls that complete only once every rank of the group issued them, whichever rank
# waits: a rank that waits with a timeout before its peers issue (the gate, below)
# times out on every backend. (A root's broadcast or scatter, a send, may finish on
# its own into the peers' buffers: not here. Nor reduce-scatter: gloo's Work ignores
# wait(timeout), waiting out the group's timeout instead.)
SYMMETRIC = ("all_reduce", "all_gather_into_tensor", "all_gather", "barrier")
# Calls whose Python function returns a Future, not a Work, when async.
FUTURE_KINDS = {"all_reduce_coalesced", "all_gather_coalesced"}
# Calls whose Works have a future on gloo too (gloo's reduce-scatter and point-to-point
# Works raise "Work::getFuture not implemented"): what a then() callback chains on,
# alike on both backends.
GLOO_FUTURES = tuple(k for k in KINDS if "reduce_scatter" not in k and k not in P2P)
# What a chain issues from inside then() callbacks: not a barrier, which on gloo waits
# for the group's earlier calls to finish, and gloo finishes a call only once its
# future's callbacks returned: a barrier waited for inside the callback of the call
# before it waits for itself.
CHAINABLE = tuple(k for k in GLOO_FUTURES if k != "barrier")
# Calls whose Works on gloo do not say is_completed() True by themselves: point-to-point
# ones complete only inside wait(), reduce-scatter ones never (not even after wait()).
# A program that polls them spins forever on gloo: a judged round waits for them.
GLOO_NEVER_COMPLETED = {k for k in KINDS if "reduce_scatter" in k} | P2P
SMALL_SHARE = 0.25  # share of calls with a count from {0, 1, p-1, p+1}
OBJECT_KINDS = ("all_gather_object", "broadcast_object_list", "gather_object",
                "scatter_object_list")
# Calls whose arguments are wrong the same way on every rank: every backend raises
# when they are issued, before anything moves, and the group stays usable.
INVALID_KINDS = ("bad_gather_size", "bad_scatter_size", "bad_splits", "bad_dtype")


@dataclass
class Spec:
    """One call as every rank of its group draws it."""
    kind: str
    group: object  # the key of its group in the rank's group table
    dtype: object
    n: int  # elements per block
    op: str = "SUM"
    root: int = 0  # group rank
    salt: int = 0
    sizes: list = field(default_factory=list)  # all_to_all / coalesced / p2p sizes
    shift: int = 1  # p2p_batch: rank r sends to r + shift
    equal: bool = False  # all_to_all_single: no split sizes (equal blocks)
    tag: int = 0
    pairs: dict = field(default_factory=dict)  # p2p_pairs: group rank -> its peer

    def name(self, seq=None):
        extra = f" {self.op}" if self.kind in REDUCING else ""
        extra += f" root {self.root}" if self.kind in ROOTED else ""
        return (f"{self.kind}({str(self.dtype).replace('torch.', '')}, {self.n} el{extra}) "
                f"on group {self.group}" + (f" call {seq}" if seq is not None else ""))


class FutureWork:
    """A Work's face on the Future that all_reduce_coalesced and all_gather_coalesced
    return when async (torch hands back work.get_future() there). It has no
    is_success() and its wait() takes no timeout, as the Future's."""

    def __init__(self, fut):
        self.fut = fut

    def is_completed(self):
        return self.fut.done()

    def wait(self, timeout=None):
        return self.fut.wait()

    def get_future(self):
        return self.fut


@dataclass
class Issued:
    spec: Spec
    works: list  # the Works to complete
    inputs: list  # what only the call reads (dropped in the 'drop_inputs' mode)
    outputs: list  # what the check reads
    check: object  # outputs -> None | what differs; None: nothing to check
    issued_at: float = field(default_factory=time.monotonic)
    # The storages of the outputs and inputs at issue ("out0", "in1", ...): what a
    # future's value is said to alias (observe.summarize)
    storages: dict = field(default_factory=dict)
    skipped: str | None = None  # why this backend did not issue it (gloo_refuses)


def _count(rng, p, itemsize, max_bytes, blocks):
    """Elements per block: often an edge ({0, 1, p-1, p+1}), else log-uniform up to
    max_bytes over all `blocks` blocks of the call."""
    most = max(1, max_bytes // max(1, blocks * itemsize))
    if rng.random() < SMALL_SHARE:
        return min(most, rng.choice([0, 1, max(p - 1, 0), p + 1]))
    return min(most, int(2 ** rng.uniform(0, max(0.0, (most).bit_length() - 1))))


def draw_spec(rng, key, ranks, max_bytes, kinds=None) -> Spec:
    """One call on the group `key` over `ranks`, drawn from `rng` (alike on every rank),
    of one of `kinds` (every kind the group's size allows by default)."""
    p = len(ranks)
    kinds = [k for k in (kinds or KINDS) if not (k in P2P and p == 1)
             and not (k == "p2p_pairs" and p % 2)]
    kind = rng.choices(kinds, [KINDS[k] for k in kinds])[0]
    dtype = rng.choice(dtypes())
    s = Spec(kind=kind, group=key, dtype=dtype, n=0, salt=rng.getrandbits(40),
             root=rng.randrange(p), tag=rng.randrange(4))
    if kind in REDUCING:
        s.op = rng.choice(reduce_ops_for(dtype))
    blocks = {"reduce_scatter_tensor": p, "reduce_scatter": p,
              "all_gather_into_tensor": p, "all_gather": p, "gather": p, "scatter": p,
              "all_to_all_single": p * p, "all_to_all": p * p,
              "coalesced_all_gather": 3 * p, "coalesced_reduce_scatter": 3 * p,
              "all_gather_coalesced": 3 * p, "all_reduce_coalesced": 3}.get(kind, 1)
    s.n = _count(rng, p, dtype.itemsize, max_bytes, blocks)
    if kind in ("all_to_all_single", "all_to_all"):  # sizes[j][k]: j sends k this many
        s.equal = kind == "all_to_all_single" and rng.random() < 0.4
        s.sizes = [[s.n if s.equal else rng.randint(0, s.n) for _ in range(p)]
                   for _ in range(p)]
    elif kind in ("all_reduce_coalesced", "all_gather_coalesced", "coalesced_all_gather",
                  "coalesced_reduce_scatter"):
        s.sizes = [rng.randint(0, s.n) for _ in range(rng.randint(1, 3))]
    elif kind == "p2p_batch":  # every rank sends to r+shift and receives from r-shift
        s.shift = rng.randrange(1, p)
        s.sizes = [rng.randint(0, s.n) for _ in range(p)]  # what rank j sends
    elif kind == "p2p_pairs":  # a perfect matching; the lower rank sends first
        order = list(range(p))
        rng.shuffle(order)
        s.sizes = [rng.randint(0, s.n) for _ in range(p)]
        for a, b in zip(order[::2], order[1::2]):
            s.pairs[a], s.pairs[b] = b, a
    return s


def gloo_refuses(spec: Spec) -> str | None:
    """Why torch's gloo backend raises when this call is issued, where ringcoll runs it
    (measured on torch 2.13's gloo, p = 2 and 3, every kind x dtype x op the soak
    draws), or None. The gloo run does not issue these (docs/SUPPORTED.md, the soak's
    differences: `more-dtypes-ops`)."""
    import torch

    dt = spec.dtype
    if dt in (torch.int16, torch.float8_e4m3fn, torch.float8_e5m2):
        return f"gloo has no {str(dt).replace('torch.', '')}"
    if spec.kind in REDUCING and spec.op == "PREMUL_SUM":
        return "gloo has no PREMUL_SUM"
    if spec.kind in REDUCING and spec.op == "AVG" and kind_of(dt) == "int":
        return "gloo's AVG takes floating dtypes only"
    if spec.kind == "gather" and dt.is_complex:
        return "gloo's gather takes no complex dtype"
    if spec.kind == "all_to_all" and len({n for row in spec.sizes for n in row}) > 1:
        return "gloo's all_to_all takes equal blocks only"
    return None


def _issue_kind(spec: Spec, pg, me: int, p: int) -> Issued:
    """Issues one call on `pg` (this rank is group rank `me` of p), async."""
    import torch
    import torch.distributed as dist

    k, dt, n, salt = spec.kind, spec.dtype, spec.n, spec.salt
    op = (dist._make_nccl_premul_sum(PREMUL_FACTOR) if spec.op == "PREMUL_SUM"
          else getattr(dist.ReduceOp, spec.op))
    mine = (lambda m, r=me, s=salt: values(m, dt, r, s, spec.op if k in REDUCING else None, p))
    of = (lambda m, r, s=salt: values(m, dt, r, s, spec.op if k in REDUCING else None, p))

    def ref(m, s=salt):
        return reference([of(m, r, s) for r in range(p)], spec.op, dt, p)

    def empty(m):
        return torch.full((m,), 3, dtype=torch.int64).to(dt)  # not a result: shows

    if k == "all_reduce":
        x = mine(n)
        w = dist.all_reduce(x, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], lambda o: differs(o[0], ref(n)))
    if k == "reduce_scatter_tensor":
        x, out = mine(p * n), empty(n)
        w = dist.reduce_scatter_tensor(out, x, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [x], [out],
                      lambda o: differs(o[0], ref(p * n)[me * n:(me + 1) * n]))
    if k == "reduce_scatter":
        xs = [mine(p * n)[j * n:(j + 1) * n].clone() for j in range(p)]
        out = empty(n)
        w = dist.reduce_scatter(out, xs, op=op, group=pg, async_op=True)
        return Issued(spec, [w], xs, [out],
                      lambda o: differs(o[0], ref(p * n)[me * n:(me + 1) * n]))
    if k == "all_gather_into_tensor":
        x, out = mine(n), empty(p * n)
        w = dist.all_gather_into_tensor(out, x, group=pg, async_op=True)
        return Issued(spec, [w], [x], [out],
                      lambda o: differs(o[0], torch.cat([of(n, r) for r in range(p)])))
    if k == "all_gather":
        x, outs = mine(n), [empty(n) for _ in range(p)]
        w = dist.all_gather(outs, x, group=pg, async_op=True)
        return Issued(spec, [w], [x], outs, lambda o: next(
            (f"block {r}: {d}" for r in range(p) if (d := differs(o[r], of(n, r)))), None))
    if k == "broadcast":
        x = mine(n) if me == spec.root else empty(n)
        w = dist.broadcast(x, group_src=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], lambda o: differs(o[0], of(n, spec.root)))
    if k == "reduce":
        x = mine(n)
        w = dist.reduce(x, group_dst=spec.root, op=op, group=pg, async_op=True)
        return Issued(spec, [w], [], [x], (lambda o: differs(o[0], ref(n)))
                      if me == spec.root else None)
    if k == "gather":
        x = mine(n)
        outs = [empty(n) for _ in range(p)] if me == spec.root else None
        w = dist.gather(x, gather_list=outs, group_dst=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], [x], outs or [], (lambda o: next(
            (f"block {r}: {d}" for r in range(p) if (d := differs(o[r], of(n, r)))), None))
            if me == spec.root else None)
    if k == "scatter":
        xs = ([of(p * n, spec.root)[j * n:(j + 1) * n].clone() for j in range(p)]
              if me == spec.root else None)
        out = empty(n)
        w = dist.scatter(out, scatter_list=xs, group_src=spec.root, group=pg, async_op=True)
        return Issued(spec, [w], xs or [], [out], lambda o: differs(
            o[0], of(p * n, spec.root)[me * n:(me + 1) * n]))
    if k == "all_to_all_single":
        S = spec.sizes  # S[j][k]: what rank j sends rank k
        x = mine(sum(S[me]))
        out = empty(sum(S[j][me] for j in range(p)))
        splits = (dict(output_split_sizes=[S[j][me] for j in range(p)],
                       input_split_sizes=list(S[me])) if not spec.equal else {})
        w = dist.all_to_all_single(out, x, group=pg, async_op=True, **splits)

        def want():
            return torch.cat([of(sum(S[j]), j)[sum(S[j][:me]):sum(S[j][:me + 1])]
                              for j in range(p)])
        return Issued(spec, [w], [x], [out], lambda o: differs(o[0], want()))
    if k == "all_to_all":
        S = spec.sizes
        x = mine(sum(S[me]))
        xs = [x[sum(S[me][:j]):sum(S[me][:j + 1])].clone() for j in range(p)]
        outs = [empty(S[j][me]) for j in range(p)]
        w = dist.all_to_all(outs, xs, group=pg, async_op=True)
        return Issued(spec, [w], xs, outs, lambda o: next(
            (f"block {j}: {d}" for j in range(p) if (d := differs(
                o[j], of(sum(S[j]), j)[sum(S[j][:me]):sum(S[j][:me + 1])]))), None))
    if k == "barrier":
        return Issued(spec, [dist.barrier(group=pg, async_op=True)], [], [], None)
    if k == "all_reduce_coalesced":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        w = FutureWork(dist.all_reduce_coalesced(xs, op=op, group=pg, async_op=True))
        return Issued(spec, [w], [], xs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes)
             if (d := differs(o[i], ref(m, s=salt + 17 * i)))), None))
    if k == "all_gather_coalesced":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [[empty(m) for m in spec.sizes] for _ in range(p)]
        w = FutureWork(dist.all_gather_coalesced(outs, xs, group=pg, async_op=True))
        return Issued(spec, [w], xs, [t for ts in outs for t in ts], lambda o: next(
            (f"rank {r} tensor {i}: {d}" for r in range(p) for i, m in enumerate(spec.sizes)
             if (d := differs(o[r * len(spec.sizes) + i], of(m, r, salt + 17 * i)))), None))
    if k == "coalesced_all_gather":
        xs = [mine(m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [empty(p * m) for m in spec.sizes]
        with dist._coalescing_manager(group=pg, async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.all_gather_into_tensor(o, x, group=pg)
        return Issued(spec, list(cm.works), xs, outs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes) if (d := differs(
                o[i], torch.cat([of(m, r, salt + 17 * i) for r in range(p)])))), None))
    if k == "coalesced_reduce_scatter":
        xs = [mine(p * m, s=salt + 17 * i) for i, m in enumerate(spec.sizes)]
        outs = [empty(m) for m in spec.sizes]
        with dist._coalescing_manager(group=pg, async_ops=True) as cm:
            for o, x in zip(outs, xs):
                dist.reduce_scatter_tensor(o, x, op=op, group=pg)
        return Issued(spec, list(cm.works), xs, outs, lambda o: next(
            (f"tensor {i}: {d}" for i, m in enumerate(spec.sizes) if (d := differs(
                o[i], ref(p * m, s=salt + 17 * i)[me * m:(me + 1) * m]))), None))
    if k == "p2p_batch":
        to, frm = (me + spec.shift) % p, (me - spec.shift) % p
        x, out = mine(spec.sizes[me]), empty(spec.sizes[frm])
        ops = [dist.P2POp(dist.isend, x, group_peer=to, group=pg, tag=spec.tag),
               dist.P2POp(dist.irecv, out, group_peer=frm, group=pg, tag=spec.tag)]
        if (me // spec.shift) % 2:  # the order within a batch must not matter
            ops.reverse()
        ws = dist.batch_isend_irecv(ops)
        return Issued(spec, list(ws), [x], [out],
                      lambda o: differs(o[0], of(spec.sizes[frm], frm)))
    if k == "p2p_pairs":
        peer = spec.pairs[me]
        x, out = mine(spec.sizes[me]), empty(spec.sizes[peer])

        def send():
            return dist.isend(x, group_dst=peer, group=pg, tag=spec.tag)

        def recv():
            return dist.irecv(out, group_src=peer, group=pg, tag=spec.tag)
        ws = [send(), recv()] if me < peer else [recv(), send()]
        return Issued(spec, ws, [x], [out], lambda o: differs(o[0], of(spec.sizes[peer], peer)))
    raise ValueError(f"soak: no call kind {k!r}")


def issue(spec: Spec, pg, me: int, p: int) -> Issued:
    """Issues one call on `pg` (this rank is group rank `me` of p), async, and notes
    the storages of its tensors."""
    it = _issue_kind(spec, pg, me, p)
    for label, ts in (("out", it.outputs), ("in", it.inputs)):
        for i, t in enumerate(ts):
            if t.numel():
                it.storages.setdefault(t.untyped_storage().data_ptr(), f"{label}{i}")
    return it


def issue_invalid(kind: str, pg, p: int):
    """A call whose arguments are wrong alike on every rank (INVALID_KINDS); every
    backend raises when it is issued. Returns the Work if it did not raise."""
    import torch
    import torch.distributed as dist

    if kind == "bad_gather_size":  # output holds p*2 + 1 elements, not p*2
        return dist.all_gather_into_tensor(torch.empty(2 * p + 1), torch.ones(2), group=pg,
                                           async_op=True)
    if kind == "bad_scatter_size":  # input holds p*2 + 1 elements, not p*2
        return dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * p + 1), group=pg,
                                          async_op=True)
    if kind == "bad_splits":  # the splits add up to p, the tensors hold 2p
        return dist.all_to_all_single(torch.empty(2 * p), torch.ones(2 * p),
                                      output_split_sizes=[1] * p, input_split_sizes=[1] * p,
                                      group=pg, async_op=True)
    if kind == "bad_dtype":  # float64 output, float32 input
        return dist.all_gather_into_tensor(torch.empty(2 * p, dtype=torch.float64),
                                           torch.ones(2), group=pg, async_op=True)
    raise ValueError(f"soak: no invalid call {kind!r}")


def object_of(rank: int, salt: int, size: int):
    """The object rank `rank` contributes to an object collective: picklable, of about
    `size` bytes, different for every (rank, salt)."""
    return {"rank": rank, "salt": salt, "blob": bytes((rank * 31 + salt + i) % 251
                                                       for i in range(size)),
            "list": [rank, salt % 97, "x" * (size % 13)]}


def issue_object(kind: str, pg, me: int, p: int, root: int, salt: int, size: int) -> str | None:
    """Runs one object collective (they are synchronous) and checks what it left:
    None if exact, else what differs."""
    import torch.distributed as dist

    if kind == "all_gather_object":
        out = [None] * p
        dist.all_gather_object(out, object_of(me, salt, size), group=pg)
        want = [object_of(r, salt, size) for r in range(p)]
    elif kind == "broadcast_object_list":
        out = [object_of(me, salt + i, size) for i in range(3)]
        dist.broadcast_object_list(out, group_src=root, group=pg)
        want = [object_of(root, salt + i, size) for i in range(3)]
    elif kind == "gather_object":
        out = [None] * p if me == root else None
        dist.gather_object(object_of(me, salt, size), out, group_dst=root, group=pg)
        want = [object_of(r, salt, size) for r in range(p)] if me == root else None
    elif kind == "scatter_object_list":
        out = [None]
        ins = [object_of(j, salt, size) for j in range(p)] if me == root else None
        dist.scatter_object_list(out, ins, group_src=root, group=pg)
        want = [object_of(me, salt, size)]
    else:
        raise ValueError(f"soak: no object collective {kind!r}")
    if out != want:
        return f"{kind}: got {str(out)[:200]}, want {str(want)[:200]}"
    return None
