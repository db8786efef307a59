"""RINGCOLL_ALGO parsing and selection (csrc/schedules/select.h), pure: no processes.

Good values pick the algorithm a collective of a given byte size runs and say why;
bad values are ValueErrors naming RINGCOLL_ALGO, the bad part and what is accepted;
an algorithm named for a collective it does not provide is refused by name, with
what it does provide; `auto` is refused here (the Python creator resolves it).
"""

from __future__ import annotations

import pytest

import ringcoll
from ringcoll import _C, schedules

MIXED = "allreduce=twoshot:0-64K,rhd:64K-1M,ring;broadcast=tree"


@pytest.mark.parametrize("value, collective, nbytes, algo, why", [
    ("ring", "allreduce", 8, "ring", "RINGCOLL_ALGO=ring"),
    ("rhd", "reducescatter", 1 << 20, "rhd", "RINGCOLL_ALGO=rhd"),
    ("tree", "barrier", 4, "tree", "RINGCOLL_ALGO=tree"),
    (MIXED, "allreduce", 0, "twoshot", "RINGCOLL_ALGO all_reduce range 0-64K"),
    (MIXED, "allreduce", 64 * 1024 - 1, "twoshot", "RINGCOLL_ALGO all_reduce range 0-64K"),
    (MIXED, "allreduce", 64 * 1024, "rhd", "RINGCOLL_ALGO all_reduce range 64K-1M"),
    (MIXED, "allreduce", (1 << 20) - 1, "rhd", "RINGCOLL_ALGO all_reduce range 64K-1M"),
    (MIXED, "allreduce", 1 << 20, "ring", "RINGCOLL_ALGO all_reduce, beyond its ranges"),
    (MIXED, "broadcast", 5, "tree", "RINGCOLL_ALGO broadcast"),
    (MIXED, "reducescatter", 5, "ring", "default: RINGCOLL_ALGO names no reduce_scatter"),
    ("allreduce=rhd:1K-2K", "allreduce", 100, "ring",
     "default: no RINGCOLL_ALGO all_reduce range covers it"),
    ("allreduce=rhd:1K-2K", "allreduce", 1024, "rhd", "RINGCOLL_ALGO all_reduce range 1K-2K"),
    (" allreduce = rhd : 1k - 1g , tree ; reduce = tree ", "allreduce", 1 << 29, "rhd",
     "RINGCOLL_ALGO all_reduce range 1k - 1g"),
    ("reduce=tree;barrier=twoshot;allgather=rhd:0-10,twoshot", "allgather", 10, "twoshot",
     "RINGCOLL_ALGO all_gather, beyond its ranges"),
    ("reduce=tree;barrier=twoshot", "barrier", 3, "twoshot", "RINGCOLL_ALGO barrier"),
    ("reduce=tree;barrier=twoshot", "reduce", 3, "tree", "RINGCOLL_ALGO reduce"),
    ("allreduce=tree:0-4G,ring", "allreduce", (4 << 30) - 1, "tree",
     "RINGCOLL_ALGO all_reduce range 0-4G"),
    # the algorithms of issue 8: oneshot, biring, direct
    ("allreduce=oneshot:0-64K,ring", "allreduce", 100, "oneshot",
     "RINGCOLL_ALGO all_reduce range 0-64K"),
    ("allreduce=oneshot:0-64K,ring", "allreduce", 64 << 10, "ring",
     "RINGCOLL_ALGO all_reduce, beyond its ranges"),
    ("allreduce=oneshot:0-4K,biring:4K-1M,ring;barrier=oneshot", "allreduce", 4096, "biring",
     "RINGCOLL_ALGO all_reduce range 4K-1M"),
    ("allreduce=oneshot:0-4K,biring:4K-1M,ring;barrier=oneshot", "barrier", 4, "oneshot",
     "RINGCOLL_ALGO barrier"),
    ("oneshot", "barrier", 4, "oneshot", "RINGCOLL_ALGO=oneshot"),
    ("biring", "allreduce", 1 << 20, "biring", "RINGCOLL_ALGO=biring"),
    ("gather=direct;scatter=direct:0-1K;alltoall=direct", "scatter", 10, "direct",
     "RINGCOLL_ALGO scatter range 0-1K"),
    ("gather=direct;scatter=direct:0-1K", "scatter", 1 << 10, "direct",
     "default: no RINGCOLL_ALGO scatter range covers it"),
    ("direct", "alltoall", 8, "direct", "RINGCOLL_ALGO=direct"),
    # gather, scatter and all-to-all default to direct, also under one other name
    ("ring", "gather", 8, "direct", "default: ring (RINGCOLL_ALGO=ring) does not provide gather"),
    ("rhd", "alltoall", 8, "direct", "default: rhd (RINGCOLL_ALGO=rhd) does not provide all_to_all"),
    ("oneshot#note", "scatter", 8, "direct",
     "note; default: oneshot (RINGCOLL_ALGO=oneshot) does not provide scatter"),
    (MIXED, "gather", 8, "direct", "default: RINGCOLL_ALGO names no gather"),
])
def test_good_values_pick(value, collective, nbytes, algo, why):
    assert _C.select(value, collective, nbytes) == (algo, why)


