"""An MSCCL algorithm as data, read from and written as its XML, with the rules of
MSCCL's own reader (microsoft/msccl's src/graph/topo.cc, RCCL's msccl parser) checked
with one-line errors that name the element and the attribute.

The format (what MSCCLang, TACCL and TE-CCL emit):

    <algo name= coll= ngpus= nchunksperloop= nchannels= proto= inplace= [minBytes=]
          [maxBytes=]>
      <gpu id= i_chunks= o_chunks= s_chunks=>       one per rank
        <tb id= send= recv= chan=>                   a threadblock: one send peer and
                                                     one receive peer at most (-1: none)
          <step s= type= srcbuf= srcoff= dstbuf= dstoff= cnt= depid= deps= hasdep=/>

Buffers i, o, s (input, output, scratch) are counted in chunks: a call's buffer of
nchunksperloop chunks (all-gather: its output; reduce-scatter: its input), each
count * (all-gather, reduce-scatter: p) / nchunksperloop elements. A threadblock
runs its steps in order; a step with depid >= 0 first waits until threadblock depid
finished its step deps (which says hasdep="1"); further dependencies come as "nop"
steps before it, each with one. Messages between two GPUs pair in order per
channel: the k-th send of gpu a's threadblock that sends to b on channel c meets the
k-th receive of b's threadblock that receives from a on c.

Step types, as MSCCL's interpreter runs them (src and dst are this GPU's buffers):
  s     send src                     r     receive into dst
  rcs   receive into dst, send it on cpy   dst = src
  rrc   dst = src OP received        re    dst = src OP dst (consecutive ones into one
  rrs   send src OP received                dst fold in order)
  rrcs  dst = src OP received, send dst    nop   dependencies only
(NCCL's reduce-copy folds its sources in order, the local one first; the
interpreter's reduce computes redFn(src, dst)). "ra" is refused: the interpreter
this reads does not run it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# MSCCL's limits (src/include/msccl.h and the reader)
MAX_STEPS = 256          # steps of a threadblock
MAX_THREADBLOCKS = 216   # threadblocks of a gpu
MAX_COUNT = 72           # cnt < MAX_COUNT
MAX_CHANNELS = 32
PROTOCOLS = ("Simple", "LL128", "LL")
# MSCCL's collective names -> torch's (custom: gather and scatter, by ringcoll's
# attribute ringcoll_coll, which MSCCL's reader ignores)
COLLS = {"allreduce": "all_reduce", "allgather": "all_gather", "reduce": "reduce",
         "broadcast": "broadcast", "alltoall": "all_to_all", "reduce_scatter": "reduce_scatter",
         "custom": None}
MSCCL_NAME = {v: k for k, v in COLLS.items() if v}
TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
SENDS = ("s", "rcs", "rrs", "rrcs")
RECVS = ("r", "rcs", "rrs", "rrc", "rrcs")
READS_SRC = ("s", "rrs", "rrc", "rrcs", "cpy", "re")   # read src
WRITES_DST = ("r", "rcs", "rrc", "rrcs", "cpy", "re")  # write dst


class MSCCLError(ValueError):
    """A malformed or wrong MSCCL algorithm; the message names where."""


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0


@dataclass
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: list = field(default_factory=list)


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list = field(default_factory=list)


@dataclass
class Program:
    name: str
    coll: str         # MSCCL's name
    ngpus: int
    nchunksperloop: int
    nchannels: int
    proto: str
    inplace: int
    gpus: list
    min_bytes: int = 0
    max_bytes: int | None = None  # None: MSCCL's default (128 MiB) when read, none written
    ringcoll_coll: str | None = None  # custom: gather or scatter
    root: int = 0                     # broadcast, reduce, gather, scatter

    @property
    def collective(self) -> str:
        """torch's name of what it computes."""
        return COLLS[self.coll] or self.ringcoll_coll


# ---------------------------------------------------------------------------------
# reading


def _where(elem_path):
    return " ".join(elem_path)


