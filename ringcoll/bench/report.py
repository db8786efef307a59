"""Tables (nccl-tests layout), the comparison table, JSON/CSV writers and the plot.
Pure functions of the result rows, so they are tested without any process group.

A row is a dict: backend, collective, nproc, device, dtype, op, size, count, root,
and `oop` / `ip` (out-of-place / in-place), each None or a dict with
time_us, algbw, busbw (GB/s) and wrong.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict

BASELINE = {"cpu": "gloo", "cuda": "nccl"}
_COLS = ("time_us", "algbw", "busbw", "wrong")


def _cell(m):
    if m is None:
        return f"{'-':>10} {'-':>8} {'-':>8} {'-':>6}"
    return f"{m['time_us']:10.1f} {m['algbw']:8.3f} {m['busbw']:8.3f} {m['wrong']:6d}"


def tables(rows) -> str:
    """One nccl-tests-style table per (backend, collective, nproc)."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["backend"], r["collective"], r["nproc"], r["device"])].append(r)
    out = []
    for (backend, coll, p, device), rs in groups.items():
        out.append(f"# {backend} {coll}, {p} processes, {device}")
        out.append(f"#{'':>45} {'out-of-place':^36} | {'in-place':^36}")
        out.append(f"#{'size':>11} {'count':>11} {'type':>9} {'redop':>6} {'root':>4} "
                   f"{'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6} | "
                   f"{'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}")
        for r in sorted(rs, key=lambda r: r["size"]):
            out.append(f" {r['size']:11d} {r['count']:11d} {r['dtype']:>9} {r['op']:>6} "
                       f"{r['root']:4d} {_cell(r['oop'])} | {_cell(r['ip'])}")
        out.append("")
    return "\n".join(out)


def _best(m_oop, m_ip):
    """The in-place figure where there is one (all_reduce has only in-place)."""
    return m_ip if m_ip is not None else m_oop


def comparison(rows) -> list[dict]:
    """ringcoll's busbw over the baseline's, per (collective, nproc, size)."""
    by = {(r["backend"], r["collective"], r["nproc"], r["size"], r["device"]): r for r in rows}
    out = []
    for (backend, coll, p, size, device), r in sorted(by.items(), key=lambda kv: kv[0][1:]):
        if backend != "ringcoll":
            continue
        for base in [b for b in {k[0] for k in by} if b != "ringcoll"]:
            b = by.get((base, coll, p, size, device))
            if b is None:
                continue
            mr, mb = _best(r["oop"], r["ip"]), _best(b["oop"], b["ip"])
            out.append({"collective": coll, "nproc": p, "size": size, "baseline": base,
                        "ringcoll_busbw": mr["busbw"], "baseline_busbw": mb["busbw"],
                        "ringcoll_time_us": mr["time_us"], "baseline_time_us": mb["time_us"],
                        "ratio": mr["busbw"] / mb["busbw"] if mb["busbw"] > 0 else float("nan")})
    return out


def comparison_table(rows) -> str:
    comp = comparison(rows)
    if not comp:
        return ""
    lines = [f"{'collective':>15} {'nproc':>5} {'size':>10} {'baseline':>9} "
             f"{'ringcoll us':>12} {'base us':>12} {'busbw ratio':>12}"]
    for c in comp:
        lines.append(f"{c['collective']:>15} {c['nproc']:5d} {human(c['size']):>10} "
                     f"{c['baseline']:>9} {c['ringcoll_time_us']:12.1f} "
                     f"{c['baseline_time_us']:12.1f} {c['ratio']:12.2f}")
    return "\n".join(lines)


def human(nbytes: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= k:
            return f"{nbytes / k:g}{unit}"
    return f"{nbytes}B"


def write_json(path, rows, meta) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows, "comparison": comparison(rows)}, f, indent=1)


def write_csv(path, rows) -> None:
    keys = ["backend", "collective", "nproc", "device", "dtype", "op", "size", "count", "root"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys + [f"{k}_{c}" for k in ("oop", "ip") for c in _COLS])
        for r in rows:
            w.writerow([r[k] for k in keys] +
                       [("" if r[k] is None else r[k][c]) for k in ("oop", "ip") for c in _COLS])


def write_plot(path, rows, title="") -> None:
    """busbw against size, log axes, one line per backend per collective (per
    world size when there are several)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One color per (collective, world size), one line style per backend: ringcoll
    # solid, baselines dashed, so each pair to compare shares a color.
    lines = defaultdict(list)
    nprocs = sorted({r["nproc"] for r in rows})
    for r in rows:
        m = _best(r["oop"], r["ip"])
        if m is None or m["busbw"] <= 0:
            continue
        lines[(r["collective"], r["nproc"], r["backend"])].append((r["size"], m["busbw"]))
    keys = sorted({(c, p) for c, p, _ in lines})
    colors = {k: plt.cm.tab10(i % 10) for i, k in enumerate(keys)}
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for (coll, p, backend), pts in sorted(lines.items()):
        pts.sort()
        label = f"{backend} {coll}" + (f" p={p}" if len(nprocs) > 1 else "")
        ax.plot([s for s, _ in pts], [b for _, b in pts], "-" if backend == "ringcoll" else "--",
                color=colors[(coll, p)], marker="o", markersize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title or "busbw by message size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
