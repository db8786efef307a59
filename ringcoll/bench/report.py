"""Tables (nccl-tests layout), the comparison table, JSON/CSV writers and the plot.
Pure functions of the result rows, so they are tested without any process group.

A row is a dict: backend, collective, nproc, device, transport (ringcoll's, None
for other backends), dtype, op, size, count, root, and `oop` / `ip` (out-of-place /
in-place), each None or a measurement (records.measurement): time_us (median over
runs of the slowest rank's per-call median), time_min_us / time_max_us (the spread:
min-max of the runs), algbw, busbw, busbw_min, busbw_max (GB/s), calls (timed
calls, all runs),
runs_us (the per-run times) and wrong.
"""

from __future__ import annotations

import csv
import json
import textwrap
from collections import defaultdict

from .records import bus_factor, human

BASELINE = {"cpu": "gloo", "cuda": "nccl"}
_COLS = ("time_us", "time_min_us", "time_max_us", "algbw", "busbw", "busbw_min",
         "busbw_max", "calls", "wrong")
_EMPTY = f"{'-':>10} {'-':>17} {'-':>8} {'-':>8} {'-':>6}"


def _cell(m):
    if m is None:
        return _EMPTY
    spread = f"{m['time_min_us']:.1f}-{m['time_max_us']:.1f}"
    return f"{m['time_us']:10.1f} {spread:>17} {m['algbw']:8.3f} {m['busbw']:8.3f} {m['wrong']:6d}"


def _label(backend, transport):
    if transport == "stream":
        return f"{backend} (transport stream: the CPU emulation of the CUDA path)"
    return f"{backend} (transport {transport})" if transport else backend


def _graph_note(graph) -> str:
    return f"; graph mode: {graph} calls captured, timed per replay / {graph}" if graph else ""


def _mode(r) -> str:
    """'eager', or 'graph' for a row of the graph mode (--graph: K calls captured in a
    graph and replayed, time per call = replay time / K)."""
    return "graph" if r.get("graph") else "eager"


def tables(rows) -> str:
    """One nccl-tests-style table per (backend, collective, nproc), with the
    min-max of the runs next to the median time."""
    groups = defaultdict(list)
    for r in rows:
        groups[(r["backend"], r["collective"], r["nproc"], r["device"],
                r.get("transport"), r.get("graph", 0))].append(r)
    head = f"{'time(us)':>10} {'min-max(us)':>17} {'algbw':>8} {'busbw':>8} {'#wrong':>6}"
    out = []
    for (backend, coll, p, device, transport, graph), rs in groups.items():
        title = f"# {_label(backend, transport)} {coll}, {p} processes, {device}"
        reasons = {r.get("skipped") for r in rs}
        if graph and len(reasons) == 1 and None not in reasons:  # one reason for every size
            out += [f"{title}{_graph_note(graph)}: none, {reasons.pop()}", ""]
            continue
        out.append(title + _graph_note(graph))
        out.append(f"#{'':>45} {'out-of-place':^53} | {'in-place':^53}")
        out.append(f"#{'size':>11} {'count':>11} {'type':>9} {'redop':>6} {'root':>4} "
                   f"{head} | {head}")
        run = [r for r in rs if not r.get("skipped")]
        for key, name in (("oop", "out-of-place"), ("ip", "in-place")):
            if run and all(r[key] is None for r in run):  # why all '-'
                out.append(f"# {name}: - (torch's {coll} has no {name} form)")
        for r in rs:
            if r.get("skipped"):
                out.append(f"# {r['size']} B: skipped: {r['skipped']}")
        for r in sorted(rs, key=lambda r: r["size"]):
            count = "-" if r["count"] is None else r["count"]
            out.append(f" {r['size']:11d} {count:>11} {r['dtype']:>9} {r['op']:>6} "
                       f"{r['root']:4d} {_cell(r['oop'])} | {_cell(r['ip'])}")
        out.append("")
    return "\n".join(out)


# What each collective's size is the bytes of (records: the larger buffer).
_SIZE_OF = {"all_reduce": "the tensor", "broadcast": "the tensor", "reduce": "the tensor",
            "all_gather": "the gathered output (p blocks)",
            "reduce_scatter": "the input (p blocks)", "gather": "the root's output (p blocks)",
            "scatter": "the root's input (p blocks)", "all_to_all": "what a rank sends"}
