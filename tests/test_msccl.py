"""MSCCL's XML in and out (ringcoll.msccl).

  * import: the three files of tests/msccl/ (written here from the published format:
    an all-pairs all-reduce whose reductions chain across threadblocks, a ring
    all-gather out of place, a ring all-reduce whose reducing threadblock waits for
    its receiving one) become algorithms for their collective and world size, are
    proved by the checker, declare where they apply, and run in processes against
    exact references on shared memory, gloo and the stream emulation;
  * a malformed file is refused naming the element and attribute; a wrong one with
    the checker's verdict and the MSCCL steps it came from (gpu, threadblock, step);
  * export: every shipped algorithm's every collective at p = 2..8 is written as
    MSCCL XML that MSCCL's reader's rules accept (program.parse checks them), and
    reading it back gives schedules that move the same messages between every pair
    of ranks in the same order and fold every element the same way, proved by the
    checker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import ringcoll
from ringcoll import _C, check, msccl, schedules
from ringcoll.msccl import MSCCLError, exporter
from tests import mp

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "tests" / "msccl"
ALLPAIRS, RING_AG, RING_2TB = (str(FILES / f) for f in (
    "allpairs_allreduce.xml", "ring_allgather.xml", "ring_allreduce_2tb.xml"))


def _load(path, name):
    """Loads a file under a name of this test (registered in this process: the
    algorithms are correct)."""
    return msccl.load(path, name=name)


# --------------------------------------------------------------------------------
# import


@pytest.mark.parametrize("path, name, collective, p, chunks", [
    (ALLPAIRS, "msccl_allpairs", "all_reduce", 4, 4),
    (RING_AG, "msccl_ring_ag", "all_gather", 4, 4),
    (RING_2TB, "msccl_ring_2tb", "all_reduce", 3, 3),
])
def test_a_file_becomes_an_algorithm_that_declares_where_it_applies(path, name, collective, p,
                                                                     chunks):
    assert _load(path, name) == name
    c10d = {"all_reduce": "allreduce", "all_gather": "allgather"}[collective]
    assert c10d in _C.provides(name)
    d = _C.applicability(name, c10d)
    assert d["world_sizes"] == [p] and d["count_multiple"] == chunks, d
    # proved at several counts (multiples of the chunks), skipped elsewhere
    for n in (0, chunks, 3 * chunks, 40 * chunks):
        check.check(name, collective, p, n)
    assert check.refusal(name, collective, p + 1)
    assert "is not a multiple of" in check.refusal(name, collective, p, chunks + 1)


def test_the_imported_schedules_are_the_files_steps():
    _load(RING_2TB, "msccl_ring_2tb")
    # rank 0 of the 2-threadblock ring, 2 elements a chunk: receives land in the
    # scratch (after the 6 elements of the buffer), re folds them in incoming-first
    s = check.schedules("msccl_ring_2tb", "all_reduce", 3, 6)[0]
    assert s["scratch"] == 4 and s["scratch_copy"] is False
    kinds = [sorted(t[0] for t in st["transfers"]) for st in s["steps"]]
    assert kinds[0] == ["recv_copy", "send"]  # round 0: chunk 0 out, chunk 2 in
    assert ["recv_reduce_first", "send"] in kinds  # a local re: send to itself
    assert any(st["reduced"] for st in s["steps"])  # where it completes a chunk
    _load(ALLPAIRS, "msccl_allpairs")
    s = check.schedules("msccl_allpairs", "all_reduce", 4, 4)[2]
    # rank 2's chunk: three receive-reduces, one a step, in the chain's order
    chain = [t for st in s["steps"] for t in st["transfers"] if t[0] == "recv_reduce"]
    assert [t[1] for t in chain] == [0, 1, 3] and all(t[2:] == (2, 3) for t in chain)


def msccl_world(rank, p, algos):
    from tests.test_algorithms import algorithms_matrix

    for path, name in algos:
        msccl.load(path, name=name)
    return algorithms_matrix(rank, p, {name: _C.provides(name) for _, name in algos})


@pytest.mark.parametrize("p, transport, files", [
    (4, "shm", [(ALLPAIRS, "msccl_allpairs"), (RING_AG, "msccl_ring_ag")]),
    (4, "stream", [(ALLPAIRS, "msccl_allpairs"), (RING_AG, "msccl_ring_ag")]),
    (4, "gloo", [(RING_AG, "msccl_ring_ag")]),
    (3, "shm", [(RING_2TB, "msccl_ring_2tb")]),
    (3, "stream", [(RING_2TB, "msccl_ring_2tb")]),
])
def test_imported_algorithms_against_references(p, transport, files):
    """Every dtype, op and count the matrix runs; counts that are not multiples of
    the chunks are refused on every rank (the matrix skips what an algorithm does
    not serve), the others exact."""
    mp.run_checks(p, msccl_world, files, timeout=600, transport=transport,
                  env={"RINGCOLL_STREAM_DELAY_US": "20"} if transport == "stream" else None)


def modules_world(rank, p):
    g = dist.new_group(backend="ringcoll", pg_options=ringcoll.Options(algo="allpairs_allreduce"))
    x = torch.arange(8.0) + rank
    dist.all_reduce(x, group=g)
    want = torch.arange(8.0) * p + p * (p - 1) / 2
    return [] if torch.equal(x, want) else [f"{x.tolist()} != {want.tolist()}"]


def test_ringcoll_algo_modules_takes_an_xml_file():
    mp.run_checks(4, modules_world, env={"RINGCOLL_ALGO_MODULES": ALLPAIRS})


# --------------------------------------------------------------------------------
# malformed and wrong files


def _text(path):
    return Path(path).read_text()


def _refused(text, fragment):
    with pytest.raises(MSCCLError) as err:
        msccl.load(None, name="msccl_bad", text=text)
    assert fragment in str(err.value), str(err.value)
    return str(err.value)


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: t.replace('<algo name', '<algos name').replace('</algo>', '</algos>'),
     "the top element is <algos>, not <algo>"),
    (lambda t: t[:-20], "not XML"),
    (lambda t: t.replace(' nchunksperloop="4"', ''),
     "<algo>: attribute 'nchunksperloop' is missing"),
    (lambda t: t.replace('coll="allreduce"', 'coll="allreduse"'),
     "attribute 'coll'=\"allreduse\" is not one of"),
    (lambda t: t.replace('<gpu id="3"', '<gpu id="2"', 1),
     "<gpu id=2>: attribute 'id'=\"2\" appears twice"),
    (lambda t: t.replace('i_chunks="4"', 'i_chunks="3"', 1),
     "<gpu id=0>: attribute 'i_chunks'=\"3\" does not make nchunksperloop=4"),
    (lambda t: t.replace('<tb id="1" send="2"', '<tb id="1" send="0"', 1),
     "<gpu id=0> <tb id=1>: attribute 'send'=\"0\" is neither -1 nor another gpu"),
    (lambda t: t.replace('type="rrc"', 'type="ra"', 1),
     "<step s=1>: attribute 'type'=\"ra\" is not run by MSCCL's interpreter"),
    (lambda t: t.replace('srcoff="1" dstbuf="i" dstoff="0" cnt="1"',
                         'srcoff="1" dstbuf="i" dstoff="0" cnt="72"', 1),
     "<step s=0>: attribute 'cnt'=\"72\" is not in [1, 72)"),
    (lambda t: t.replace('srcoff="1" dstbuf="i" dstoff="0" cnt="1"',
                         'srcoff="3" dstbuf="i" dstoff="0" cnt="2"', 1),
     "<step s=0>: attribute 'srcoff'=\"3\" and cnt 2 leave the i buffer of 4 chunks"),
    (lambda t: t.replace('depid="0" deps="1"', 'depid="7" deps="1"', 1),
     "<tb id=1> <step s=1>: attribute 'depid'=\"7\" names no threadblock of this gpu"),
    (lambda t: t.replace('hasdep="1"', 'hasdep="0"', 1),
     "which does not say hasdep=\"1\" (it would never signal)"),
    (lambda t: t.replace('<step s="3"', '<step s="4"', 1),
     "attribute 's'=\"4\" is not 3, its place in the threadblock"),
])
def test_a_malformed_file_is_refused_naming_element_and_attribute(edit, fragment):
    msg = _refused(edit(_text(ALLPAIRS)), fragment)
    assert "\n" not in msg


def test_a_wrong_file_gets_the_checkers_verdict_with_gpu_threadblock_and_step():
    # gpu 1's first reduction takes gpu 0's copy of chunk 0 instead of chunk 1: the
    # reduce mixes two positions (the checker), in gpu 1's threadblock 0, step 1
    t = _text(ALLPAIRS)
    gpu0 = t.index('<gpu id="0"')
    bad = t[:gpu0] + t[gpu0:].replace('type="s" srcbuf="i" srcoff="1"',
                                      'type="s" srcbuf="i" srcoff="0"', 1)
    msg = _refused(bad, "is refused by ringcoll.check:")
    assert "reduces position 0 from rank 0 into position 1" in msg, msg
    assert re.search(r"\(MSCCL: gpu 1: threadblock 0 step 1 \(rrc\)", msg), msg
    # an unmatched message, and a race between threadblocks
    _refused(t.replace('<step s="3" type="r" srcbuf="i" srcoff="1"',
                       '<step s="3" type="nop" srcbuf="i" srcoff="1"', 1),
             "message 1 from gpu 1 to gpu 0 on channel 0 has no partner: gpu 1 sends 2 "
             "messages there, gpu 0 receives 1")
    _refused(t.replace('depid="0" deps="1"', 'depid="-1" deps="-1"', 1),
             "<gpu id=0>: <tb id=0> <step s=1> and <tb id=1> <step s=1> touch the same "
             "chunks, one writing, with no dependency ordering them (a race)")


# --------------------------------------------------------------------------------
# export, and import(export(x))

SHIPPED = [a for a in ringcoll.algorithms() if _C.is_builtin(a) or a in schedules.SHIPPED]
EXPORTABLE = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather",
              "scatter", "all_to_all"]


def _messages(scheds, p):
    """{(sender, receiver): [(range on the sender, size)]} in step order."""
    out = {}
    for r, s in enumerate(scheds):
        for st in s["steps"]:
            for kind, q, b, e in st["transfers"]:
                if kind == "send" and q != r and b < e:
                    out.setdefault((r, q), []).append((b, e))
    return out


def _same(algo, coll, p, root, n, imported):
    counts = [[n // p] * p for _ in range(p)] if coll == "all_to_all" else None
    mine = check.schedules(algo, coll, p, n, root=root, counts=counts)
    back = check.schedules(imported, coll, p, n, root=root, counts=counts)
    assert _messages(back, p) == _messages(mine, p), (algo, coll, p, n)
    check.check_schedules(back, coll, p, n, root, f"import(export({algo}))", counts)
    assert check.final_state(back, coll, p, n, root, counts) == \
        check.final_state(mine, coll, p, n, root, counts), (algo, coll, p, n)


def test_export_and_back_moves_the_same_messages_and_folds_alike():
    done = 0
    for algo in SHIPPED:
        for coll in EXPORTABLE:
            if coll.replace("_", "") not in [c.replace("_", "") for c in _C.provides(algo)]:
                continue
            for p in range(2, 9):
                if check.refusal(algo, coll, p):
                    continue
                root = p - 1 if coll in ("broadcast", "reduce", "gather", "scatter") else 0
                text = msccl.export(algo, coll, p, root=root)
                prog = msccl.parse(text)  # MSCCL's reader's rules
                assert prog.ngpus == p and prog.collective == coll
                name = f"rt_{algo}_{coll}_{p}"
                msccl.load(None, name=name, text=text)
                unit = exporter.unit(algo, coll, p, root)
                for m in (1, 2):
                    _same(algo, coll, p, root, unit * m, name)
                done += 1
    assert done >= 60, done


def test_export_names_what_it_cannot_write():
    from ringcoll.schedules import Applies, register

    with pytest.raises(MSCCLError, match="barrier: MSCCL has no such collective"):
        msccl.export("ring", "barrier", 4)
    register("rt_p2p4", "all_reduce", applies=Applies(world_sizes=[2, 4]))(_ring)
    with pytest.raises(MSCCLError, match=re.escape(
            "cannot export: algorithm 'rt_p2p4' does not apply to all_reduce at p=3: p=3 is "
            "not among its world sizes")):
        msccl.export("rt_p2p4", "all_reduce", 3)


def test_an_exported_program_imports_under_the_name_it_was_written_with(tmp_path):
    """export then import keeps the name (the import renamed 'ringcoll ring all_reduce
    p=4' to 'ringcoll_ring_all_reduce_p_4'); a name RINGCOLL_ALGO could not take is
    refused at export, and a file that carries one is renamed saying so."""
    text = msccl.export("ring", "all_reduce", 4)
    assert msccl.parse(text).name == "ring_all_reduce_p4"
    assert msccl.load(None, text=text) == "ring_all_reduce_p4"
    assert "ring_all_reduce_p4" in _C.algorithms()
    assert msccl.load(None, text=msccl.export("ring", "all_reduce", 4, name="rt_named")) == \
        "rt_named"
    with pytest.raises(MSCCLError, match="name 'my ring': an imported file's algorithm"):
        msccl.export("ring", "all_reduce", 4, name="my ring")
    odd = tmp_path / "odd.xml"
    odd.write_text(text.replace('name="ring_all_reduce_p4"', 'name="rt odd name"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    got = subprocess.run([sys.executable, "-m", "ringcoll.msccl", "import", str(odd)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("rt_odd_name (the file names it 'rt odd name', which "
                                 "RINGCOLL_ALGO cannot name): all_reduce for 4 gpus"), got.stdout


def _ring(prm):
    """The built-in ring's all-reduce as a Python algorithm's schedule."""
    from ringcoll.schedules import Schedule, Transfer

    d = _C.schedule("ring", "allreduce", prm.size, prm.rank, prm.n)
    return Schedule([[Transfer(*t) for t in st["transfers"]] +
                     [schedules.reduced(r) for r in st["reduced"]] for st in d["steps"]],
                    result=d["result"])


def test_command_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    out = tmp_path / "ring4.xml"
    got = subprocess.run([sys.executable, "-m", "ringcoll.msccl", "export", "ring", "all_reduce",
                          "4", "-o", str(out)], capture_output=True, text=True, timeout=120,
                         env=env, cwd=REPO)
    assert got.returncode == 0, got.stderr
    assert msccl.read(str(out)).ngpus == 4
    got = subprocess.run([sys.executable, "-m", "ringcoll.msccl", "import", ALLPAIRS],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert got.returncode == 0, got.stderr
    assert "allpairs_allreduce: all_reduce for 4 gpus, counts multiples of 4: proved" in \
        got.stdout, got.stdout
    got = subprocess.run([sys.executable, "-m", "ringcoll.msccl", "import", str(tmp_path / "no")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
    assert got.returncode == 1 and "cannot read it" in got.stderr, got.stderr
