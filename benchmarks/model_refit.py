"""A committed calibration refitted from its own saved rows by today's fit
(ringcoll.model.fit), its gamma and copy held, and both judged on every row:
the median |predicted/measured - 1| per transport and p, old beside new. What a
change to the fit does to the committed numbers, without re-timing anything.

    RINGCOLL_ALGO_MODULES=examples/pyring.py,examples/recdbl.py,examples/bruck_alltoall.py \
    python benchmarks/model_refit.py --model benchmarks/results/model-cpu-ports.json \
        --rows benchmarks/results/model-cpu-p2-8-measured.json --fit-p 2,3,4 \
        > benchmarks/results/model-refit-p2-8.txt

The algorithms the rows name must be loaded (RINGCOLL_ALGO_MODULES), as for
`python -m ringcoll.model --from`.
"""

from __future__ import annotations

import argparse
import statistics

from ringcoll import _modules, model
from ringcoll.model import Calibration, fit, load
from ringcoll.model.__main__ import _saved


def errors(cal: Calibration, rows) -> float:
    return statistics.median(
        abs(model.predict(r["algo"], r["collective"], r["p"], r["size"], r["transport"], cal)
            / r["time_s"] - 1) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the committed calibration JSON")
    ap.add_argument("--rows", required=True, help="its measurements (.json of --from)")
    ap.add_argument("--fit-p", default="2,3,4", help="world sizes fitted (the rest judged)")
    a = ap.parse_args()
    _modules.load_from_environment()
    old = load(a.model)
    rows = [r for r in _saved(a.rows)[0] if r["algo"] != "auto"]
    fit_p = [int(x) for x in a.fit_p.split(",")]
    fitted = [r for r in rows if r["p"] in fit_p]
    # as --calibrate starts: the built-in constants, this calibration's gamma, copy, cores
    new = Calibration(dict(load(None).transports), old.gamma, old.cores, source="refit",
                      copy=old.copy)
    print(f"# python benchmarks/model_refit.py --model {a.model} --rows {a.rows} "
          f"--fit-p {a.fit_p}")
    for t in sorted({r["transport"] for r in fitted}):
        kinds = [(t, False)] + ([(t + "/crowded", True)]
                                if any(r["p"] > old.cores for r in fitted if r["transport"] == t)
                                else [])
        for key, crowded in kinds:
            new.transports[key], by_ports = fit.fit_ports(fitted, t, new, crowded=crowded)
            print(f"# {key}: old {old.transports.get(key)}")
            print(f"# {key}: new {new.transports[key]}")
            print(f"#   median error by ports: "
                  + ", ".join(f"{k}: {v:.3f}" for k, v in by_ports.items()))
    print("| transport | p | fitted | points | old | new |")
    print("|---|---|---|---|---|---|")
    for t in sorted({r["transport"] for r in rows}):
        for p in sorted({r["p"] for r in rows if r["transport"] == t}):
            rs = [r for r in rows if r["transport"] == t and r["p"] == p]
            print(f"| {t} | {p} | {'yes' if p in fit_p else 'no'} | {len(rs)} | "
                  f"{errors(old, rs):.3f} | {errors(new, rs):.3f} |")


if __name__ == "__main__":
    main()
