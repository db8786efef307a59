"""torch's flight recorder for ringcoll (csrc/backend/flight_recorder.h): a 3-rank
job in which rank 2 never calls the second all-reduce. Ranks 0 and 1 time out,
and each dumps its record on the failure; rank 2 dumps on demand. torch's own
tool, torchfrtrace, reads the three dumps and names the missing rank.

Before torch 2.15 ringcoll keeps the recorder (names "gloo:<op>", which the tool
of those versions requires); from 2.15 torch records every backend itself, and
ringcoll runs c10d's completion and abort hooks, from which torch's hook marks
entries completed and dumps (names "ringcoll:<op>")."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from tests import mp

# Runs on every torch CI tests (tests/conftest.py): the flight recorder's records and
# dumps change with torch.
pytestmark = pytest.mark.every_torch

TORCH_RECORDS = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 15)
PREFIX = "ringcoll_fr_"
LIB = "ringcoll" if TORCH_RECORDS else "gloo"


def hung_world(rank, p, folder):
    import ringcoll.flight_recorder as fr

    out = {"enabled": fr.enabled() or TORCH_RECORDS}
    x = torch.ones(4)
    dist.all_reduce(x)  # #1, everywhere
    if rank < 2:
        try:
            dist.all_reduce(torch.ones(4))  # #2: rank 2 never comes
            out["error"] = "no error"
        except RuntimeError as e:
            out["error"] = str(e)
    else:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                os.path.exists(os.path.join(folder, f"{PREFIX}{r}")) for r in (0, 1)):
            time.sleep(0.1)
        out["dumped"] = fr.dump()
    out["entries"] = fr.entries()
    return out


def test_torchfrtrace_names_the_missing_rank(tmp_path):
    folder = str(tmp_path)
    env = {"TORCH_FR_BUFFER_SIZE": "64", "TORCH_FR_DUMP_TEMP_FILE": os.path.join(folder, PREFIX)}
    res = mp.run_world(3, hung_world, folder, env=env, pg_timeout_s=5, timeout=120)
    assert all(r["enabled"] for r in res), res
    for rank in (0, 1):
        assert "Timed out" in res[rank]["error"] and "allreduce #2" in res[rank]["error"], res
    assert res[2]["dumped"], res
    assert sorted(os.listdir(folder)) == [f"{PREFIX}{r}" for r in range(3)]

    # The dumps, in torch's format.
    with open(os.path.join(folder, f"{PREFIX}0"), "rb") as f:
        d0 = pickle.load(f)
    assert d0["version"] == "2.10"
    ringcoll_groups = [g for g in d0["pg_config"].values() if g["ranks"] == "[0, 1, 2]"]
    assert ringcoll_groups, d0["pg_config"]
    mine = [e for e in d0["entries"] if e["process_group"][0] == ringcoll_groups[0]["name"]]
    # torch's hook records no "started" (2.15): the hung call is "scheduled" there
    hung = "scheduled" if TORCH_RECORDS else "started"
    assert [(e["collective_seq_id"], e["profiling_name"], e["state"]) for e in mine] == [
        (1, f"{LIB}:all_reduce", "completed"), (2, f"{LIB}:all_reduce", hung)], mine
    assert mine[0]["input_sizes"] == [[4]] and mine[0]["input_dtypes"] == ["Float"], mine
    if not TORCH_RECORDS:
        # what rank 0 was waiting for when it failed: a rank of the ring, not itself
        assert mine[1]["ringcoll_waiting_for"] in (1, 2), mine
    with open(os.path.join(folder, f"{PREFIX}2"), "rb") as f:
        d2 = pickle.load(f)
    assert [e["collective_seq_id"] for e in d2["entries"]
            if e["process_group"][0] == ringcoll_groups[0]["name"]] == [1]

    # torch's tool names rank 2.
    out = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                          folder, "--prefix", PREFIX], capture_output=True, text=True,
                         timeout=120)
    text = out.stdout + out.stderr
    print(text)  # shown with -s
    assert out.returncode == 0, text
    assert "Not all ranks joining collective, sequence number: 2" in text, text
    assert "missing ranks: {2}" in text, text
    assert f"collective: {LIB}:all_reduce" in text, text
