"""MSCCL's XML in and out: an algorithm that MSCCLang, TACCL or TE-CCL synthesized
runs as a ringcoll algorithm, and a ringcoll algorithm runs on MSCCL's executor.

    from ringcoll import msccl
    name = msccl.load("allpairs.xml")              # registered: RINGCOLL_ALGO=name
    text = msccl.export("ring", "all_reduce", p=4)  # MSCCL XML of ringcoll's ring

    python -m ringcoll.msccl import allpairs.xml    # prove it, say what it became
    python -m ringcoll.msccl export ring all_reduce 4 -o ring4.xml
    RINGCOLL_ALGO_MODULES=allpairs.xml ...          # every tool and process group

Import (importer.py): the file's <algo> becomes an algorithm written in Python for
its collective, that declares (ringcoll.schedules.Applies) the file's world size,
counts that are multiples of its chunks, its minBytes and maxBytes, and its root;
every rank's schedule is built once, in chunk units, and scaled by each call's chunk
size. Before it is registered the checker proves it at one and two elements a
chunk: a wrong program is refused with the checker's verdict and the MSCCL steps it
came from (gpu, threadblock, step); a malformed file with the element and attribute
(program.py).

Export (exporter.py): any algorithm's schedules (built in or Python) for one
collective and world size, as MSCCL XML that MSCCL's reader accepts: a threadblock
per peer and direction and one for local work, dependencies where a step must wait
for another threadblock's earlier step, in place. import(export(x)) moves the same
messages between every pair of ranks in the same order and leaves every element of
every rank folded the same way (the same bits): tests/test_msccl.py proves it for
every shipped algorithm and collective at p = 2..8.
"""

from __future__ import annotations

import os
import re

from .. import _modules
from .program import MSCCLError, Program, parse, to_xml

__all__ = ["load", "read", "export", "MSCCLError", "Program", "parse", "to_xml",
           "Imported"]


