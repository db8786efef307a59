"""Read, check, merge and explain the per-rank traces RINGCOLL_TRACE wrote (the
command line is ringcoll/trace/__main__.py, the drawing ringcoll/trace/plot.py).

    python -m ringcoll.trace DIR [--out merged.json] [--png timeline.png]
                                 [--collective SEQ] [--group ID]

DIR holds one file per rank, ringcoll-g<group>-rank<r>.json (the format is in
csrc/backend/trace_writer.h). The tool

* merges them into one Chrome/Perfetto trace (default DIR/merged.json): each rank's
  times shifted by the clock offset its file records (so every time is rank 0's
  clock), one process per rank with its lanes (collectives, reduce / copy, send and
  receive per peer), and a flow arrow from every send to the receive it pairs with;
* prints one line per collective (time, straggler, how late it started) and, for one
  collective (--collective, else the slowest), its critical path;
* draws that collective as a PNG (default DIR/timeline.png): ranks as rows, each
  with a send, a receive and a reduce/copy lane, bars coloured by step, the critical
  path in red.

Pairing: the k-th send from rank a to rank b in a collective is the k-th receive on
b from a (the transports keep per-direction order); fingerprint headers (step -1)
pair one to one.

Critical path: start at the rank that finished the collective last, at its end.
On the current rank at time t, take the last receive that arrived by t and that
the rank waited for (it wanted the bytes before they arrived); the path goes to
the matching send, on its sender, at the time it was posted, and continues from
there. It stops on a rank that waited for nothing before t: that rank is the
straggler, and its step is the step of the send that starts the path (the message
everyone downstream waited for), or the last step it ran if the path has no edge.
What that rank did from its start to t (its sends, copies, reduces and finishing
pass, each kind's busy time) is said too: for a call bound by bandwidth or the
reducer, where no rank waits for a late peer, that is where the time went.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field

FILE_RE = re.compile(r"ringcoll-g(?P<group>.+)-rank(?P<rank>\d+)\.json$")


@dataclass
class Op:
    """One operation of one rank's collective; times in us on rank 0's clock."""

    rank: int
    seq: int
    kind: str  # send | recv_copy | recv_reduce | finish
    peer: int
    step: int  # -1: the fingerprint header
    seg: int
    index: int
    begin: int
    count: int
    bytes: int
    forwarded: bool
    want: float | None
    post: float | None
    arrive: float | None
    done: float | None
    tid: int = 0

    @property
    def is_send(self):
        return self.kind == "send"

    @property
    def is_recv(self):
        return self.kind.startswith("recv")

    @property
    def wait(self):
        """How long the rank waited for this receive's bytes (0 if it did not)."""
        if self.want is None or self.arrive is None:
            return 0.0
        return max(0.0, self.arrive - self.want)


@dataclass
class Collective:
    seq: int
    op: str
    algorithm: str
    bytes: int
    steps: int
    per_rank: dict = field(default_factory=dict)  # rank -> args (aligned times)

    def start(self, rank):
        return self.per_rank[rank]["start"]

    def end(self, rank):
        a = self.per_rank[rank]
        return a["end"] if a["end"] is not None else a["start"]


@dataclass
class Trace:
    group: str
    size: int
    meta: dict  # rank -> the file's ringcoll_trace args
    events: dict  # rank -> raw events
    collectives: dict  # seq -> Collective
    ops: list  # every Op

    def ops_of(self, seq):
        return [o for o in self.ops if o.seq == seq]


def read_events(path):
    """A trace file's events; accepts the array form without its closing bracket (a
    process that died before closing it)."""
    with open(path) as f:
        text = f.read().strip()
    if not text.endswith("]"):
        text = text.rstrip(",") + "\n]"
    return json.loads(text)


