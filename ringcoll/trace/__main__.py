"""python -m ringcoll.trace DIR: see ringcoll/trace/__init__.py."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import check, critical_path, describe_path, duration, files, load, merged, summary


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m ringcoll.trace",
                                 description="Merge, check, explain and draw the per-rank "
                                 "traces RINGCOLL_TRACE wrote (ringcoll/trace/__init__.py).")
    ap.add_argument("dir", help="the RINGCOLL_TRACE directory")
    ap.add_argument("--out", help="merged Chrome trace (default DIR/merged.json)")
    ap.add_argument("--png", help="timeline PNG (default DIR/timeline.png; '' for none)")
    ap.add_argument("--collective", type=int, metavar="SEQ",
                    help="the collective to explain and draw (default: the slowest)")
    ap.add_argument("--group", help="the process group id, when DIR holds several")
    args = ap.parse_args(argv)
    trace = load(args.dir, args.group)
    others = sorted(set(files(args.dir)) - {trace.group})
    if others:
        print(f"(also in {args.dir}: groups {', '.join(others)}; choose with --group)")
    for line in summary(trace):
        print(line)
    problems = check(trace)
    for p in problems[:20]:
        print("inconsistent:", p)
    if not trace.collectives:
        return 0
    seq = args.collective
    if seq is None:
        seq = max(trace.collectives, key=lambda s: duration(trace, s))
    if seq not in trace.collectives:
        ap.error(f"no collective with seq {seq} (have {min(trace.collectives)}.."
                 f"{max(trace.collectives)})")
    print()
    for line in describe_path(trace, seq, critical_path(trace, seq)):
        print(line)
    out = args.out or os.path.join(args.dir, "merged.json")
    with open(out, "w") as f:
        json.dump(merged(trace), f)
    print(f"merged trace: {out}")
    png = os.path.join(args.dir, "timeline.png") if args.png is None else args.png
    if png:
        from .plot import draw

        draw(trace, seq, png)
        print(f"timeline: {png} (collective {seq})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
