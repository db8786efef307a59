"""TORCH_DISTRIBUTED_DEBUG=DETAIL with ringcoll groups: torch wraps every registered
backend in its ProcessGroupWrapper, which numbers collectives with the backend's
getSequenceNumberForGroup and compares the ranks' collective fingerprints through a
gloo helper group before each call. A script under DETAIL runs as it does without
it, and when two ranks call different collectives both checks name the same call:
the wrapper stops it first (its SequenceNumber counts the collectives before it,
ringcoll's #N counts this one), and without DETAIL ringcoll's own fingerprint
raises, naming the same sizes."""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist

from tests import mp

GOOD = 2  # collectives before the mismatched one


def mismatch_world(rank, p):
    out = {"backend": dist.get_backend()}
    for _ in range(GOOD):
        x = torch.full((4,), float(rank + 1))
        dist.all_reduce(x)
        out.setdefault("sums", []).append(x.tolist())
    y = torch.ones(3)
    dist.broadcast(y, src=0)  # another collective under the wrapper
    x = torch.ones(4 if rank == 0 else 8)
    try:
        dist.all_reduce(x)
        out["error"] = "no error"
    except RuntimeError as e:
        out["error"] = str(e)
    return out


@pytest.mark.parametrize("detail", [True, False], ids=["DETAIL", "plain"])
def test_both_checks_name_the_same_mismatched_call(detail):
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} if detail else {}
    res = mp.run_world(2, mismatch_world, env=env, pg_timeout_s=30)
    for rank, r in enumerate(res):
        assert r["backend"] == "ringcoll", r
        assert r["sums"] == [[3.0] * 4] * GOOD, r
        err = r["error"]
        mine, theirs = (4, 8) if rank == 0 else (8, 4)
        if detail:
            assert "Detected mismatch between collectives on ranks" in err, err
            seqs = re.findall(r"SequenceNumber=(\d+), OpType=ALLREDUCE", err)
            # the wrapper counts the calls before this one: GOOD all-reduces, a broadcast
            assert seqs == [str(GOOD + 1)] * 2, err
            assert f"TensorShape=[{mine}]" in err and f"TensorShape=[{theirs}]" in err, err
            assert f"Tensor Tensor shapes: {mine}vs {theirs}" in err, err
        else:
            # ringcoll's #N is the same call: one more than the wrapper's number
            assert f"ranks disagree about collective #{GOOD + 2}" in err, err
            assert f"rank {rank} called allreduce(float32, {mine} elements" in err, err
            assert f"called allreduce(float32, {theirs} elements" in err, err
