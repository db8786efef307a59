"""The soak harness itself (tests/soak/soak.py): an injected stall, wrong result and
crash must each be counted and shown, and its references must be exact and its
comparison see a misplaced block (a soak that cannot see them would pass anything).

Not in conftest's SANITIZED list, unlike test_soak.py: these tests stall, crash
(SIGSEGV) and kill ranks on purpose and read their stacks with gdb; under
AddressSanitizer the deliberate SIGSEGV is a report (which fails CI) and gdb, over
ASan's address space, takes longer than the harness gives it."""

from __future__ import annotations

import shutil
import sys

from tests.test_soak import SOAK, soak


def test_a_stall_is_a_hang_with_every_stack(tmp_path):
    rc, summary, text = soak(tmp_path, "--inject", "hang", "--only-round", "0", "--events",
                             "off", "--transports", "shm", "--nproc", "2", "--threads", "1",
                             "--round-ops", "30", "--pg-timeout-s", "2", "--stall-s", "4")
    assert rc == 1 and summary["totals"]["all"]["hangs"] == 1, text[-6000:]
    # The stalled rank's Python stack at the injected wait, its threads as the kernel
    # sees them and (gdb) their native stacks; the command that reruns the round.
    assert "HANG: no progress" in text and "Python stacks" in text, text[-6000:]
    assert 'soak.py", line' in text and "in run" in text, text[-6000:]
    assert "state=" in text, text[-6000:]
    if shutil.which("gdb"):
        assert "native stacks (gdb)" in text and "ringcoll::" in text, text[-6000:]
    assert "rerun:" in text and "--only-round 0" in text


def test_a_wrong_result_and_a_crash_are_counted(tmp_path):
    rc, summary, text = soak(tmp_path, "--inject", "wrong,crash", "--only-round", "0",
                             "--events", "off", "--transports", "shm", "--nproc", "3",
                             "--threads", "1", "--round-ops", "30", "--pg-timeout-s", "3",
                             "--stall-s", "8")
    a = summary["totals"]["all"]
    assert rc == 1 and a["wrong"] == 1 and a["crashes"] == 1, text[-6000:]
    assert "injected by --inject wrong" in text
    assert "Segmentation fault" in text, text[-6000:]  # the dead rank's stacks


def test_the_checker_sees_a_misplaced_block_and_the_references_are_exact():
    """The soak's inputs, references and comparison, without a world: every (dtype, op)
    it draws has a reference that the dtype holds exactly (so a wrong result cannot
    hide in rounding), and a block moved by one place, or one element changed, shows."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("soak_under_test", SOAK)
    s = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = s  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(s)
    finally:
        del sys.modules[spec.name]
    for dtype in s._dtypes():
        for op in s.reduce_ops_for(dtype):
            for p in (1, 3, 8):
                ins = [s.values(257, dtype, r, 1234, op, p) for r in range(p)]
                want = s.reference(ins, op, dtype, p)
                held = want.to(dtype)  # what ringcoll's output can hold
                assert s.differs(held, want) is None, (dtype, op, p)
                bad = held.clone()
                bad[100:101] = ~held[100:101] if dtype == torch.bool else \
                    (want[100:101] + 1).to(dtype)
                if not torch.equal(bad.to(want.dtype), held.to(want.dtype)):
                    assert s.differs(bad, want), (dtype, op, p)
        # Data only moved: two blocks of 64 swapped always show.
        blocks = s.values(128, dtype, 0, 99)
        swapped = torch.cat([blocks[64:], blocks[:64]])
        assert s.differs(blocks, blocks.clone()) is None
        assert s.differs(swapped, blocks) is not None, dtype
