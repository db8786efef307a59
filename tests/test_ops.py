"""ringcoll.ops.all_reduce_ (torch.ops.ringcoll.all_reduce_): exact against gloo and
the exact reference, in eager and compiled code, p = 1..5, every dtype; refused
dtypes and groups that are not ringcoll raise clearly on every rank; the op keeps
its place behind queued async collectives."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import ringcoll.ops
from tests import cases, mp

# Runs on every torch CI tests (tests/conftest.py): the op's registration and dispatcher
# routes are torch's.
pytestmark = pytest.mark.every_torch


def eager_matches(rank, p):
    f = []
    g = dist.new_group(backend="ringcoll")  # a group other than the default one
    for dtype in cases.DTYPES:
        for n in cases.counts(p, large=4099):
            for group in (None, g):
                x = cases.make_input(rank, n, dtype, "SUM", p)
                want = cases.reference([cases.make_input(r, n, dtype, "SUM", p)
                                        for r in range(p)], "SUM", dtype, p)
                y = x.clone()
                ref = cases.gloo_or_none(lambda: (dist.all_reduce(y, group=mp.GLOO), y)[1])
                out = ringcoll.ops.all_reduce_(x, group=group)
                if out is not x:
                    f.append("all_reduce_ does not return its argument")
                cases.check_same(f, f"{dtype} n={n} group={'new' if group else 'default'}",
                                 x, want, ref)
    # dtypes gloo lacks: float8 (inputs 0/1, so every partial sum is exact) and
    # complex (summed as pairs of reals).
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64):
        for n in cases.counts(p, large=4099):
            def made(r):
                v = ((torch.arange(n) + r) % 2).to(torch.float32)
                return torch.complex(v, 1 - v).to(dtype) if dtype.is_complex else v.to(dtype)
            x = made(rank)
            want = sum(made(r).to(torch.complex128 if dtype.is_complex else torch.float64)
                       for r in range(p)).to(dtype)
            ringcoll.ops.all_reduce_(x)
            cases.check_same(f, f"{dtype} n={n}", x.view(torch.uint8) if x.element_size() == 1
                             else x, want.view(torch.uint8) if want.element_size() == 1 else want)
    # A strided view, reduced in place (the rest of the base is untouched).
    base = torch.arange(20, dtype=torch.float32).view(4, 5) + rank
    col = base[:, 1]
    ringcoll.ops.all_reduce_(col)
    want = (torch.arange(20, dtype=torch.float32).view(4, 5) * p + sum(range(p)))
    expected = torch.arange(20, dtype=torch.float32).view(4, 5) + rank
    expected[:, 1] = want[:, 1]
    if not torch.equal(base, expected):
        f.append(f"strided view: {base.tolist()}")
    return f


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_op_matches_gloo_and_the_exact_sum(p):
    mp.run_checks(p, eager_matches)


class _Logged(torch.Tensor):
    """A tensor subclass whose __torch_function__ notes every function it sees."""
    seen: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(str(func))
        return super().__torch_function__(func, types, args, kwargs or {})


def two_paths(rank, p):
    """In eager code all_reduce_ skips torch's dispatcher only where the dispatcher
    would do nothing but run the kernel (ringcoll/ops.py, _C.all_reduce_eager): a mode,
    a subclass, autograd, inference mode or a conjugate or negative view go through
    the op, and
    both ways give the exact sum and bump the version once."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    f = []
    total = float(p * (p + 1) // 2)
    group = dist.group.WORLD

    def one(label, make, eager, around=None, want_seen=None):
        x = make()
        # Whether the eager entry takes it; one that does reduces the probe on every
        # rank alike.
        probe = make()
        with (around() if around else _nothing()) as ctx:
            took = ringcoll._C.all_reduce_eager(probe, group)
            v = None if x.is_inference() else x._version  # inference tensors have none
            out = ringcoll.ops.all_reduce_(x)
        if took != eager:
            f.append(f"{label}: eager entry took it: {took}, expected {eager}")
        if out is not x:
            f.append(f"{label}: does not return its argument")
        got = x.detach().resolve_conj().resolve_neg()
        got = torch.view_as_real(got) if got.is_complex() else got
        want = torch.full_like(got, total)
        if not torch.equal(got, want):
            f.append(f"{label}: {got.tolist()} != {want.tolist()}")
        if v is not None and x._version != v + 1:
            f.append(f"{label}: version {v} -> {x._version}, expected one bump")
        if want_seen is not None and want_seen not in ctx.seen:
            f.append(f"{label}: {want_seen} not seen: {ctx.seen}")

    def ones(**kw):
        return lambda: torch.full((3,), float(rank + 1), **kw)

    one("plain", ones(), True)
    one("dispatch mode", ones(), False, Recorder, "ringcoll.all_reduce_.default")
    one("no grad", ones(requires_grad=True), True, torch.no_grad)
    with torch.inference_mode():
        one("inference mode", ones(), False)
    def made_in_inference():
        with torch.inference_mode():
            return torch.full((3,), float(rank + 1))

    one("inference tensor outside the mode", made_in_inference, False)

    class Profiled:
        def __enter__(self):
            self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            self.prof.__enter__()
            return self

        def __exit__(self, *exc):
            self.prof.__exit__(*exc)
            self.seen = [e.name for e in self.prof.events()]
            return False

    one("profiler", ones(), False, Profiled, "ringcoll::all_reduce_")
    conj = lambda: torch.full((3,), complex(rank + 1, -(rank + 1))).conj()  # noqa: E731
    one("conjugate view", conj, False)
    neg = lambda: torch.full((3,), complex(0, -(rank + 1))).conj().imag  # noqa: E731
    one("negative view", neg, False)

    _Logged.seen = []
    y = torch.full((3,), float(rank + 1)).as_subclass(_Logged)
    if ringcoll._C.all_reduce_eager(y, group):
        f.append("subclass: eager entry took it")
    ringcoll.ops.all_reduce_(y)
    if not any("all_reduce_" in s for s in _Logged.seen):
        f.append(f"subclass: __torch_function__ did not see the op: {_Logged.seen}")
    if not torch.equal(y.as_subclass(torch.Tensor), torch.full((3,), total)):
        f.append(f"subclass: {y.tolist()}")
    return f


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_eager_entry_and_the_dispatcher_agree():
    mp.run_checks(3, two_paths)


def views_with_math_bits(rank, p, rounds):
    """Conjugate and negative views, reduced many times with allocations between: torch's
    fallback for those bits, which the op once used, read past the end of the
    dispatcher's stack for an op that returns nothing and corrupted the heap; it
    showed as an abort in malloc a few calls later, so one call proves nothing."""
    f = []
    total = float(p * (p + 1) // 2)
    for i in range(rounds):
        c = torch.full((i % 7 + 1,), complex(rank + 1, -(rank + 1))).conj()
        ringcoll.ops.all_reduce_(c)
        n = torch.full((i % 5 + 1,), complex(0, -(rank + 1))).conj().imag
        ringcoll.ops.all_reduce_(n)
        if not (c.is_conj() and n.is_neg()):
            f.append(f"round {i}: the views lost their bits: {c.is_conj()}, {n.is_neg()}")
        if not torch.equal(torch.view_as_real(c.resolve_conj()), torch.full((c.numel(), 2), total)):
            f.append(f"round {i}: conjugate view: {c.resolve_conj().tolist()}")
        if not torch.equal(n.resolve_neg(), torch.full_like(n.resolve_neg(), total)):
            f.append(f"round {i}: negative view: {n.resolve_neg().tolist()}")
        [torch.empty(k) for k in range(1, 9)]  # allocations that trip over a corrupted heap
    return f[:5]


@pytest.mark.parametrize("p", [1, 2])
def test_conjugate_and_negative_views_reduce_right_and_leave_the_heap_whole(p):
    mp.run_checks(p, views_with_math_bits, 1000)


def compiled_matches(rank, p, backend):
    @torch.compile(fullgraph=True, backend=backend)
    def step(x):
        y = x * 2
        ringcoll.ops.all_reduce_(y)
        return y + 1

    f = []
    for n in (1, p + 1, 1000):
        x = cases.make_input(rank, n, torch.float32, "SUM", p)
        want = 2 * cases.reference([cases.make_input(r, n, torch.float32, "SUM", p)
                                    for r in range(p)], "SUM", torch.float32, p) + 1
        cases.check_same(f, f"compiled n={n}", step(x), want)
    return f


# inductor (what users compile with) once; aot_eager (the fake implementation and
# functionalization, without code generation, which costs half a minute) at p = 3.
@pytest.mark.parametrize("p,backend", [(2, "inductor"), (3, "aot_eager")])
def test_op_in_a_compiled_graph(p, backend):
    mp.run_checks(p, compiled_matches, backend, timeout=300)


def refusals(rank, p):
    f = []
    x = torch.zeros(4, dtype=torch.uint32)
    text = cases.error_text(lambda: ringcoll.ops.all_reduce_(x))
    if "UInt32" not in text or "not supported" not in text:
        f.append(f"uint32 input: {text}")
    text = cases.error_text(lambda: ringcoll.ops.all_reduce_(torch.ones(3), group=mp.GLOO))
    if "no ringcoll backend" not in text or "gloo" not in text:
        f.append(f"gloo group: {text}")
    # Still in step afterwards: a refused call sends nothing.
    y = torch.ones(3)
    ringcoll.ops.all_reduce_(y)
    if not torch.equal(y, torch.full((3,), float(p))):
        f.append(f"after the refusals: {y.tolist()}")
    return f


def test_refused_dtypes_and_groups_raise_on_every_rank():
    mp.run_checks(3, refusals)


def forgets_groups(rank, p):
    """The op remembers the last group it resolved (csrc/bindings.cc), but not past
    the group's destruction: the object is freed with its last user reference."""
    import gc
    import weakref

    g = dist.new_group(backend="ringcoll")
    x = torch.ones(3)
    ringcoll.ops.all_reduce_(x, group=g)
    ref = weakref.ref(g)
    dist.destroy_process_group(g)
    del g
    gc.collect()
    f = [] if ref() is None else ["the destroyed group is still alive"]
    if not torch.equal(x, torch.full((3,), float(p))):
        f.append(f"sum: {x.tolist()}")
    return f


def test_op_does_not_keep_a_destroyed_group_alive():
    mp.run_checks(2, forgets_groups)


def behind_async(rank, p):
    """Each op call is issued right behind a large async dist.all_reduce: it must run
    after it (issue order pairs the ranks' messages), whatever the sizes."""
    f = []
    for big_n in (1 << 20, 3 << 20):
        big = torch.full((big_n,), float(rank + 1))
        works = [dist.all_reduce(big, async_op=True)]
        small = torch.full((2,), float(rank + 1))
        ringcoll.ops.all_reduce_(small)
        works.append(dist.all_reduce(torch.ones(5), async_op=True))
        for w in works:
            w.wait()
        total = float(sum(range(1, p + 1)))
        if not torch.equal(small, torch.full((2,), total)):
            f.append(f"small behind {big_n}: {small.tolist()}")
        if not torch.equal(big, torch.full((big_n,), total)):
            f.append(f"big {big_n}: {big[:4].tolist()}")
    return f


@pytest.mark.parametrize("transport", ["shm", "gloo"])
def test_op_keeps_its_place_behind_async_collectives(transport):
    mp.run_checks(3, behind_async, transport=transport)
