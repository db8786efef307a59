"""The "Failures" table of docs/FAILURES.md, measured: each mistake of tests/test_failures.py
run on 2 ranks with ringcoll and with gloo, and what every rank saw.

    python benchmarks/failures.py | tee benchmarks/results/failures-cpu.md

Per rank: whether the call raised (the exception type, the time, the start of the
message), returned (and whether its output was written), or the process died.
The group timeout is 10 s, so a rank that waits it out shows ~10 s.
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import mp  # noqa: E402
from tests.test_failures import ROWS, row_world  # noqa: E402

MISTAKES = {
    "count": "all_reduce of 10 vs 12 elements",
    "count_1m": "all_reduce of 1M vs 1M+1 elements",
    "dtype": "all_reduce float32 vs int32 (same byte count)",
    "op": "all_reduce SUM on rank 0, MAX on rank 1",
    "method": "all_reduce on rank 0, broadcast(src=0) on rank 1",
    "method_root1": "all_reduce on rank 0, broadcast(src=1) on rank 1",
    "root": "broadcast from root 0 vs root 1",
    "allgather": "all_gather_into_tensor with 4 vs 5 elements per rank",
}
assert set(MISTAKES) == set(ROWS)


def outcome(r, width=240):
    if r is None:
        return "killed"
    if r["kind"] is None:
        return "returns, output " + ("untouched" if r["intact"] else "written")
    msg = r["msg"].replace("\n", " ").replace("|", "/")
    # gloo's messages start with its source path: drop it; ringcoll's with its label.
    msg = re.sub(r"^\[[^\]]*\] ", "", msg)
    msg = re.sub(r"^ringcoll::\w+ #\d+ \(rank \d of \d\): ", "", msg)
    if len(msg) > width:
        msg = msg[:width] + "..."
    return (f"{r['kind']} after {r['elapsed']:.2f} s"
            + ("" if r["intact"] else ", output written") + f": `{msg}`")


def run(backend, row):
    try:
        res = mp.run_world(2, row_world, row, init_backend=backend, pg_timeout_s=10,
                           timeout=90, may_exit=(0, 1))
    except AssertionError as e:  # a rank that could not even report
        return [f"failed: {str(e).splitlines()[-1][:100]}"] * 2
    return [outcome(r) for r in res]


def main():
    print("| mistake | rank | ringcoll | gloo |")
    print("|---|---|---|---|")
    for row, what in MISTAKES.items():
        rc, gl = run("ringcoll", row), run("gloo", row)
        for rank in range(2):
            print(f"| {what if rank == 0 else ''} | {rank} | {rc[rank]} | {gl[rank]} |",
                  flush=True)


if __name__ == "__main__":
    main()
