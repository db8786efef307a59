"""The cost model's GPU calibration, from a GPU run of ringcoll.bench.

    python benchmarks/gpu_calibrate.py gpu-out/ab.json --out benchmarks/results/model-gpu-h200

Takes the rows of the variants that name one algorithm (`ringcoll+gpu_algo=NAME`)
of a `python -m ringcoll.bench --device cuda` run (benchmarks/gpu_session.sh's `ab`
step), fits the "nccl" transport's overhead, alpha, beta and step with the model's
own fit (ringcoll/model/fit.py: batches counted as steps, engine/plan.h), keeps its
settings (segment size, no header, gamma and copy of the GPU kernels: model.GPU_LINK),
and writes `<out>.json` (a calibration with the "nccl" transport alone, the run's
device, torch and NCCL in its meta) and `<out>.txt`: per point measured and
predicted time, and which algorithm `auto` picks against the fastest measured.
Per point the in-place figure (all-reduce has only that), else the out-of-place one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ringcoll import model  # noqa: E402
from ringcoll.model import auto, fit  # noqa: E402

PREFIX = "ringcoll+gpu_algo="


def rows_of(path):
    with open(path) as f:
        saved = json.load(f)
    rows = []
    for r in saved["results"]:
        if not r["backend"].startswith(PREFIX):
            continue
        algo = r["backend"][len(PREFIX):]
        m = r["ip"] or r["oop"]
        if m is None or m.get("wrong"):
            continue
        # A variant runs its algorithm only where it provides the collective.
        if model.SELECT_NAME[r["collective"]] not in model._C.provides(algo):
            continue
        rows.append({"transport": "nccl", "algo": algo, "collective": r["collective"],
                     "p": r["nproc"], "size": r["size"], "time_s": m["time_us"] * 1e-6})
    return rows, saved["meta"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="ringcoll.bench JSON files of one GPU machine")
    ap.add_argument("--out", default="bench-out/model-gpu")
    ap.add_argument("--device", default="one GPU shared by the ranks (--share-gpu)",
                    help="the GPU the measurements ran on, for the calibration's meta")
    a = ap.parse_args()
    rows, meta = [], {}
    for path in a.runs:
        got, meta = rows_of(path)
        rows += got
    if not rows:
        sys.exit("no ringcoll+gpu_algo=NAME rows in " + ", ".join(a.runs))
    cal = dataclasses.replace(model.DEFAULTS, source=a.out + ".json",
                              transports={"nccl": model.GPU_LINK})
    link = fit.fit_link(rows, "nccl", cal, crowded=False)
    cal.transports["nccl"] = link
    errs = [abs(model.predict(r["algo"], r["collective"], r["p"], r["size"], "nccl", cal)
                / r["time_s"] - 1) for r in rows]
    cal.meta = {"command": "python benchmarks/gpu_calibrate.py " + " ".join(sys.argv[1:]),
                "measured_by": meta.get("command"), "torch": meta.get("torch"),
                "ringcoll_build": meta.get("ringcoll_build"), "platform": meta.get("platform"),
                "device": a.device,
                "units": "seconds; alpha per message end, beta per byte end, step per "
                         "batch, gamma per byte reduced and copy per byte copied on the GPU",
                "median_error": statistics.median(errs)}
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    model.save(cal, a.out + ".json")
    lines = [f"# {cal.meta['command']}", f"# measurements: {cal.meta['measured_by']}",
             f"# torch {cal.meta['torch']}, {cal.meta['ringcoll_build']}",
             f"# nccl: {link}",
             f"# median |predicted/measured - 1|: {cal.meta['median_error']:.3f} over "
             f"{len(rows)} points",
             f"{'coll':<15} {'p':>2} {'bytes':>10}  {'fastest measured':<24} "
             f"{'auto picks':<10} {'auto/best':>9}"]
    by = {}
    for r in rows:
        by.setdefault((r["collective"], r["p"], r["size"]), {})[r["algo"]] = r["time_s"]
    within = 0
    for (coll, p, size), times in sorted(by.items()):
        best = min(times, key=times.get)
        t = {al: model.predict(al, coll, p, size, "nccl", cal) for al in times}
        pick = min(t, key=t.get)
        ratio = times[pick] / times[best]
        within += ratio <= 1.10
        lines.append(f"{coll:<15} {p:>2} {size:>10}  {best:<10} {times[best] * 1e6:>10.1f} us "
                     f"{pick:<10} {ratio:>9.2f}")
    lines.append(f"# auto within 10% of the fastest measured at {within} of {len(by)} points "
                 "(among the algorithms measured there)")
    lines.append("# what auto writes for CUDA tensors, per p: "
                 + " | ".join(auto.resolve("auto", p, "nccl", cal)
                              for p in sorted({r['p'] for r in rows})))
    with open(a.out + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
