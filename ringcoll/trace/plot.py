"""The timeline of one collective as a PNG (matplotlib): ranks as rows, each with a
send, a receive and a reduce/copy lane, bars coloured by step, the critical path
(ringcoll.trace.critical_path: the transfers a rank waited for, back from the last
rank to finish) as red arrows, in the legend only when there is one."""

from __future__ import annotations

from . import critical_path, duration, step_name


def draw(trace, seq, path):
    """The timeline of collective seq as a PNG; returns the legend's labels (the
    critical path's only when it has an arrow to draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = trace.collectives[seq]
    ops = trace.ops_of(seq)
    cp = critical_path(trace, seq)
    ranks = sorted(c.per_rank)
    t0 = min(c.start(r) for r in ranks)
    ms = lambda t: (t - t0) / 1e3  # noqa: E731
    steps = max((o.step for o in ops), default=0) + 1
    cmap = plt.get_cmap("tab10" if steps <= 10 else "tab20")
    color = lambda s: "0.6" if s < 0 else cmap(s % cmap.N)  # noqa: E731
    lanes = {"send": 0.3, "recv": 0.0, "compute": -0.3}
    h = 0.26
    fig, ax = plt.subplots(figsize=(12, 1.2 + 1.1 * len(ranks)))
    for r in ranks:
        y = -r
        a = c.per_rank[r]
        ax.plot([ms(a["start"]), ms(c.end(r))], [y - 0.5, y - 0.5], color="0.85", lw=0.8)
        for o in (o for o in ops if o.rank == r):
            if o.is_send and o.post is not None:
                end = o.done if o.done is not None else o.post
                ax.barh(y + lanes["send"], max(ms(end) - ms(o.post), 1e-4), left=ms(o.post),
                        height=h, color=color(o.step), edgecolor="black", linewidth=0.3)
            elif o.is_recv and o.post is not None and o.arrive is not None:
                # Posted .. arrived, thin (receives are often posted long before);
                # the part the rank waited for, full height and hatched.
                ax.barh(y + lanes["recv"], max(ms(o.arrive) - ms(o.post), 1e-4),
                        left=ms(o.post), height=h * 0.25, color=color(o.step), alpha=0.6)
                if o.wait > 0:
                    ax.barh(y + lanes["recv"], ms(o.arrive) - ms(o.want), left=ms(o.want),
                            height=h, color=color(o.step), hatch="///", edgecolor="black",
                            linewidth=0.3)
            if (o.is_recv or o.kind == "finish") and o.arrive is not None and o.done is not None:
                ax.barh(y + lanes["compute"], max(ms(o.done) - ms(o.arrive), 1e-4),
                        left=ms(o.arrive), height=h, color=color(o.step),
                        edgecolor="black", linewidth=0.3)
    for s, r in cp["chain"]:
        ax.annotate("", xy=(ms(r.arrive), -r.rank + lanes["recv"]),
                    xytext=(ms(s.post), -s.rank + lanes["send"]),
                    arrowprops=dict(arrowstyle="->", color="red", lw=1.4))
    ticks, labels = [], []
    for r in ranks:
        for name, dy in lanes.items():
            ticks.append(-r + dy)
            labels.append(f"rank {r} {name}" if name == "recv" else name)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("ms from the first rank's start (rank 0's clock)")
    from matplotlib.patches import Patch

    handles = [Patch(color=color(s), label=step_name(s))
               for s in sorted({o.step for o in ops})][:20]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="///",
                         label="waiting for the bytes"))
    if cp["chain"]:  # drawn only where a rank waited for a peer's bytes
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="red", lw=1.4,
                              label="critical path (waited-for transfers)"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    size = c.bytes
    human = f"{size / 2**20:g} MiB" if size >= 2**20 else f"{size} B"
    ax.set_title(f"{c.op} #{seq} ({c.algorithm}), {human}, {len(ranks)} ranks: "
                 f"{duration(trace, seq) / 1e3:.3f} ms; straggler rank {cp['straggler']} "
                 f"{step_name(cp['step'])}", fontsize=10)
    ax.grid(axis="x", color="0.9")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [h.get_label() for h in handles]