_FACTOR = {"all_reduce": "2(p-1)/p", "reduce_scatter": "(p-1)/p", "all_gather": "(p-1)/p",
           "gather": "(p-1)/p", "scatter": "(p-1)/p", "all_to_all": "(p-1)/p",
           "broadcast": "1", "reduce": "1"}


def legend(rows) -> str:
    """What every column of tables() and comparison_table() means, for the
    collectives and world sizes in `rows`: printed once above the tables."""
    colls = list(dict.fromkeys(r["collective"] for r in rows))
    ps = sorted({r["nproc"] for r in rows})
    lines = [
        "# How to read the tables (nccl-tests' layout; one table per backend, collective and "
        "world size p):",
        "#   size     bytes of the collective's larger buffer: " + "; ".join(
            f"{c}: {_SIZE_OF[c]}" for c in colls),
        "#   count    elements in that buffer (a whole number per rank; '-': the row is "
        "another size's, the line above it says which)",
        "#   type     element type; redop: the reduction (none: the collective reduces "
        "nothing)",
        "#   root     the root rank of broadcast, reduce, gather and scatter (0); -1: the "
        "collective has no root (all ranks get the result)",
        "#   out-of-place | in-place: the output in a buffer of its own | the output over "
        "the input (all_gather: the input is the rank's block of the output; "
        "reduce_scatter: the output is the rank's block of the input); '-': torch has no "
        "such form of the call",
        "#   time(us) one call, issued and waited for alone: the median over the runs of the "
        "slowest rank's median call; lower is better",
        "#   min-max(us) the fastest and the slowest run",
        "#   algbw    size / time in GB/s (1 GB = 1e9 bytes; 0.000: below 0.0005, read the "
        "time); higher is better",
        "#   busbw    algbw x a factor of the collective and p, the rate each rank's link "
        "carries in a ring (nccl-tests' PERFORMANCE.md), comparable across collectives and "
        "world sizes; higher is better. Factor: " + "; ".join(
            f"{c} {_FACTOR[c]}" + (" (" + ", ".join(f"{bus_factor(c, p):.2f} at p={p}"
                                                     for p in ps) + ")"
                                   if _FACTOR[c] != "1" else "") for c in colls),
        "#   #wrong   elements that differ from the exact expected result, checked after "
        "the timed calls on fresh inputs (0: exact)",
    ]
    return "\n".join(lines)


def _best(m_oop, m_ip):
    """The in-place figure where there is one (all_reduce has only in-place)."""
    return m_ip if m_ip is not None else m_oop


def ratio_spread(base_runs_us, ring_runs_us) -> tuple[float, float]:
    """Min-max of baseline time / ringcoll time over the runs. Runs are paired (run
    i of both backends ran back to back) when both lists have the same length;
    otherwise the widest bounds: slowest baseline over fastest ringcoll and back."""
    if base_runs_us and len(base_runs_us) == len(ring_runs_us):
        ratios = [b / r for b, r in zip(base_runs_us, ring_runs_us) if r > 0]
        if ratios:
            return min(ratios), max(ratios)
    if not base_runs_us or not ring_runs_us or min(ring_runs_us) <= 0:
        return float("nan"), float("nan")
    return min(base_runs_us) / max(ring_runs_us), max(base_runs_us) / min(ring_runs_us)


