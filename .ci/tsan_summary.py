"""Summarizes a folder of ThreadSanitizer reports (.ci/tsan): each distinct report, by
its kind and the first frame in ringcoll's own code (csrc/) of each of its first two
stacks, with how many times it came and one file that has it. Exits 1 if there is
any report.

    python .ci/tsan_summary.py DIR
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys

FRAME = re.compile(r"^\s+#\d+ (\S+).*? (\S+):(\d+)(?::\d+)? \(")
HEAD = re.compile(r"^WARNING: ThreadSanitizer: (.+?) \(pid=\d+\)")


def reports(path):
    """Each report of a file: (kind, [stack, ...]), a stack a list of (function, file,
    line) frames."""
    kind, stacks = None, []
    with open(path, errors="replace") as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                kind, stacks = m.group(1), []
                continue
            if kind is None:
                continue
            if line.startswith("SUMMARY: ThreadSanitizer"):
                yield kind, stacks
                kind = None
                continue
            m = FRAME.match(line)
            if m:
                if line.lstrip().startswith("#0 "):
                    stacks.append([])
                stacks[-1].append((m.group(1), m.group(2), int(m.group(3))))


def ours(stack):
    """The first frame of ringcoll's own code in a stack, as 'function file:line', or
    '(not ringcoll's)'."""
    for fn, path, line in stack:
        if "/csrc/" in path:
            return f"{fn} {path.split('/csrc/', 1)[1]}:{line}"
    return "(not ringcoll's)"


def main(folder):
    files = sorted(glob.glob(os.path.join(folder, "tsan.*")))
    seen = collections.Counter()
    where = {}
    for path in files:
        for kind, stacks in reports(path):
            key = (kind,) + tuple(ours(s) for s in stacks[:2])
            seen[key] += 1
            where.setdefault(key, os.path.basename(path))
    if not seen:
        print(f"tsan: no report in {folder} ({len(files)} files)")
        return 0
    print(f"tsan: {sum(seen.values())} reports, {len(seen)} distinct, in {len(files)} "
          f"files in {folder}:")
    for key, n in seen.most_common():
        print(f"  {n:4d} x {key[0]} (e.g. {where[key]})")
        for i, frame in enumerate(key[1:]):
            print(f"         stack {i + 1}: {frame}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