@pytest.mark.parametrize("value, fragments", [
    ("", ["RINGCOLL_ALGO is empty"]),
    ("nope", ["unknown algorithm 'nope' in 'nope'", "known: ring, rhd, tree, twoshot"]),
    ("auto", ["'auto' in 'auto' is resolved by ringcoll's Python backend creator"]),
    ("allreduce=auto", ["'auto' in 'auto' is resolved by ringcoll's Python backend creator"]),
    ("allreduce=rhd:0-1K,auto", ["resolved by ringcoll's Python backend creator"]),
    ("rhd,ring", ["'rhd,ring' is neither one algorithm name nor per-collective entries"]),
    ("allredcue=rhd", ["unknown collective 'allredcue' in 'allredcue=rhd'",
                       "allreduce (all_reduce), reducescatter (reduce_scatter), allgather "
                       "(all_gather), broadcast, reduce, barrier"]),
    ("allreduce=rhd;allreduce=ring", ["allreduce is named twice"]),
    ("allreduce=rhd;ring", ["entry 'ring'", "a single algorithm name must be the whole value"]),
    ("allreduce=rhd;", ["entry ''"]),
    ("allreduce=", ["empty choice in 'allreduce='"]),
    ("allreduce=rhd,,ring", ["empty choice"]),
    ("allreduce=rhd:64Q-1M", ["bad size '64Q' in 'rhd:64Q-1M'", "K, M or G"]),
    ("allreduce=rhd:-1M", ["bad size '' in 'rhd:-1M'"]),
    ("allreduce=rhd:1.5K-1M", ["bad size '1.5K'"]),
    ("allreduce=rhd:99999999999999999999-1", ["bad size '99999999999999999999'"]),
    ("allreduce=rhd:64K", ["range '64K' in 'rhd:64K' is not lo-hi"]),
    ("allreduce=rhd:1M-64K", ["range '1M-64K' in 'rhd:1M-64K' is empty"]),
    ("allreduce=rhd:64K-64K", ["is empty"]),
    ("allreduce=rhd:0-1M,twoshot:512K-2M", ["range '512K-2M' of twoshot overlaps '0-1M' of rhd"]),
    ("allreduce=ring,rhd:0-1K", ["'rhd:0-1K' follows 'ring', which has no range", "must be last"]),
    ("allreduce=ring,rhd", ["must be last"]),
    ("allreduce=nope:0-1K", ["unknown algorithm 'nope' in 'nope:0-1K'"]),
    # an algorithm named for a collective it does not provide
    ("broadcast=rhd", ["in 'broadcast=rhd'", "algorithm 'rhd' does not provide broadcast",
                       "rhd provides: allreduce, reducescatter, allgather, barrier"]),
    ("reducescatter=tree:0-1K,ring", ["algorithm 'tree' does not provide reducescatter",
                                      "tree provides: allreduce, broadcast, reduce, barrier"]),
    ("reduce=twoshot", ["'twoshot' does not provide reduce"]),
    ("allreduce=direct", ["in 'allreduce=direct'", "algorithm 'direct' does not provide allreduce",
                          "direct provides: gather, scatter, alltoall"]),
    ("gather=ring", ["algorithm 'ring' does not provide gather",
                     "ring provides: allreduce, reducescatter, allgather, broadcast, reduce, "
                     "barrier"]),
    ("alltoall=oneshot", ["algorithm 'oneshot' does not provide alltoall",
                          "oneshot provides: allreduce, barrier"]),
    ("scatter=biring:0-1K,direct", ["'biring' does not provide scatter",
                                    "biring provides: allreduce, barrier"]),
    ("reducescatter=oneshot", ["'oneshot' does not provide reducescatter"]),
    ("alltoal=direct", ["unknown collective 'alltoal'", "barrier, gather, scatter, alltoall"]),
    ("nope", ["known: ring, rhd, tree, twoshot, oneshot, direct, biring"]),
])
def test_bad_values_are_clear_errors(value, fragments):
    with pytest.raises(ValueError) as err:
        _C.select(value, "allreduce", 8)
    msg = str(err.value)
    assert msg.startswith("RINGCOLL_ALGO"), msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