def files(directory):
    """{group: {rank: path}} of the trace files in directory."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "ringcoll-g*-rank*.json"))):
        m = FILE_RE.search(os.path.basename(path))
        if m:
            out.setdefault(m["group"], {})[int(m["rank"])] = path
    return out


def _shift(v, off):
    return None if v is None else v + off


def load(directory, group=None):
    """The Trace of one group in directory (the group with most files when None)."""
    groups = files(directory)
    if not groups:
        raise FileNotFoundError(f"no ringcoll-g*-rank*.json trace files in {directory}")
    if group is None:
        group = max(groups, key=lambda g: (len(groups[g]), g))
    if group not in groups:
        raise KeyError(f"no trace files of group {group!r} in {directory} "
                       f"(groups: {', '.join(sorted(groups))})")
    meta, events, collectives, ops = {}, {}, {}, []
    for rank, path in sorted(groups[group].items()):
        evs = read_events(path)
        info = next((e["args"] for e in evs
                     if e.get("ph") == "M" and e.get("name") == "ringcoll_trace"), None)
        if info is None:
            raise ValueError(f"{path}: no ringcoll_trace metadata event")
        off = float(info.get("clock_offset_us") or 0.0) if info.get("clock_known") else 0.0
        meta[rank], events[rank] = info, evs
        for e in evs:
            cat, a = e.get("cat"), e.get("args", {})
            if cat == "collective":
                c = collectives.setdefault(a["seq"], Collective(
                    a["seq"], a["op"], a["algorithm"], a["bytes"], a["steps"]))
                c.per_rank[rank] = {**a, **{k: _shift(a.get(k), off)
                                            for k in ("issued", "start", "end")}}
            elif cat in ("send", "recv", "finish"):
                ops.append(Op(rank, a["seq"], a["kind"], a["peer"], a["step"], a["seg"],
                              a["index"], a["begin"], a["count"], a["bytes"], a["forwarded"],
                              *(_shift(a[k], off) for k in ("want", "post", "arrive", "done")),
                              tid=e.get("tid", 0)))
    size = max(int(m["size"]) for m in meta.values())
    return Trace(group, size, meta, events, collectives, ops)


def pairs(trace, seq=None):
    """(matched [(send, recv)], unmatched sends, unmatched receives)."""
    sends, recvs = {}, {}
    for o in trace.ops:
        if seq is not None and o.seq != seq:
            continue
        if o.is_send:
            sends[(o.seq, o.rank, o.peer, o.step < 0, o.index)] = o
        elif o.is_recv:
            recvs[(o.seq, o.peer, o.rank, o.step < 0, o.index)] = o
    matched = [(sends[k], recvs[k]) for k in sorted(sends.keys() & recvs.keys())]
    return (matched, [sends[k] for k in sorted(sends.keys() - recvs.keys())],
            [recvs[k] for k in sorted(recvs.keys() - sends.keys())])


def check(trace, slack_us=None):
    """Problems with the trace as strings (empty: consistent). Every send has its
    receive with the same bytes; each op's times are ordered; a receive arrives
    after its send was posted, within the clock alignment's error (`slack_us`,
    default: half the sum of the two ranks' clock round trips, plus 1 us)."""
    problems = []
    matched, lone_sends, lone_recvs = pairs(trace)
    complete = {seq for seq, c in trace.collectives.items()
                if all(a.get("completed") for a in c.per_rank.values())
                and len(c.per_rank) == trace.size}
    for o in lone_sends + lone_recvs:
        if o.seq in complete:
            problems.append(f"seq {o.seq}: rank {o.rank} {o.kind} step {o.step} index "
                            f"{o.index} with rank {o.peer} has no matching operation")
    for s, r in matched:
        if s.bytes != r.bytes:
            problems.append(f"seq {s.seq}: send {s.rank}->{r.rank} index {s.index} carries "
                            f"{s.bytes} B but its receive {r.bytes} B")
        slack = slack_us
        if slack is None:
            slack = (float(trace.meta[s.rank].get("clock_rtt_us") or 0)
                     + float(trace.meta[r.rank].get("clock_rtt_us") or 0)) / 2 + 1.0
        if s.post is not None and r.arrive is not None and r.arrive + slack < s.post:
            problems.append(f"seq {s.seq}: rank {r.rank} saw the bytes of send {s.rank}->"
                            f"{r.rank} index {s.index} at {r.arrive:.3f} us, before it was "
                            f"posted at {s.post:.3f} us")
    for o in trace.ops:
        seq_ok = o.seq in complete
        times = [t for t in ((o.post, o.done) if o.is_send else
                             (o.post, o.arrive, o.done) if o.is_recv else (o.arrive, o.done))]
        if seq_ok and any(t is None for t in times):
            problems.append(f"seq {o.seq}: rank {o.rank} {o.kind} step {o.step} seg {o.seg} "
                            f"misses a time {times}")
            continue
        known = [t for t in times if t is not None]
        if known != sorted(known):
            problems.append(f"seq {o.seq}: rank {o.rank} {o.kind} step {o.step} seg {o.seg} "
                            f"times out of order {times}")
        if o.want is not None and o.is_recv and o.post is not None and o.want < o.post:
            problems.append(f"seq {o.seq}: rank {o.rank} wanted {o.kind} step {o.step} "
                            "before posting it")
    return problems