def comparison(rows) -> list[dict]:
    """ringcoll's busbw over the baseline's (= baseline time / ringcoll time), per
    (collective, nproc, size), with the min-max of the per-run ratios."""
    by = {(r["backend"], _mode(r), r["collective"], r["nproc"], r["size"], r["device"]): r
          for r in rows}
    bases = sorted({k[0] for k in by} - {"ringcoll"})
    out = []
    for (backend, mode, coll, p, size, device), r in sorted(by.items(),
                                                            key=lambda kv: kv[0][1:]):
        if backend != "ringcoll":
            continue
        for base in bases:
            b = by.get((base, mode, coll, p, size, device))
            if b is None:
                continue
            mr, mb = _best(r["oop"], r["ip"]), _best(b["oop"], b["ip"])
            if mr is None or mb is None:  # skipped: the algorithm does not serve it
                continue
            lo, hi = ratio_spread(mb.get("runs_us", [mb["time_us"]]),
                                  mr.get("runs_us", [mr["time_us"]]))
            out.append({"collective": coll, "nproc": p, "size": size, "baseline": base,
                        "mode": mode, "transport": r.get("transport"),
                        "ringcoll_busbw": mr["busbw"], "baseline_busbw": mb["busbw"],
                        "ringcoll_time_us": mr["time_us"], "baseline_time_us": mb["time_us"],
                        "ratio": mb["time_us"] / mr["time_us"] if mr["time_us"] > 0
                        else float("nan"), "ratio_min": lo, "ratio_max": hi})
    return out


def ratio_heading(baselines, algo=None) -> str:
    """What the comparison's ratio means, naming the ringcoll column by its algorithm
    (`algo`: the bench's --algo or RINGCOLL_ALGO; None: not said). A baseline that is
    ringcoll with other options (ringcoll+algo=pyring) is said to be slower above 1,
    not "ringcoll is faster": both columns are ringcoll there."""
    ours = f"ringcoll ({algo})" if algo else "ringcoll"
    head = (f"# ratio = baseline time / {ours} time = {ours} busbw / baseline busbw, "
            f"in-place where the collective has it: above 1, {ours} is faster than the "
            "baseline (2.00: in half the time); below 1, the baseline is")
    variants = [b for b in baselines if b.startswith("ringcoll")]
    if variants:
        head += (f"; {', '.join(variants)} {'is' if len(variants) == 1 else 'are'} ringcoll "
                 f"too: above 1, {'it is' if len(variants) == 1 else 'they are'} slower than "
                 f"{ours}")
    return head


def comparison_table(rows, algo=None) -> str:
    """The comparison, with a heading that says which way is better (ratio_heading;
    `algo`: what the ringcoll column ran), and a line per point that has no ratio
    saying why."""
    comp = comparison(rows)
    if not comp:
        return ""
    lines = [ratio_heading(sorted({c["baseline"] for c in comp}), algo)
             + "; min-max: the lowest and highest ratio over the paired runs; mode: eager "
             "(each call alone) or graph (--graph: K calls captured once, replayed; both "
             "sides in the same mode)",
             f"{'collective':>15} {'nproc':>5} {'size':>10} {'mode':>5} {'baseline':>9} "
             f"{'ringcoll us':>12} {'base us':>12} {'ratio':>8} {'min-max':>13}"]
    for c in comp:
        spread = f"{c['ratio_min']:.2f}-{c['ratio_max']:.2f}"
        lines.append(f"{c['collective']:>15} {c['nproc']:5d} {human(c['size']):>10} "
                     f"{c['mode']:>5} {c['baseline']:>9} {c['ringcoll_time_us']:12.1f} "
                     f"{c['baseline_time_us']:12.1f} {c['ratio']:8.2f} {spread:>13}")
    for r in rows:  # points with no ratio
        if r["backend"] == "ringcoll" and r.get("skipped"):
            lines.append(f"{r['collective']:>15} {r['nproc']:5d} {human(r['size']):>10} "
                         f"{_mode(r):>5} {'-':>9} skipped: {r['skipped']}")
    graphed = [r for r in rows if r.get("graph") and r["backend"] == "ringcoll"
               and not r.get("skipped")]
    if graphed and not any(c["mode"] == "graph" for c in comp):
        why = sorted({r["skipped"] for r in rows if r.get("graph") and r["backend"] != "ringcoll"
                      and r.get("skipped")})
        lines.append("# graph mode: no ratio, no baseline has a graph figure"
                     + (f" ({'; '.join(why)})" if why else ""))
    return "\n".join(lines)


def write_json(path, rows, meta) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": rows, "comparison": comparison(rows)}, f, indent=1)