def test_a_note_becomes_the_reason():
    value = "allreduce=tree:0-1K,ring # generated by hand"
    assert _C.select(value, "allreduce", 8) == (
        "tree", "generated by hand; RINGCOLL_ALGO all_reduce range 0-1K")
    assert _C.select("rhd#why", "allreduce", 8) == ("rhd", "why; RINGCOLL_ALGO=rhd")


def test_one_name_leaves_what_it_lacks_at_default():
    # One name for everything (RINGCOLL_ALGO=rhd python train.py): it runs the
    # collectives the algorithm provides, and the others run their default, with
    # the reason RINGCOLL_DEBUG logs; so DDP's parameter broadcast works under rhd.
    assert _C.select("tree", "broadcast", 8) == ("tree", "RINGCOLL_ALGO=tree")
    assert _C.select("tree", "reducescatter", 8) == (
        "ring", "default: tree (RINGCOLL_ALGO=tree) does not provide reduce_scatter")
    assert _C.select("rhd", "broadcast", 8) == (
        "ring", "default: rhd (RINGCOLL_ALGO=rhd) does not provide broadcast")
    assert _C.select("direct", "gather", 8)[0] == "direct"
    assert _C.select("direct", "allreduce", 8) == (
        "ring", "default: direct (RINGCOLL_ALGO=direct) does not provide all_reduce")
    assert _C.select("oneshot", "broadcast", 8)[0] == "ring"
    # Named per collective, an algorithm that lacks it stays an error.
    with pytest.raises(ValueError, match="'oneshot' does not provide broadcast"):
        _C.select("broadcast=oneshot", "broadcast", 8)


@pytest.mark.parametrize("torch_name, c10d_name", [
    ("all_reduce", "allreduce"), ("reduce_scatter", "reducescatter"),
    ("all_gather", "allgather"), ("all_to_all", "alltoall"), ("broadcast", "broadcast"),
    ("reduce", "reduce"), ("gather", "gather"), ("scatter", "scatter"), ("barrier", "barrier"),
])
def test_torch_and_c10d_names_are_one_collective(torch_name, c10d_name):
    algo = "direct" if c10d_name in ("gather", "scatter", "alltoall") else "rhd"
    if c10d_name in ("broadcast", "reduce"):
        algo = "tree"
    # Either spelling in RINGCOLL_ALGO, either spelling asked: the same rule, printed
    # under torch's name (as the benchmark, model, simulator and timeline print it).
    for value in (f"{torch_name}={algo}", f"{c10d_name}={algo}"):
        for asked in (torch_name, c10d_name):
            assert _C.select(value, asked, 8) == (algo, f"RINGCOLL_ALGO {torch_name}"), \
                (value, asked)
    with pytest.raises(ValueError, match=f"{c10d_name} is named twice"):
        _C.select(f"{torch_name}={algo};{c10d_name}={algo}", c10d_name, 8)