def read(path: str) -> Program:
    """The Program of an XML file (MSCCLError naming what is malformed)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise MSCCLError(f"{path}: cannot read it ({e.strerror})") from None
    return parse(text, source=path)


def valid_name(name: str) -> bool:
    """Whether RINGCOLL_ALGO can name it as it is (registry.cc's rule, and a letter
    first): the import keeps such a name."""
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name))


def _name_of(prog: Program, path: str | None) -> str:
    """The name an import registers: the file's <algo name> as it is when RINGCOLL_ALGO
    can name it (what export writes), else made one (the CLI says so)."""
    base = prog.name or (os.path.splitext(os.path.basename(path))[0] if path else "msccl")
    if valid_name(base):
        return base
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", base).strip("_") or "msccl"
    return name if name[0].isalpha() else f"msccl_{name}"


class Imported:
    """An MSCCL program as a ringcoll algorithm's function (Params -> Schedule)."""

    def __init__(self, prog: Program, name: str):
        from .importer import Translation

        self.prog, self.name = prog, name
        tr = Translation(prog)
        self.templates = tr.schedules()
        self.main = tr.layouts[0].main  # chunks of the ringcoll buffer (n / chunk size)

    @property
    def collective(self) -> str:
        return self.prog.collective

    def applies(self):
        from ..schedules import Applies

        prog = self.prog
        # MSCCL counts the bytes of one rank's part where NCCL does (all-gather's
        # input, reduce-scatter's output, all-to-all's block for one rank); ringcoll
        # counts the whole
        per = prog.ngpus if prog.collective in ("all_gather", "reduce_scatter",
                                                "all_to_all") else 1
        rooted = prog.collective in ("broadcast", "reduce", "gather", "scatter")
        return Applies(world_sizes=[prog.ngpus], min_bytes=prog.min_bytes * per,
                       max_bytes=None if prog.max_bytes is None else prog.max_bytes * per,
                       count_multiple=self.main, roots=[prog.root] if rooted else None)

    def schedule(self, prm):
        """This rank's schedule for prm: the template scaled by prm.n / chunks."""
        from ..schedules import Reduced, Schedule, Transfer

        m = prm.n // self.main
        if self.collective == "all_to_all" and list(prm.send_counts) != \
                [m * self.main // (2 * prm.size)] * prm.size:
            raise ValueError(f"MSCCL algorithm {self.name!r} moves equal blocks: send counts "
                             f"{list(prm.send_counts)} are not")
        steps, result, scratch, _ = self.templates[prm.rank]
        out = [[Transfer(t.kind, t.peer, t.begin * m, t.end * m) if isinstance(t, Transfer)
                else Reduced(t.begin * m, t.end * m) for t in st] for st in steps]
        return Schedule(out, result=(result[0] * m, result[1] * m), scratch=scratch * m,
                        name=self.name, empty_scratch=True)

    def where(self, message: str) -> str:
        """The MSCCL steps behind a ringcoll step that the checker's message names."""
        found = re.search(r"step (\d+):? rank (\d+)", message) or \
            re.search(r"rank (\d+) (?:sends|receives) \[\d+, \d+\) (?:to|from) rank \d+ in "
                      r"step (\d+)", message)
        if found is None:
            end = re.search(r"rank (\d+) at the end", message)
            return f"gpu {end.group(1)}'s output" if end else "the program as a whole"
        step, rank = (int(found.group(1)), int(found.group(2))) if message[
            found.start():].startswith("step") else (int(found.group(2)), int(found.group(1)))
        ops = self.templates[rank][3].get(step)
        if not ops:
            return f"gpu {rank}: the copy of its output to its place"
        return f"gpu {rank}: " + "; ".join(f"threadblock {tb} step {s} ({t})" for tb, s, t in ops)

    def prove(self):
        """The checker at one and two elements a chunk, on every rank; MSCCLError with
        its verdict and the MSCCL steps it names."""
        from .. import check
        from ..schedules import AlgorithmError, Params, _Definition

        prog, p = self.prog, self.prog.ngpus
        definition = _Definition(self.name, "", {self.collective: self.schedule},
                                 {self.collective: self.applies()})
        for m in (1, 2):
            n = self.main * m
            counts = None
            if self.collective == "all_to_all":
                counts = [[n // (2 * p)] * p for _ in range(p)]
            try:
                definition._proved(self.collective, p, n, prog.root, tuple(range(p)),
                                   (0,) * p, counts)
            except AlgorithmError as e:
                cause = e.__cause__
                text = str(cause if isinstance(cause, check.ScheduleError) else e)
                raise MSCCLError(f"MSCCL algorithm {prog.name!r} ({prog.coll}, "
                                 f"{p} gpus) is refused by ringcoll.check: {text} (MSCCL: "
                                 f"{self.where(text)})") from None


def load(path: str, name: str | None = None, text: str | None = None) -> str:
    """Imports an MSCCL XML file (or `text`) as an algorithm registered for its
    collective and world size; returns its name (the file's algo name, made a
    RINGCOLL_ALGO name, unless `name`)."""
    from ..schedules import register

    prog = parse(text, source=path or "<string>") if text is not None else read(path)
    imported = Imported(prog, name or _name_of(prog, path))
    imported.prove()
    summary = (f"MSCCL {prog.coll} '{prog.name}' for {prog.ngpus} gpus, "
               f"{prog.nchunksperloop} chunks" + (f" (from {os.path.basename(path)})"
                                                   if path else ""))
    register(imported.name, imported.collective, summary=summary,
             applies=imported.applies())(imported.schedule)
    return imported.name


def export(algo: str, collective: str, p: int, n: int | None = None, root: int = 0,
           name: str | None = None) -> str:
    """algo's schedules for collective at p ranks as MSCCL XML (exporter.py)."""
    from .exporter import export_program

    return to_xml(export_program(algo, collective, p, n=n, root=root, name=name))


# RINGCOLL_ALGO_MODULES names .xml files beside Python modules
_modules.LOADERS[".xml"] = load