def write_csv(path, rows) -> None:
    """One line per row; per placement the _COLS (runs_us stays in the JSON)."""
    keys = ["backend", "transport", "graph", "collective", "nproc", "device", "dtype", "op",
            "size", "count", "root"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys + [f"{k}_{c}" for k in ("oop", "ip") for c in _COLS])
        for r in rows:
            w.writerow([r.get(k) if r.get(k) is not None else "" for k in keys] +
                       [("" if r[k] is None else r[k][c]) for k in ("oop", "ip") for c in _COLS])


def plot_series(rows) -> dict:
    """What the plot draws, as data: {collective: [series]} with the collectives in
    sweep order and ringcoll's series first; a series is a dict with backend, nproc,
    and sizes, busbw, lo, hi (the min-max band), sorted by size."""
    lines = defaultdict(list)
    for r in rows:
        m = _best(r["oop"], r["ip"])
        if m is None or m["busbw"] <= 0:
            continue
        name = r["backend"] + (" (graph)" if r.get("graph") else "")
        lines[(r["collective"], r["backend"] != "ringcoll", name, r["nproc"])].append(
            (r["size"], m["busbw"], m.get("busbw_min", m["busbw"]),
             m.get("busbw_max", m["busbw"])))
    order = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather",
             "scatter", "all_to_all"]
    colls = sorted({k[0] for k in lines}, key=lambda c: (order.index(c) if c in order
                                                         else len(order), c))
    out = {c: [] for c in colls}
    for (coll, _, backend, p), pts in sorted(lines.items()):
        pts.sort()
        out[coll].append({"backend": backend, "nproc": p, "sizes": [x[0] for x in pts],
                          "busbw": [x[1] for x in pts], "lo": [x[2] for x in pts],
                          "hi": [x[3] for x in pts]})
    return out


def size_ticks(sizes, most=9) -> list[int]:
    """Sizes to label on the x axis (in B / KiB / MiB): every one of the sweep when
    there are at most `most`, else every k-th, with the largest always labelled."""
    xs = sorted(set(sizes))
    if len(xs) <= most:
        return xs
    ticks = xs[::-(-(len(xs) - 1) // (most - 1))]
    return ticks if ticks[-1] == xs[-1] else ticks + [xs[-1]]


_COLORS = {"ringcoll": "tab:blue", "gloo": "tab:orange", "nccl": "tab:green",
           "nccl-ring": "tab:red"}
_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]


def write_plot(path, rows, title="", memcpy_gbps=None) -> None:
    """busbw against size, log-log, one panel per collective: one color per backend,
    one line style and marker per world size, the min-max of the runs as a shaded
    band, and the single-core memcpy rate as a horizontal reference line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    panels = plot_series(rows)
    series = [s for ss in panels.values() for s in ss]
    nprocs = sorted({s["nproc"] for s in series})
    extra = iter(plt.cm.tab10.colors[4:])
    colors = {b: _COLORS.get(b) or next(extra) for b in sorted({s["backend"] for s in series})}
    n = max(1, len(panels))
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4.8), sharey=True, squeeze=False)
    for ax, (coll, ss) in zip(axes[0], panels.items()):
        for s in ss:
            style, marker = _STYLES[nprocs.index(s["nproc"]) % len(_STYLES)]
            color = colors[s["backend"]]
            ax.plot(s["sizes"], s["busbw"], style, marker=marker, markersize=3, color=color,
                    label=f"{s['backend']} p={s['nproc']}")
            ax.fill_between(s["sizes"], s["lo"], s["hi"], color=color, alpha=0.2, linewidth=0)
        if memcpy_gbps:
            ax.axhline(memcpy_gbps, color="black", linestyle=":", linewidth=1,
                       label=f"memcpy 1 core {memcpy_gbps:.1f} GB/s")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = size_ticks([x for s in ss for x in s["sizes"]])
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [human(t) for t in ticks], rotation=45, ha="right")
        ax.set_xlabel("size (the collective's larger buffer)")
        ax.set_title(coll)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("busbw (GB/s), higher is better; band: min-max of runs")
    # wrapped to the figure's width: one panel is 5 inches, about 50 characters a line
    fig.suptitle(textwrap.fill((title + "; " if title else "") + "busbw by size (in place "
                               "where the call has that form), higher is better",
                               width=10 * 5 * n))
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
