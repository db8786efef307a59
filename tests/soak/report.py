"""What a run of the soak counts and says: what fails a run of a round, the totals per
transport, the printed summary and the JSON one."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COUNTS = ("checked", "unchecked", "wrong", "stuck", "errors_clear", "errors_unclear",
          "errors_late", "errors_planned", "errors_unplanned", "chains", "churns", "gates",
          "objects")


def divergences(run: dict) -> int:
    """Differences no rule explains: from gloo's run, and from the round's first
    ringcoll run (another transport)."""
    return sum(run.get(k, {}).get("divergences", 0) for k in ("judge", "agree"))


def open_bugs(run: dict) -> dict:
    """Fields explained by an open bug's rule (judge.OPEN), per bug."""
    out = {}
    for k in ("judge", "agree"):
        for bug, n in run.get(k, {}).get("open", {}).items():
            out[bug] = out.get(bug, 0) + n
    return out


def failures_of(run: dict, strict: bool = False) -> list:
    """What in one run of a round counts against ringcoll (or, for the gloo run,
    against the judge: a judge that failed cannot judge); with `strict`, open bugs
    too."""
    bad = []
    if run["hang"]:
        bad.append("hang")
    if run["crashes"]:
        bad.append("crash")
    if run.get("shm_left"):
        bad.append("shm_left")
    for rep in run["ranks"].values():
        c = rep["counts"]
        for k in ("wrong", "errors_unclear", "errors_late", "stuck", "errors_unplanned"):
            if c[k]:
                bad.append(k)
        if rep.get("event_error"):
            bad.append("event_error")
    if divergences(run):
        bad.append("divergences")
    if strict and open_bugs(run):
        bad.append("open_bugs")
    if run.get("no_judge"):
        bad.append("no_judge")
    return sorted(set(bad))


def tally(rounds: list, strict: bool = False) -> dict:
    """Totals over every ringcoll run, all together and per transport; the gloo runs'
    apart ("judge")."""
    def zero():
        return {"runs": 0, "ops": 0, **{k: 0 for k in COUNTS}, "hangs": 0, "crashes": 0,
                "shm_left": 0, "events": 0, "events_fired": 0, "judged": 0,
                "divergences": 0, "listed": {}, "open": {}, "failed": 0, "seconds": 0.0}
    out = {"all": zero()}
    for rnd in rounds:
        for run in rnd["runs"]:
            keys = ("judge",) if run["backend"] == "gloo" else ("all", run["transport"])
            for key in keys:
                t = out.setdefault(key, zero())
                _add_run(t, run, rnd, strict)
    return out


def _add_run(t, run, rnd, strict):
    t["runs"] += 1
    t["ops"] += run["ops"]
    t["seconds"] = round(t["seconds"] + run["seconds"], 1)
    t["hangs"] += run["hang"] is not None
    t["crashes"] += len(run["crashes"])
    t["shm_left"] += bool(run.get("shm_left"))
    t["events"] += rnd["event"] is not None
    t["events_fired"] += run["killed"] is not None or any(
        "event_fired_at_op" in rep for rep in run["ranks"].values())
    t["judged"] += "judge" in run
    t["failed"] += bool(failures_of(run, strict))
    t["divergences"] += divergences(run)
    for rule, n in run.get("judge", {}).get("listed", {}).items():
        t["listed"][rule] = t["listed"].get(rule, 0) + n
    for bug, n in open_bugs(run).items():
        t["open"][bug] = t["open"].get(bug, 0) + n
    for rep in run["ranks"].values():
        for k in COUNTS:
            t[k] += rep["counts"][k]


def versions() -> dict:
    import torch

    import ringcoll

    try:
        commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"torch": torch.__version__, "ringcoll_commit": commit,
            "ringcoll_build": {k: str(v) for k, v in ringcoll.build_info().items()},
            "algorithms": list(ringcoll.algorithms()), "python": platform.python_version()}


def machine() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f
                          if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"host": platform.node(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu": model, "load_at_start": list(os.getloadavg())}


def print_failure(rnd: dict, run: dict, strict: bool = False):
    """Everything a failed run left to read: samples of each bad outcome, the judge's
    divergences with both sides, crashes and a hang's stacks."""
    who = "gloo (the judge)" if run["backend"] == "gloo" else f"ringcoll/{run['transport']}"
    print(f"  {who} FAILED: {', '.join(failures_of(run, strict))}; rerun: {rnd['rerun']}")
    for r, rep in sorted(run["ranks"].items()):
        for k in ("wrong", "errors_unclear", "errors_late", "stuck", "errors_unplanned"):
            for s in rep["samples"][k][:3]:
                tb = s.get("traceback")
                s = {k: v for k, v in s.items() if k != "traceback"}
                print(f"  rank {r} {k}: {json.dumps(s, default=str)[:800]}")
                if tb:
                    print("    " + tb.replace("\n", "\n    ").rstrip())
        if rep.get("event_error"):
            print(f"  rank {r} event raised: {rep['event_error']}")
    for d in run.get("judge", {}).get("samples", []) + run.get("agree", {}).get("samples", []):
        print(f"  divergence at rank {d['rank']} {d['key']} {d['call']}: {d['field']}: "
              f"{d['against']} {d['ref']}, ringcoll/{run['transport']} {d['ringcoll']}")
    if run.get("shm_left"):
        print(f"  left in /dev/shm: {run['shm_left']}")
    for c in run["crashes"]:
        print(f"  rank {c['rank']} died (exit code {c['exitcode']}, after '{c['state']}'):\n"
              f"{c['fatal']}\n{c['log']}")
    if run["hang"]:
        h = run["hang"]
        print(f"  HANG: no progress for {h['stalled_s']} s; rank states {h['states']}\n"
              f"{h['stacks']}")
        for r, t in h["logs"].items():
            if t.strip():
                print(f"  --- rank {r}'s output ---\n{t}")
    sys.stdout.flush()


COLUMNS = ["runs", "ops", "checked", "wrong", "hangs", "crashes", "stuck", "divergences",
           "errors_planned", "errors_unplanned", "errors_clear", "errors_unclear",
           "errors_late", "shm_left", "events_fired", "chains", "churns", "gates", "objects"]


def print_summary(summary: dict):
    totals = summary["totals"]
    print(f"\nsoak summary ({summary['seconds']} s, {summary['rounds']} rounds, "
          f"{totals['all']['ops']} ringcoll calls):")
    width = {c: max(len(c), 7) + 2 for c in COLUMNS}
    print("  " + f"{'run':<10}" + "".join(f"{c:>{width[c]}}" for c in COLUMNS))
    for key, t in totals.items():
        print("  " + f"{key:<10}" + "".join(f"{t[c]:>{width[c]}}" for c in COLUMNS))
    listed, bugs = totals["all"]["listed"], totals["all"]["open"]
    if listed:
        print("  listed differences from gloo (docs/SUPPORTED.md), fields explained: "
              + ", ".join(f"{k} {v}" for k, v in sorted(listed.items())))
    if bugs:
        print("  OPEN BUGS (docs/TESTS.md; they fail the run under --strict), fields: "
              + ", ".join(f"{k} {v}" for k, v in sorted(bugs.items())))
