"""Sparse COO all_reduce (SUM) and complex dtypes, against gloo, in real processes.

Sparse: every rank builds COO tensors from small integers (torch's own sparse test
shapes: 1-3 sparse dims, 0-2 dense dims, overlapping indices, an uncoalesced input,
ranks with no entries, a tensor with no entries anywhere) in several dtypes; the
result is compared with gloo's sparse all_reduce on the same inputs and with the
dense sum. Errors (an op other than SUM, ranks whose sizes or dtypes differ) are
raised on every rank.

Complex: torch's Python layer hands a backend the real view of a complex tensor,
so these tests call the backend object directly, as DDP's reducer and
functional collectives do, and compare with gloo on the real view: all_reduce
(SUM, AVG), reduce, broadcast, all_gather(_into_tensor), reduce_scatter(_tensor),
gather, scatter, all_to_all(_single), the coalesced all-gather and reduce-scatter,
in place where the op is. MIN/MAX/PRODUCT on
a complex tensor are an error on every rank naming the op and the dtype.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests import mp

TRANSPORTS = ["shm", "gloo"]


def _sparse(rank, p, sparse_dims=1, dense_dims=0, dtype=torch.float32, nnz_of=None,
            uncoalesced=False):
    """Rank r's tensor: entries at first index 0..nnz-1 (so the ranks overlap), other
    sparse indices r % 2, values r + 1 + i (small integers)."""
    nnz = rank + 1 if nnz_of is None else nnz_of(rank)
    first = torch.arange(nnz)
    idx = [first] + [torch.full((nnz,), rank % 2) for _ in range(sparse_dims - 1)]
    indices = torch.stack(idx) if nnz else torch.zeros((sparse_dims, 0), dtype=torch.long)
    shape = [p + 1] + [2] * (sparse_dims - 1) + [2] * dense_dims
    vals = (torch.arange(nnz) + rank + 1).reshape([nnz] + [1] * dense_dims)
    vals = vals.expand([nnz] + [2] * dense_dims).clone()
    if uncoalesced and nnz:  # the same index twice: coalescing must sum it
        indices = torch.cat([indices, indices[:, :1]], 1)
        vals = torch.cat([vals, vals[:1]], 0)
    if dtype == torch.bool:
        vals = vals % 2 == 1
    return torch.sparse_coo_tensor(indices, vals.to(dtype), shape)


SPARSE_CASES = [
    dict(sparse_dims=1), dict(sparse_dims=2), dict(sparse_dims=3),
    dict(dense_dims=1), dict(dense_dims=2), dict(sparse_dims=2, dense_dims=1),
    dict(uncoalesced=True), dict(nnz_of=lambda r: 0 if r % 2 else 3),
    dict(nnz_of=lambda r: 0),
]
SPARSE_DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.float16,
                 torch.complex64]


def _sparse_rank(rank, p):
    fails = []
    for dtype in SPARSE_DTYPES:
        for case in SPARSE_CASES:
            mine = _sparse(rank, p, dtype=dtype, **case)
            got = mine.clone()
            if dtype.is_complex:
                # torch's Python layer would pass a real view, which for a sparse
                # tensor is a copy: the result would not reach `got`. The backend
                # is called the way DDP's reducer calls it.
                dist.group.WORLD._get_backend(torch.device("cpu")).allreduce([got]).wait()
            else:
                dist.all_reduce(got, async_op=True).wait()
            dense = sum(_sparse(r, p, dtype=dtype, **case).to_dense() for r in range(p))
            label = f"{dtype} {case}"
            if not got.is_sparse:
                fails.append(f"{label}: result is not sparse")
                continue
            if not torch.equal(got.to_dense(), dense.to(dtype)):
                fails.append(f"{label}: {got.to_dense()} != dense sum {dense}")
            if dtype.is_complex or dtype == torch.float16:
                continue  # gloo's sparse all_reduce has no complex or half
            ref = mine.clone()
            dist.all_reduce(ref, group=mp.GLOO)
            ref = ref.coalesce()
            got = got.coalesce()
            if not (torch.equal(got.indices(), ref.indices())
                    and torch.equal(got.values(), ref.values())):
                fails.append(f"{label}: differs from gloo: {got} vs {ref}")
    return fails


# Every world size on both transports up to 3 ranks; 4 ranks on shared memory only
# (4 processes on CI's 2 cores).
@pytest.mark.parametrize("p, transport", [(p, t) for p in (1, 2, 3) for t in TRANSPORTS]
                         + [(4, "shm")])
def test_sparse_all_reduce_matches_gloo(p, transport):
    mp.run_checks(p, _sparse_rank, transport=transport, timeout=240)


def _sparse_errors_rank(rank, p):
    out = {}
    t = _sparse(rank, p)
    try:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    except Exception as e:  # noqa: BLE001
        out["max"] = str(e)
    # Rank 1's tensor has another shape: every rank raises naming both sizes.
    bad = _sparse(rank, p + (rank == 1))
    try:
        dist.all_reduce(bad)
    except Exception as e:  # noqa: BLE001
        out["sizes"] = str(e)
    bad = _sparse(rank, p, dtype=torch.float64 if rank == 1 else torch.float32)
    try:
        dist.all_reduce(bad)
    except Exception as e:  # noqa: BLE001
        out["dtype"] = str(e)
    # The group still works after argument errors caught before anything moved.
    ok = _sparse(rank, p)
    dist.all_reduce(ok)
    out["after"] = ok.to_dense()
    return out


def test_sparse_all_reduce_errors():
    p = 3
    res = mp.run_world(p, _sparse_errors_rank, transport="shm")
    dense = sum(_sparse(r, p).to_dense() for r in range(p))
    for r, out in enumerate(res):
        assert "ringcoll::allreduce" in out["max"] and "SUM op, got MAX" in out["max"], out["max"]
        assert "rank 1's has sizes [5]" in out["sizes"] and "rank 0's has sizes [4]" \
            in out["sizes"], out["sizes"]
        assert "rank 1's has dtype Double" in out["dtype"] and "rank 0's has dtype Float" \
            in out["dtype"], out["dtype"]
        assert torch.equal(out["after"], dense), r


def _cvalues(rank, n, salt=0):
    """n complex values with small-integer real and imaginary parts."""
    i = torch.arange(n, dtype=torch.float64)
    return torch.complex((i + 3 * rank + salt) % 7, (2 * i + rank + 1 + salt) % 5)


def _complex_rank(rank, p, dtype):
    pg = dist.group.WORLD
    be = pg._get_backend(torch.device("cpu"))
    fails = []

    def check(name, got, want):
        if not torch.equal(got, want):
            fails.append(f"{dtype} {name}: {got} != {want}")

    def ref_real(fn, *ts):
        """fn run by gloo on the real views of clones of ts; returns the clones."""
        cl = [t.clone() for t in ts]
        fn(*[torch.view_as_real(c) for c in cl])
        return cl

    for n in [0, 1, p + 1, 1000]:
        x = _cvalues(rank, n).to(dtype)
        for op in [dist.ReduceOp.SUM, dist.ReduceOp.AVG]:
            if op == dist.ReduceOp.AVG and n == 0:
                continue
            got = x.clone()
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
            be.allreduce([got], opts).wait()
            (want,) = ref_real(lambda v: dist.all_reduce(v, op=op, group=mp.GLOO)
                               if op == dist.ReduceOp.SUM else
                               (dist.all_reduce(v, group=mp.GLOO), v.div_(p)), x)
            check(f"allreduce {op} n={n}", got, want)
        for root in range(p):
            got = x.clone()
            opts = dist.BroadcastOptions()
            opts.rootRank = root
            be.broadcast([got], opts).wait()
            (want,) = ref_real(lambda v: dist.broadcast(v, root, group=mp.GLOO), x)
            check(f"broadcast root={root} n={n}", got, want)
            got = x.clone()
            opts = dist.ReduceOptions()
            opts.rootRank = root
            be.reduce([got], opts).wait()
            (want,) = ref_real(lambda v: dist.reduce(v, root, group=mp.GLOO), x)
            if rank == root:
                check(f"reduce root={root} n={n}", got, want)
        # all_gather into one tensor and into a list.
        out = torch.zeros(p * n, dtype=dtype)
        be._allgather_base(out, x).wait()
        want = torch.cat([_cvalues(r, n).to(dtype) for r in range(p)])
        check(f"all_gather_into_tensor n={n}", out, want)
        outs = [torch.zeros(n, dtype=dtype) for _ in range(p)]
        be.allgather([outs], [x]).wait()
        check(f"allgather n={n}", torch.cat(outs), want)
        # reduce_scatter, tensor and list forms.
        big = _cvalues(rank, p * n, salt=1).to(dtype)
        out = torch.zeros(n, dtype=dtype)
        be._reduce_scatter_base(out, big).wait()
        total = sum(_cvalues(r, p * n, salt=1).to(dtype) for r in range(p))
        check(f"reduce_scatter_tensor n={n}", out, total[rank * n:(rank + 1) * n])
        out = torch.zeros(n, dtype=dtype)
        be.reduce_scatter([out], [list(big.chunk(p)) if n else
                                  [torch.zeros(0, dtype=dtype)] * p]).wait()
        check(f"reduce_scatter n={n}", out, total[rank * n:(rank + 1) * n])
        # all_to_all_single (equal splits) and list all_to_all.
        out = torch.zeros(p * n, dtype=dtype)
        be.alltoall_base(out, big, [], []).wait()
        want = torch.cat([_cvalues(r, p * n, salt=1).to(dtype)[rank * n:(rank + 1) * n]
                          for r in range(p)])
        check(f"alltoall_base n={n}", out, want)
        outs = [torch.zeros(n, dtype=dtype) for _ in range(p)]
        ins = [c.clone() for c in big.split(n)] if n else [torch.zeros(0, dtype=dtype)] * p
        be.alltoall(outs, ins).wait()
        check(f"alltoall n={n}", torch.cat(outs), want)
        # gather / scatter at root 0.
        outs = [torch.zeros(n, dtype=dtype) for _ in range(p)] if rank == 0 else []
        opts = dist.GatherOptions()
        be.gather([outs] if rank == 0 else [], [x], opts).wait()
        if rank == 0:
            check(f"gather n={n}", torch.cat(outs), torch.cat(
                [_cvalues(r, n).to(dtype) for r in range(p)]))
        out = torch.zeros(n, dtype=dtype)
        ins = [_cvalues(j, n, salt=2).to(dtype) for j in range(p)] if rank == 0 else []
        be.scatter([out], [ins] if rank == 0 else [], dist.ScatterOptions()).wait()
        check(f"scatter n={n}", out, _cvalues(rank, n, salt=2).to(dtype))
        # The coalesced methods: a complex and a real tensor in one all-gather, and a
        # reduce-scatter of two complex tensors.
        ins = [x, torch.arange(n, dtype=torch.float32) + rank]
        outs = [torch.zeros(p * n, dtype=dtype), torch.zeros(p * n, dtype=torch.float32)]
        pg.allgather_into_tensor_coalesced(outs, ins).wait()  # not bound on Backend
        check(f"allgather_into_tensor_coalesced n={n}", outs[0],
              torch.cat([_cvalues(r, n).to(dtype) for r in range(p)]))
        outs = [torch.zeros(n, dtype=dtype), torch.zeros(n, dtype=dtype)]
        pg.reduce_scatter_tensor_coalesced(outs, [big, big * 2]).wait()
        check(f"reduce_scatter_tensor_coalesced n={n}", outs[0] * 2, outs[1])
        check(f"reduce_scatter_tensor_coalesced n={n}", outs[0],
              total[rank * n:(rank + 1) * n])
    # A conjugate view cannot take results in place: an error naming the op.
    try:
        be.allreduce([_cvalues(rank, 4).to(dtype).conj()]).wait()
        fails.append(f"{dtype} allreduce of a conj view: no error")
    except RuntimeError as e:
        if "ringcoll::allreduce" not in str(e) or "conjugate view" not in str(e):
            fails.append(f"{dtype} allreduce of a conj view: unclear error {e}")
    # Ops with no complex meaning: an error on every rank, nothing sent.
    for op in [dist.ReduceOp.MIN, dist.ReduceOp.MAX, dist.ReduceOp.PRODUCT]:
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        try:
            be.allreduce([_cvalues(rank, 4).to(dtype)], opts).wait()
            fails.append(f"{dtype} allreduce {op}: no error")
        except RuntimeError as e:
            if "ringcoll::allreduce" not in str(e) or "Complex" not in str(e):
                fails.append(f"{dtype} allreduce {op}: unclear error {e}")
    return fails


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("p", [1, 2, 3])
def test_complex_collectives_match_gloo(p, transport):
    for dtype in [torch.complex64, torch.complex128]:
        mp.run_checks(p, _complex_rank, dtype, transport=transport, timeout=240)


def _python_vs_backend_rank(rank, p):
    x = _cvalues(rank, 10)
    a = x.clone()
    dist.all_reduce(a)  # torch passes the backend view_as_real(a)
    b = x.clone()
    dist.group.WORLD._get_backend(torch.device("cpu")).allreduce([b]).wait()
    return torch.equal(a, b) and torch.equal(a, sum(_cvalues(r, 10) for r in range(p)))


def test_complex_python_api_and_backend_agree():
    assert all(mp.run_world(2, _python_vs_backend_rank))
