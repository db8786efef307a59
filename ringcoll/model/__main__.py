"""python -m ringcoll.model: the cost model's predictions beside measured times.

    python -m ringcoll.model --calibrate     # fit this machine: bench-out/model-cpu.json
    python -m ringcoll.model --model benchmarks/results/model-cpu.json --nproc 2,3,4
    python -m ringcoll.model --from bench-out/model.json # re-render saved measurements

Without --calibrate: measures every registered algorithm (and RINGCOLL_ALGO=auto)
for each collective, size, world size and transport (ringcoll.model.measure), and
prints per (transport, p, collective) a table of measured time, predicted time and
predicted/measured per algorithm and size, then what auto chose at each size and
how the algorithm it chose measured against the best measured one; then the median
prediction error (|predicted/measured - 1|). Writes the table (.txt), the
measurements (.json) and a plot of both (.png) at --out. The sweep is made
--passes times (5), one run per point each (-R), and a point's runs pooled:
spread over the whole measurement, they are not all taken in one slow minute of a
shared machine (ringcoll.model.measure).

--calibrate: times gamma per dtype and copy, measures p = 2, 3 and 4 (3 and 4 ranks on
this 2-core machine calibrate the price of ranks outnumbering cores), fits overhead,
alpha, beta, wake, step per transport (ringcoll.model.fit) and writes the calibration
JSON to --model (default bench-out/model-cpu.json, an untracked path; the committed
calibration, benchmarks/results/model-cpu.json, is replaced only when --model names
it). Use it with RINGCOLL_MODEL=path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

from . import COLLECTIVES, TRANSPORTS, Calibration, load, predict, save
from . import auto as auto_mod
from . import fit, measure

# Untracked (bench-out/ is git-ignored): a calibration run never overwrites the
# committed one (benchmarks/results/model-cpu.json) unless --model names it.
DEFAULT_OUT = "bench-out/model-cpu.json"


def _sizes(b, e, f):
    from ..bench import records

    sizes = records.sweep(b, e, f)
    return sizes if sizes[-1] == e else sizes + [e]


def parse_args(argv=None):
    from ..bench.records import parse_size

    ap = argparse.ArgumentParser(prog="python -m ringcoll.model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--model", default=None,
                    help="calibration JSON (default: $RINGCOLL_MODEL, else the built-in "
                         "constants); with --calibrate, where to write it (default "
                         f"{DEFAULT_OUT})")
    ap.add_argument("--nproc", default=None, help="world sizes (default 2,3,4)")
    ap.add_argument("--collectives", default="all_reduce,reduce_scatter,all_gather,broadcast")
    ap.add_argument("--transports", default="shm,gloo")
    ap.add_argument("-b", "--minbytes", type=parse_size, default=8)
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20)
    ap.add_argument("-f", "--stepfactor", type=float, default=8.0)
    ap.add_argument("--budget", type=float, default=0.05,
                    help="seconds of timed calls per point and algorithm, shared by the passes "
                         "(bench --budget)")
    ap.add_argument("-R", "--runs", type=int, default=1, help="runs per point in each pass")
    ap.add_argument("--passes", type=int, default=5,
                    help="times the whole sweep is made, the runs of a point pooled (a slow "
                         "minute of the machine then costs one run of a point, not all; "
                         "ringcoll.model.measure)")
    ap.add_argument("--no-auto", action="store_true", help="do not measure RINGCOLL_ALGO=auto")
    ap.add_argument("--from", dest="from_json", default=None,
                    help="measurements saved by earlier runs (their .json, comma separated): "
                         "report (or, with --calibrate, fit) them instead of measuring")
    ap.add_argument("--repeat-of", default=None,
                    help="measurements of the same points from another run (.json, comma "
                         "separated; the calibration's, say): the report adds how its fastest "
                         "algorithm per point fares in this run, the machine's repeatability")
    ap.add_argument("--out", default="bench-out/model",
                    help="prefix of the .txt, .json and .png written (default bench-out/model)")
    a = ap.parse_args(argv)
    a.collectives = [c.strip() for c in a.collectives.split(",") if c.strip()]
    a.transports = [t.strip() for t in a.transports.split(",") if t.strip()]
    for t in a.transports:
        if t not in TRANSPORTS:
            ap.error(f"unknown transport {t!r} (known: {', '.join(TRANSPORTS)})")
    a.nproc = [int(x) for x in (a.nproc or "2,3,4").split(",")]
    a.sizes = _sizes(a.minbytes, a.maxbytes, a.stepfactor)
    return a


def machine() -> str:
    import torch

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({model}), {platform.platform()}, torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}")


def calibration_path(a) -> str:
    """Where --calibrate writes the calibration JSON."""
    return a.model or DEFAULT_OUT


def calibrate(a) -> int:
    out = calibration_path(a)
    cores = os.cpu_count() or 1
    # Each the median of 5 timings with fresh buffers: on a shared VM one timing
    # was seen 2.5x off the others.
    gammas = {d: statistics.median(measure.gamma(d) for _ in range(5))
              for d in ("float32", "float64", "float16", "bfloat16")}
    print("# gamma (s/byte reduced): " + ", ".join(f"{k} {v:.3e}" for k, v in gammas.items()))
    if a.from_json:
        rows = [r for r in _saved(a.from_json)[0] if r["p"] in a.nproc]
    else:
        rows = measure.run(a.nproc, a.collectives, a.sizes, a.transports, auto=False,
                           budget=a.budget, runs=a.runs, passes=a.passes)
    start = load(None)
    cal = Calibration(dict(start.transports), gammas, cores, source=out,
                      copy=statistics.median(measure.copy() for _ in range(5)))
    print(f"# copy (s/byte copied): {cal.copy:.3e}")
    ports = {}
    for t in a.transports:
        # ranks fewer than cores, then (if measured) more: fitted apart, each with
        # the port count its measurements are best explained by (fit.fit_ports)
        kinds = [(t, False)] + ([(t + "/crowded", True)] if any(r["p"] > cores for r in rows)
                                else [])
        for key, crowded in kinds:
            cal.transports[key], errors = fit.fit_ports(rows, t, cal, crowded=crowded)
            ports[key] = {str(k): round(v, 4) for k, v in errors.items()}
            print(f"# {key}: {cal.transports[key]}")
            print(f"#   median error by ports: " + ", ".join(
                f"{k}: {v:.3f}" for k, v in errors.items()))
    cal.meta = {"command": "python -m ringcoll.model " + " ".join(sys.argv[1:]),
                "machine": machine(), "nproc": a.nproc, "measurements": a.from_json or "live",
                "collectives": a.collectives,
                "sizes": a.sizes, "units": "seconds; alpha per message end, beta per byte "
                "end, gamma per byte reduced, wake per message when p > cores, copy per "
                "byte staged, step per step in which anything moves",
                "median_error": fit.median_error(rows, cal),
                "median_error_by_ports": ports}
    save(cal, out)
    if not a.from_json:  # the measurements, for --from
        rows_out = a.out + "-calibration.json"
        if os.path.dirname(rows_out):
            os.makedirs(os.path.dirname(rows_out), exist_ok=True)
        with open(rows_out, "w") as f:
            json.dump({"header": f"# {cal.meta['command']}\n# machine: {cal.meta['machine']}",
                       "rows": rows}, f)
    print(f"# wrote {out}; median |predicted/measured - 1| on the calibration runs: "
          f"{cal.meta['median_error']:.3f}")
    return 0


def _saved(paths: str):
    """(rows, header) of the .json files of earlier runs, comma separated."""
    rows, headers = [], []
    for path in paths.split(","):
        with open(path) as f:
            saved = json.load(f)
        rows += saved["rows"]
        if saved["header"] not in headers:
            headers.append(saved["header"])
    return rows, "\n".join(headers)


def _by_point(rows) -> dict:
    """(transport, p, collective) -> size -> algo -> measured seconds."""
    by = {}
    for r in rows:
        by.setdefault((r["transport"], r["p"], r["collective"]), {}).setdefault(
            r["size"], {})[r["algo"]] = r["time_s"]
    return by


def _fastest(times: dict) -> dict:
    """The measured algorithms of one point (auto aside) and the fastest of them."""
    meas = {a: v for a, v in times.items() if a != "auto"}
    return meas, (min(meas, key=meas.get) if meas else None)


def report(rows, cal: Calibration, header: str, repeat=None) -> tuple[str, dict]:
    """The tables (text) and a summary dict. `repeat`: the rows of another run of
    the same points (the calibration's, say): its fastest algorithm per point,
    measured in this run, over this run's fastest (repeat/best) is what a perfect
    predictor scores here, so it shows how far the machine repeats itself."""
    from . import providers

    other = {(*k, size): _fastest(times)[1] for k, sizes in _by_point(repeat or []).items()
             for size, times in sizes.items()}

    out = [header, f"# model: {cal.source}", "# cells: measured us / predicted us / "
           "predicted/measured", ""]
    by = _by_point(rows)
    errs, per, autos, signed = [], {}, [], {}
    for (t, p, coll), sizes in sorted(by.items()):
        algos = providers(coll)
        out.append(f"# transport {t}, p={p}, {coll}")
        out.append(f"#{'size':>10} " + " ".join(f"{a:>24}" for a in algos))
        for size in sorted(sizes):
            cells = []
            for a in algos:
                m = sizes[size].get(a)
                if m is None:
                    cells.append(f"{'-':>24}")
                    continue
                pr = predict(a, coll, p, size, t, cal)
                e = abs(pr / m - 1)
                errs.append(e)
                per.setdefault(f"{t} p={p}", []).append(e)
                signed.setdefault(a, []).append(pr / m - 1)
                cells.append(f"{m * 1e6:9.1f} {pr * 1e6:9.1f} {pr / m:4.2f}")
            out.append(f" {size:10d} " + " ".join(cells))
        out.append("")
    summary = {"median_error": statistics.median(errs) if errs else None,
               "median_error_by": {k: statistics.median(v) for k, v in sorted(per.items())},
               "points": len(errs)}
    out.append(f"# median |predicted/measured - 1|: {summary['median_error']:.3f} over "
               f"{len(errs)} points; " + ", ".join(f"{k}: {v:.3f}" for k, v in
                                                   summary["median_error_by"].items()))
    # Per algorithm, where the model errs and which way: the median of
    # |predicted/measured - 1|, and of predicted/measured - 1 (below 0: predicted low).
    summary["by_algo"] = {a: {"median_error": statistics.median(abs(v) for v in vs),
                              "median_signed": statistics.median(vs), "points": len(vs)}
                          for a, vs in sorted(signed.items())}
    out.append("# per algorithm: median |predicted/measured - 1| (median signed; points): "
               + ", ".join(f"{a} {v['median_error']:.3f} ({v['median_signed']:+.3f}; "
                           f"{v['points']})" for a, v in summary["by_algo"].items()))
    out.append("")
    out.append("# auto: the algorithm the model picks at each size (RINGCOLL_ALGO=auto), its "
               "measured time over the best measured algorithm's (chose/best), and the "
               "auto group's own measured time over the best (auto/best)" + (
                   "; repeat/best: the fastest algorithm of the other run (--repeat-of), "
                   "measured here, over the best: a perfect predictor's score" if other else ""))
    out.append(f"#{'transport':>9} {'p':>2} {'collective':>14} {'size':>10} {'chose':>8} "
               f"{'best':>8} {'best us':>9} {'chose/best':>10} {'auto/best':>9}"
               + (f" {'repeat':>8} {'repeat/best':>11}" if other else ""))
    repeats = []
    for (t, p, coll), sizes in sorted(by.items()):
        value = auto_mod.resolve("auto", p, t, cal)
        for size in sorted(sizes):
            meas, best = _fastest(sizes[size])
            if best is None:
                continue
            chose = auto_mod.select(value, coll, size)
            cb = meas[chose] / meas[best] if chose in meas else float("nan")
            ab = sizes[size]["auto"] / meas[best] if "auto" in sizes[size] else float("nan")
            autos.append(cb)
            line = (f" {t:>9} {p:2d} {coll:>14} {size:10d} {chose:>8} {best:>8} "
                    f"{meas[best] * 1e6:9.1f} {cb:10.2f} {ab:9.2f}")
            rep = other.get((t, p, coll, size))
            if rep in meas:
                repeats.append(meas[rep] / meas[best])
                line += f" {rep:>8} {repeats[-1]:11.2f}"
            out.append(line)
    within = sum(1 for x in autos if x <= 1.15)
    summary["auto_within_15pct"] = f"{within}/{len(autos)}"
    summary["auto_worst"] = max(autos) if autos else None
    out.append(f"# auto's choice within 15% of the best measured: {within}/{len(autos)} sizes; "
               f"worst chose/best {summary['auto_worst']:.2f}")
    if repeats:
        rw = sum(1 for x in repeats if x <= 1.15)
        summary["repeat_within_15pct"] = f"{rw}/{len(repeats)}"
        out.append(f"# the other run's fastest algorithm within 15% of this run's: {rw}/"
                   f"{len(repeats)} sizes; worst repeat/best {max(repeats):.2f} (the "
                   "machine's repeatability: what a predictor that knew the other run scores)")
    return "\n".join(out) + "\n", summary


def plot(rows, cal, path, title):
    import matplotlib

    from .. import algorithms

    colours = algorithms()  # one colour per algorithm in every panel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import providers

    keys = sorted({(r["transport"], r["p"]) for r in rows})
    colls = [c for c in COLLECTIVES if any(r["collective"] == c for r in rows)]
    fig, axes = plt.subplots(len(keys), len(colls), figsize=(4.2 * len(colls), 3.2 * len(keys)),
                             squeeze=False)
    for i, (t, p) in enumerate(keys):
        for j, coll in enumerate(colls):
            ax = axes[i][j]
            for a in providers(coll):
                k = colours.index(a)
                pts = sorted((r["size"], r["time_s"]) for r in rows if (r["transport"], r["p"],
                             r["collective"], r["algo"]) == (t, p, coll, a))
                if not pts:
                    continue
                xs = [x for x, _ in pts]
                ax.loglog(xs, [y * 1e6 for _, y in pts], "o", color=f"C{k}", ms=4,
                          label=f"{a} measured")
                ax.loglog(xs, [predict(a, coll, p, x, t, cal) * 1e6 for x in xs], "-",
                          color=f"C{k}", lw=1, label=f"{a} predicted")
            ax.set_title(f"{coll}, {t}, p={p}", fontsize=9)
            ax.set_xlabel("bytes", fontsize=8)
            ax.set_ylabel("us per call", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, which="major", alpha=0.3)
            if i == 0 and j == 0:
                ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def host_of(machine_line: str) -> str:
    """The host part of a machine line (machine()): cores and CPU model."""
    return machine_line.split("),", 1)[0] + ")" if ")," in machine_line else machine_line


def note_machine(cal: Calibration) -> str:
    """A line when `cal` was fitted on another kind of host than this one: a
    calibration belongs to its machine (docs/MODEL.md)."""
    theirs = cal.meta.get("machine")
    if not theirs or host_of(theirs) == host_of(machine()):
        return ""
    return (f"# note: {cal.source} was calibrated on {host_of(theirs)}, this is "
            f"{host_of(machine())}: its constants may not hold here (python -m "
            "ringcoll.model --calibrate fits this machine's)")


def compare(a) -> int:
    cal = load(a.model)
    if note_machine(cal):
        print(note_machine(cal), file=sys.stderr)
    if a.from_json:
        rows, header = _saved(a.from_json)
        header = (f"# python -m ringcoll.model {' '.join(sys.argv[1:])}\n# measured by:\n"
                  + header)
    else:
        rows = measure.run(a.nproc, a.collectives, a.sizes, a.transports, auto=not a.no_auto,
                           budget=a.budget, runs=a.runs, model_path=a.model, passes=a.passes)
        header = (f"# python -m ringcoll.model {' '.join(sys.argv[1:])}\n# machine: {machine()}\n"
                  f"# method: ringcoll.bench's runner, budget {a.budget} s over {a.passes} "
                  f"passes of the whole sweep, runs per point in each: {a.runs}; per run the "
                  "slowest rank's median per-call time; the median of all runs")
    repeat = _saved(a.repeat_of)[0] if a.repeat_of else None
    text, summary = report(rows, cal, header, repeat)
    print(text)
    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".txt", "w") as f:
        f.write(text)
    if not a.from_json:
        with open(a.out + ".json", "w") as f:
            json.dump({"header": header, "model": cal.to_json(), "summary": summary,
                       "rows": rows}, f, indent=0)
    plot(rows, cal, a.out + ".png", f"ringcoll cost model ({cal.source}) vs measured")
    print(f"# wrote {a.out}.txt, {a.out}.png" + ("" if a.from_json else f", {a.out}.json"))
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    from .._modules import load_from_environment

    load_from_environment()  # the algorithms RINGCOLL_ALGO_MODULES defines, measured too
    return calibrate(a) if a.calibrate else compare(a)


if __name__ == "__main__":
    sys.exit(main())