def test_knobs_and_options_validate_the_value():
    # Both routes (environment and Options) go through one parser at group creation.
    assert "RINGCOLL_ALGO=" + MIXED in _C.knobs({"RINGCOLL_ALGO": MIXED})
    with pytest.raises(RuntimeError, match="unknown collective 'bcast'"):
        _C.knobs(ringcoll.Options(algo="bcast=tree").overrides())
    with pytest.raises(RuntimeError, match="resolved by ringcoll's Python backend creator"):
        _C.knobs({"RINGCOLL_ALGO": "auto"})


def test_every_algorithm_says_what_it_provides():
    got = {a: _C.provides(a) for a in ringcoll.algorithms()
           if _C.is_builtin(a) or a in schedules.SHIPPED}  # not a test's own
    assert got == {
        "ring": ["allreduce", "reducescatter", "allgather", "broadcast", "reduce", "barrier"],
        "rhd": ["allreduce", "reducescatter", "allgather", "barrier"],
        "tree": ["allreduce", "broadcast", "reduce", "barrier"],
        "twoshot": ["allreduce", "reducescatter", "allgather", "barrier"],
        "oneshot": ["allreduce", "barrier"],
        "direct": ["gather", "scatter", "alltoall"],
        "biring": ["allreduce", "barrier"],
        # written in Python (ringcoll/schedules), registered with the package
        "swing": ["allreduce", "barrier"],
        "bruck": ["allgather"],
        "twolevel": ["allreduce", "barrier"],
    }


def test_gpu_algo_is_validated_and_auto_resolves_for_the_gpu():
    """RINGCOLL_GPU_ALGO is parsed like RINGCOLL_ALGO; auto resolves CUDA tensors'
    choice by the model's GPU transport ("nccl", batches not steps: one-shot's
    all-reduce is one batch), unless RINGCOLL_GPU_ALGO names one."""
    import torch.distributed as dist

    from ringcoll._backend import _resolve_auto
    from ringcoll.model import auto

    assert "RINGCOLL_GPU_ALGO=rhd" in _C.knobs({"RINGCOLL_GPU_ALGO": "rhd"})
    with pytest.raises(RuntimeError, match="nonsense"):
        _C.knobs({"RINGCOLL_GPU_ALGO": "nonsense"})
    store = dist.HashStore()
    out = _resolve_auto({"RINGCOLL_ALGO": "auto", "RINGCOLL_TRANSPORT": "shm"}, store, 0, 4)
    gpu = out["RINGCOLL_GPU_ALGO"]
    assert "nccl, p=4" in gpu and gpu != out["RINGCOLL_ALGO"], out
    _C.knobs(out)  # both parse
    assert auto.select(gpu, "all_reduce", 8) == "oneshot", gpu
    assert auto.select(gpu, "all_reduce", 256 << 20) != "oneshot", gpu
    assert out["RINGCOLL_ALGO"] != "auto", out
    kept = _resolve_auto({"RINGCOLL_ALGO": "auto", "RINGCOLL_GPU_ALGO": "tree",
                          "RINGCOLL_TRANSPORT": "shm"}, dist.HashStore(), 0, 2)
    assert kept["RINGCOLL_GPU_ALGO"] == "tree", kept
    assert "RINGCOLL_GPU_ALGO" not in _resolve_auto({"RINGCOLL_ALGO": "rhd"}, store, 0, 2)
    # auto for CUDA tensors alone: the host choice stays unset (its default)
    only = _resolve_auto({"RINGCOLL_GPU_ALGO": "auto"}, dist.HashStore(), 0, 2)
    assert "RINGCOLL_ALGO" not in only and "nccl, p=2" in only["RINGCOLL_GPU_ALGO"], only