def critical_path(trace, seq):
    """The critical path of collective seq (module doc): a dict with `end_rank`,
    `chain` (list of (send, recv) edges, latest first), `straggler` (rank),
    `step`, `late_start_us` (its start minus the earliest rank's) and
    `waited_us` (the total wait along the chain)."""
    c = trace.collectives[seq]
    ops = trace.ops_of(seq)
    matched, _, _ = pairs(trace, seq)
    send_of = {id(r): s for s, r in matched}
    waited_recvs = {}
    for o in ops:
        if o.is_recv and o.wait > 0 and id(o) in send_of:
            waited_recvs.setdefault(o.rank, []).append(o)
    ranks = sorted(c.per_rank)
    end_rank = max(ranks, key=c.end)
    rank, t = end_rank, c.end(end_rank)
    chain, seen = [], set()
    while True:
        cands = [o for o in waited_recvs.get(rank, ())
                 if o.arrive <= t + 1e-6 and id(o) not in seen]
        if not cands:
            break
        r = max(cands, key=lambda o: o.arrive)
        seen.add(id(r))
        s = send_of[id(r)]
        chain.append((s, r))
        rank, t = s.rank, s.post
    if chain:
        step = chain[-1][0].step
    else:
        mine = [o for o in ops if o.rank == rank and o.step >= 0]
        step = max((o.step for o in mine), default=-1)
    first = min(c.start(r) for r in ranks)
    return {"end_rank": end_rank, "chain": chain, "straggler": rank, "step": step,
            "late_start_us": c.start(rank) - first,
            "waited_us": sum(r.wait for _, r in chain),
            "until_us": t, "busy_us": busy(ops, rank, c.start(rank), t)}


# What a rank's own work is, by the op kinds of a trace: sends (posted until done),
# received bytes copied or reduced into place (from when they were there and wanted
# until done), the finishing pass (AVG's division).
_WORK = (("reduce", ("recv_reduce",)), ("copy", ("recv_copy",)), ("send", ("send",)),
         ("finish", ("finish",)))


def busy(ops, rank, start, until) -> dict:
    """{work: us} of `rank`'s own work between start and until (its schedule's steps,
    the header aside): per kind of _WORK, the union of its ops' intervals, so that
    segments in flight at once count once. Where a critical path ends at a rank that
    waited for nothing, this is where that rank's time went."""
    out = {}
    for name, kinds in _WORK:
        spans = []
        for o in ops:
            if o.rank != rank or o.step < 0 or o.kind not in kinds or o.done is None:
                continue
            if o.is_send:
                b = o.post
            elif o.is_recv:
                b = max(t for t in (o.arrive, o.want) if t is not None) \
                    if o.arrive is not None else None
            else:
                b = o.arrive if o.arrive is not None else o.post
            if b is None:
                continue
            b, e = max(b, start), min(o.done, until)
            if e > b:
                spans.append((b, e))
        total, reach = 0.0, None
        for b, e in sorted(spans):
            if reach is None or b > reach:
                total += e - b
                reach = e
            elif e > reach:
                total += e - reach
                reach = e
        if total > 0:
            out[name] = total
    return out


def step_name(step):
    return "header" if step < 0 else f"step {step}"