def _attr(node, name, path, kind=int, default=None):
    text = node.get(name)
    if text is None:
        if default is not None:
            return default
        raise MSCCLError(f"{_where(path)}: attribute '{name}' is missing")
    if kind is str:
        return text
    try:
        return int(text)
    except ValueError:
        raise MSCCLError(f"{_where(path)}: attribute '{name}'=\"{text}\" is not a whole "
                         "number") from None


def _bad(path, attr, value, why):
    return MSCCLError(f"{_where(path)}: attribute '{attr}'=\"{value}\" {why}")


def parse(text: str, source: str = "<string>") -> Program:
    """A Program from MSCCL XML; MSCCLError naming the element and attribute of the
    first rule it breaks (MSCCL's reader's rules, plus a few that make it well
    defined: every gpu once, steps numbered in order, dependencies on steps that
    exist and say hasdep)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise MSCCLError(f"{source}: not XML ({e})") from None
    if root.tag != "algo":
        raise MSCCLError(f"{source}: the top element is <{root.tag}>, not <algo>")
    path = [f"{source}: <algo>"]
    coll = _attr(root, "coll", path, str)
    if coll not in COLLS:
        raise _bad(path, "coll", coll, f"is not one of {', '.join(COLLS)}")
    proto = _attr(root, "proto", path, str)
    if proto not in PROTOCOLS:
        raise _bad(path, "proto", proto, f"is not one of {', '.join(PROTOCOLS)}")
    prog = Program(name=_attr(root, "name", path, str), coll=coll,
                   ngpus=_attr(root, "ngpus", path), nchunksperloop=_attr(root, "nchunksperloop", path),
                   nchannels=_attr(root, "nchannels", path), proto=proto,
                   inplace=_attr(root, "inplace", path), gpus=[],
                   min_bytes=_attr(root, "minBytes", path, default=0),
                   max_bytes=(_attr(root, "maxBytes", path) if root.get("maxBytes") is not None
                              else None),
                   ringcoll_coll=root.get("ringcoll_coll"),
                   root=_attr(root, "root", path, default=0))
    for name, low in (("ngpus", 1), ("nchunksperloop", 1), ("nchannels", 1)):
        if getattr(prog, name) < low:
            raise _bad(path, name, getattr(prog, name), f"is below {low}")
    if prog.inplace not in (0, 1):
        raise _bad(path, "inplace", prog.inplace, "is not 0 or 1")
    if prog.min_bytes < 0:
        raise _bad(path, "minBytes", prog.min_bytes, "is negative")
    if prog.max_bytes is not None and prog.max_bytes < prog.min_bytes:
        raise _bad(path, "maxBytes", prog.max_bytes, f"is below minBytes {prog.min_bytes}")
    if coll == "custom" and prog.ringcoll_coll not in ("gather", "scatter"):
        raise _bad(path, "coll", coll, "is a custom collective: ringcoll reads one only with "
                   "ringcoll_coll=\"gather\" or \"scatter\" (what ringcoll writes)")
    if not 0 <= prog.root < prog.ngpus:
        raise _bad(path, "root", prog.root, f"is not a rank of {prog.ngpus}")
    in_mult = prog.ngpus if coll == "allgather" else 1  # as MSCCL's reader, by its names
    out_mult = prog.ngpus if coll == "reduce_scatter" else 1
    seen = set()
    for g_node in root:
        if g_node.tag != "gpu":
            raise MSCCLError(f"{_where(path)}: <{g_node.tag}> where only <gpu> elements go")
        gpath = path + [f"<gpu id={g_node.get('id')}>"]
        gpu = Gpu(_attr(g_node, "id", gpath), _attr(g_node, "i_chunks", gpath),
                  _attr(g_node, "o_chunks", gpath), _attr(g_node, "s_chunks", gpath))
        if not 0 <= gpu.id < prog.ngpus:
            raise _bad(gpath, "id", gpu.id, f"is not a rank of ngpus={prog.ngpus}")
        if gpu.id in seen:
            raise _bad(gpath, "id", gpu.id, "appears twice")
        seen.add(gpu.id)
        for name, mult in (("i_chunks", in_mult), ("o_chunks", out_mult)):
            v = getattr(gpu, name)
            if v < 0 or (v > 0 and v * mult != prog.nchunksperloop):
                raise _bad(gpath, name, v, f"does not make nchunksperloop={prog.nchunksperloop}"
                           + (f" (times ngpus={prog.ngpus})" if mult > 1 else ""))
        if gpu.s_chunks < 0:
            raise _bad(gpath, "s_chunks", gpu.s_chunks, "is negative")
        _read_threadblocks(g_node, gpath, gpu, prog)
        prog.gpus.append(gpu)
    missing = sorted(set(range(prog.ngpus)) - seen)
    if missing:
        raise MSCCLError(f"{_where(path)}: no <gpu> for rank{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(map(str, missing))} of ngpus={prog.ngpus}")
    prog.gpus.sort(key=lambda g: g.id)
    return prog


def _read_threadblocks(g_node, gpath, gpu, prog):
    ids = set()
    for t_node in g_node:
        if t_node.tag != "tb":
            raise MSCCLError(f"{_where(gpath)}: <{t_node.tag}> where only <tb> elements go")
        tpath = gpath + [f"<tb id={t_node.get('id')}>"]
        tb = Threadblock(_attr(t_node, "id", tpath), _attr(t_node, "send", tpath),
                         _attr(t_node, "recv", tpath), _attr(t_node, "chan", tpath))
        if not 0 <= tb.id < MAX_THREADBLOCKS:
            raise _bad(tpath, "id", tb.id, f"is not in [0, {MAX_THREADBLOCKS})")
        if tb.id in ids:
            raise _bad(tpath, "id", tb.id, "appears twice on this gpu")
        ids.add(tb.id)
        for name in ("send", "recv"):
            v = getattr(tb, name)
            if not -1 <= v < prog.ngpus or v == gpu.id:
                raise _bad(tpath, name, v, f"is neither -1 nor another gpu of {prog.ngpus}")
        if not 0 <= tb.chan < MAX_CHANNELS or tb.chan >= prog.nchannels:
            raise _bad(tpath, "chan", tb.chan, f"is not a channel of nchannels={prog.nchannels}")
        for k, s_node in enumerate(t_node):
            if s_node.tag != "step":
                raise MSCCLError(f"{_where(tpath)}: <{s_node.tag}> where only <step> elements go")
            tb.steps.append(_read_step(s_node, tpath + [f"<step s={s_node.get('s')}>"], k, tb,
                                       gpu))
        if len(tb.steps) > MAX_STEPS:
            raise MSCCLError(f"{_where(tpath)}: {len(tb.steps)} steps, more than MSCCL's "
                             f"{MAX_STEPS}")
        gpu.tbs.append(tb)
    gpu.tbs.sort(key=lambda t: t.id)
    for i, tb in enumerate(gpu.tbs):
        if tb.id != i:
            raise MSCCLError(f"{_where(gpath)}: threadblock {i} is missing (ids must be 0, 1, "
                             "... in a row)")
    for tb in gpu.tbs:
        for st in tb.steps:
            spath = gpath + [f"<tb id={tb.id}>", f"<step s={st.s}>"]
            if st.depid < 0:
                continue
            if st.depid >= len(gpu.tbs):
                raise _bad(spath, "depid", st.depid, "names no threadblock of this gpu")
            target = gpu.tbs[st.depid]
            if not 0 <= st.deps < len(target.steps):
                raise _bad(spath, "deps", st.deps, f"names no step of threadblock {st.depid}")
            if target.steps[st.deps].hasdep != 1:
                raise _bad(spath, "deps", st.deps, f"waits for threadblock {st.depid} step "
                           f"{st.deps}, which does not say hasdep=\"1\" (it would never "
                           "signal)")
        for k, st in enumerate(tb.steps):
            if st.type == "nop" and st.depid >= 0 and (k + 1 == len(tb.steps) or
                                                       tb.steps[k + 1].depid < 0):
                raise MSCCLError(f"{_where(gpath)} <tb id={tb.id}> <step s={st.s}>: a nop's "
                                 "dependency must be followed by a step with one of its own "
                                 "(MSCCL's reader refuses a chain that ends without)")


def _read_step(node, spath, k, tb, gpu):
    st = Step(s=_attr(node, "s", spath), type=_attr(node, "type", spath, str),
              srcbuf=_attr(node, "srcbuf", spath, str), srcoff=_attr(node, "srcoff", spath),
              dstbuf=_attr(node, "dstbuf", spath, str), dstoff=_attr(node, "dstoff", spath),
              cnt=_attr(node, "cnt", spath), depid=_attr(node, "depid", spath, default=-1),
              deps=_attr(node, "deps", spath, default=-1),
              hasdep=_attr(node, "hasdep", spath, default=0))
    if st.s != k:
        raise _bad(spath, "s", st.s, f"is not {k}, its place in the threadblock")
    if st.type not in TYPES:
        why = ("is not run by MSCCL's interpreter" if st.type == "ra" else
               f"is not one of {', '.join(TYPES)}")
        raise _bad(spath, "type", st.type, why)
    if st.hasdep not in (0, 1):
        raise _bad(spath, "hasdep", st.hasdep, "is not 0 or 1")
    if st.type != "nop" and not 1 <= st.cnt < MAX_COUNT:
        raise _bad(spath, "cnt", st.cnt, f"is not in [1, {MAX_COUNT})")
    if st.type in SENDS and tb.send < 0:
        raise _bad(spath, "type", st.type, f"sends, but threadblock {tb.id} has send=\"-1\"")
    if st.type in RECVS and tb.recv < 0:
        raise _bad(spath, "type", st.type, f"receives, but threadblock {tb.id} has recv=\"-1\"")
    chunks = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
    for side, used in (("src", st.type in READS_SRC), ("dst", st.type in WRITES_DST)):
        buf, off = getattr(st, f"{side}buf"), getattr(st, f"{side}off")
        if not used:
            continue
        if buf not in chunks:
            raise _bad(spath, f"{side}buf", buf, "is not i, o or s")
        if not 0 <= off or off + st.cnt > chunks[buf]:
            raise _bad(spath, f"{side}off", off, f"and cnt {st.cnt} leave the {buf} buffer of "
                       f"{chunks[buf]} chunks")
    return st


# ---------------------------------------------------------------------------------
# writing


def to_xml(prog: Program) -> str:
    """The program as MSCCL XML (the attributes MSCCL's reader reads, and, for
    ringcoll's own reading, ringcoll_coll and root where they matter)."""
    algo = ET.Element("algo")
    attrs = {"name": prog.name, "proto": prog.proto, "nchannels": prog.nchannels,
             "nchunksperloop": prog.nchunksperloop, "ngpus": prog.ngpus, "coll": prog.coll,
             "inplace": prog.inplace}
    if prog.min_bytes:
        attrs["minBytes"] = prog.min_bytes
    if prog.max_bytes is not None:
        attrs["maxBytes"] = prog.max_bytes
    if prog.ringcoll_coll:
        attrs["ringcoll_coll"] = prog.ringcoll_coll
    if prog.collective in ("broadcast", "reduce", "gather", "scatter"):
        attrs["root"] = prog.root
    for k, v in attrs.items():
        algo.set(k, str(v))
    for gpu in prog.gpus:
        g = ET.SubElement(algo, "gpu", id=str(gpu.id), i_chunks=str(gpu.i_chunks),
                          o_chunks=str(gpu.o_chunks), s_chunks=str(gpu.s_chunks))
        for tb in gpu.tbs:
            t = ET.SubElement(g, "tb", id=str(tb.id), send=str(tb.send), recv=str(tb.recv),
                              chan=str(tb.chan))
            for st in tb.steps:
                ET.SubElement(t, "step", s=str(st.s), type=st.type, srcbuf=st.srcbuf,
                              srcoff=str(st.srcoff), dstbuf=st.dstbuf, dstoff=str(st.dstoff),
                              cnt=str(st.cnt), depid=str(st.depid), deps=str(st.deps),
                              hasdep=str(st.hasdep))
    ET.indent(algo, space="  ")
    return ET.tostring(algo, encoding="unicode") + "\n"
