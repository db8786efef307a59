"""Algorithms written in Python for the tests (ringcoll.schedules), imported by the
test processes through RINGCOLL_ALGO_MODULES=tests.pyalgos.

pymirror: every collective, each the schedule of a built-in algorithm read back as
Python data (_C.schedule) and registered again. Each built-in is proved and tested
on its own, so a wrong result here is the Python path's fault: its registration,
preparation, pinning and fingerprint, for every collective's call site, including
scratch memory and local transfers (oneshot), a reduce-scatter that writes only
its block (twoshot's, which runs without a working copy), rooted trees (tree) and
the exchanges of gather, scatter and all-to-all (direct).
"""

from __future__ import annotations

from ringcoll import _C
from ringcoll.schedules import Reduced, Schedule, Transfer, register

MIRRORED = {"all_reduce": "oneshot", "reduce_scatter": "twoshot", "all_gather": "twoshot",
            "broadcast": "tree", "reduce": "tree", "gather": "direct", "scatter": "direct",
            "all_to_all": "direct"}


def as_schedule(d) -> Schedule:
    """A schedule dict (_C.schedule's, ringcoll.check's) as a Schedule."""
    return Schedule([[Transfer(*t) for t in st["transfers"]] + [Reduced(*r) for r in st["reduced"]]
                     for st in d["steps"]], tuple(d["result"]), d["scratch"])


def mirror(builtin, collective):
    def schedule(prm):
        return as_schedule(_C.schedule(builtin, collective, prm.size, prm.rank, prm.n,
                                       prm.root, list(prm.order), list(prm.send_counts),
                                       list(prm.recv_counts)))
    return schedule


for _collective, _builtin in MIRRORED.items():
    register("pymirror", _collective, summary="built-in schedules read back from Python")(
        mirror(_builtin, _collective))