def describe_path(trace, seq, cp):
    c = trace.collectives[seq]
    t0 = min(c.start(r) for r in c.per_rank)
    ms = lambda t: f"{(t - t0) / 1e3:.3f} ms"  # noqa: E731
    lines = [f"critical path of {c.op} #{seq} ({c.algorithm}, {c.bytes} B), times from its "
             f"first start:",
             f"  rank {cp['end_rank']} finished last at {ms(c.end(cp['end_rank']))}"]
    for s, r in cp["chain"]:
        lines.append(f"  <- rank {r.rank} waited {r.wait / 1e3:.3f} ms (from {ms(r.want)} to "
                     f"{ms(r.arrive)}) for {step_name(s.step)} seg {s.seg} of rank {s.rank}, "
                     f"{s.bytes} B, posted at {ms(s.post)}")
    work = cp.get("busy_us") or {}
    if work:
        # What the straggler did instead of waiting: on a bandwidth- or compute-bound
        # call that is the whole story (no rank waited for a late peer).
        spent = ", ".join(f"{k} {v / 1e3:.3f} ms" for k, v in
                          sorted(work.items(), key=lambda kv: -kv[1]))
        lines.append(f"  <- rank {cp['straggler']} waited for nothing before that: from its "
                     f"start to {ms(cp['until_us'])} it was at its own work ({spent}; kinds "
                     "overlap), so the call is bound by moving and reducing bytes, not by a "
                     f"late peer; it started {cp['late_start_us'] / 1e3:.3f} ms after the "
                     "first rank")
    else:
        lines.append(f"  <- rank {cp['straggler']} waited for nothing before that; it started "
                     f"{cp['late_start_us'] / 1e3:.3f} ms after the first rank")
    lines.append(f"straggler: rank {cp['straggler']}, {step_name(cp['step'])}")
    return lines


def summary(trace):
    lines = []
    offs = ", ".join(f"r{r} {float(m.get('clock_offset_us') or 0):+.1f} us "
                     f"(rtt {float(m.get('clock_rtt_us') or 0):.1f})"
                     for r, m in sorted(trace.meta.items()) if r)
    lines.append(f"ringcoll trace: group {trace.group}, {len(trace.meta)} of {trace.size} "
                 f"ranks, {len(trace.collectives)} collectives; clock offsets to rank 0: "
                 f"{offs or '-'}")
    lines.append(f"{'seq':>6} {'op':<22} {'algorithm':<22} {'bytes':>11} {'time ms':>9} "
                 f"{'straggler':<18} {'late start ms':>13}")
    seqs = sorted(trace.collectives)
    if len(seqs) > 40:  # the 40 slowest, in order
        seqs = sorted(sorted(seqs, key=lambda s: -duration(trace, s))[:40])
        lines.append(f"(the 40 slowest of {len(trace.collectives)})")
    for seq in seqs:
        c = trace.collectives[seq]
        cp = critical_path(trace, seq)
        lines.append(f"{seq:>6} {c.op:<22} {c.algorithm:<22} {c.bytes:>11} "
                     f"{duration(trace, seq) / 1e3:>9.3f} "
                     f"{'rank %d %s' % (cp['straggler'], step_name(cp['step'])):<18} "
                     f"{cp['late_start_us'] / 1e3:>13.3f}")
    return lines


def duration(trace, seq):
    c = trace.collectives[seq]
    return max(c.end(r) for r in c.per_rank) - min(c.start(r) for r in c.per_rank)


def merged(trace):
    """The merged Chrome trace: every rank's events on rank 0's clock (relative to
    the first event), plus a flow arrow from each send to its receive."""
    base = min((o.post for o in trace.ops if o.post is not None),
               default=min((a["start"] for c in trace.collectives.values()
                            for a in c.per_rank.values()), default=0.0))
    out = []
    for rank, evs in sorted(trace.events.items()):
        m = trace.meta[rank]
        off = float(m.get("clock_offset_us") or 0.0) if m.get("clock_known") else 0.0
        for e in evs:
            e = dict(e)
            if "ts" in e:
                e["ts"] = round(e["ts"] + off - base, 3)
            if "args" in e and e.get("cat") in ("collective", "send", "recv", "finish"):
                e["args"] = {k: (round(v + off - base, 3) if k in (
                    "issued", "start", "end", "want", "post", "arrive", "done")
                    and v is not None else v) for k, v in e["args"].items()}
            out.append(e)
    matched, _, _ = pairs(trace)
    for i, (s, r) in enumerate(matched):
        if s.post is None or r.arrive is None:
            continue
        at = r.arrive - min(0.001, max(0.0, (r.arrive - (r.post or r.arrive)) / 2))
        out.append({"ph": "s", "id": i, "cat": "message", "name": "message", "pid": s.rank,
                    "tid": s.tid, "ts": round(s.post - base, 3)})
        out.append({"ph": "f", "bp": "e", "id": i, "cat": "message", "name": "message",
                    "pid": r.rank, "tid": r.tid, "ts": round(at - base, 3)})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"ringcoll_group": trace.group, "ranks": sorted(trace.meta),
                          "time_base_us": base,
                          "note": "times are rank 0's steady clock, in us from time_base_us"}}
