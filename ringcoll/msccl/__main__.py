"""python -m ringcoll.msccl import FILE.xml ... | export ALGO COLLECTIVE P [-o FILE]"""

from __future__ import annotations

import argparse
import sys

from . import MSCCLError, export, load, read


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ringcoll.msccl",
                                 description="MSCCL's XML in and out (ringcoll/msccl).")
    sub = ap.add_subparsers(dest="verb", required=True)
    imp = sub.add_parser("import", help="prove MSCCL XML files as ringcoll algorithms and say "
                                        "what each became")
    imp.add_argument("files", nargs="+")
    exp = sub.add_parser("export", help="write an algorithm's schedules as MSCCL XML")
    exp.add_argument("algo")
    exp.add_argument("collective")
    exp.add_argument("p", type=int)
    exp.add_argument("--root", type=int, default=0)
    exp.add_argument("-n", type=int, default=None,
                     help="the count to write it at (default: the smallest that scales)")
    exp.add_argument("-o", "--out", default=None, help="file (default: stdout)")
    a = ap.parse_args(argv)
    from .._modules import load_from_environment

    try:
        load_from_environment()
        if a.verb == "import":
            from .. import _C

            for path in a.files:
                prog = read(path)
                name = load(path)
                d = _C.applicability(name, prog.collective)
                renamed = (f" (the file names it {prog.name!r}, which RINGCOLL_ALGO cannot "
                           "name)" if prog.name and prog.name != name else "")
                print(f"{name}{renamed}: {prog.collective} for {prog.ngpus} gpus, counts "
                      f"multiples of {d['count_multiple']}: proved (ringcoll.check); "
                      f"RINGCOLL_ALGO={name} with RINGCOLL_ALGO_MODULES={path}")
            return 0
        text = export(a.algo, a.collective, a.p, n=a.n, root=a.root)
    except (MSCCLError, ValueError, RuntimeError, ImportError) as e:
        print(f"python -m ringcoll.msccl: {e}", file=sys.stderr)
        return 1
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
