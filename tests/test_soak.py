"""The soak (tests/soak/soak.py), briefly: a few rounds per transport of every call
kind, completion mode and event, run as a user runs it (its command line, its JSON);
any hang, crash, wrong result, unclear error or error without a cause fails. The
harness's own tests are in test_soak_harness.py (run without the sanitizers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOAK = os.path.join(ROOT, "tests", "soak", "soak.py")


def soak(tmp_path, *args, timeout=150):
    out = tmp_path / "soak.json"
    proc = subprocess.run([sys.executable, SOAK, "--out", str(out), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    text = proc.stdout + proc.stderr
    summary = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, summary, text


@pytest.mark.alone
def test_soak_briefly(tmp_path):
    """A few rounds on each transport (one run: one fork server to start)."""
    # About 25 s here; a hang costs --stall-s and the stacks, hence the long timeout.
    rc, summary, text = soak(tmp_path, "--ops", "1600", "--seconds", "60", "--nproc", "2,3",
                             "--threads", "3", "--max-bytes", "262144", "--round-ops", "150",
                             "--pg-timeout-s", "8", "--stall-s", "25", "--seed", "47",
                             timeout=400)
    assert summary is not None, text[-6000:]
    assert rc == 0 and not summary["failed_rounds"], text[-20000:]
    # It did something: calls checked on every transport (a soak that checks nothing
    # passes), and an event fired.
    for transport in ("shm", "gloo", "stream", "auto"):
        t = summary["totals"].get(transport, {})
        assert t.get("rounds", 0) >= 1 and t.get("checked", 0) >= 100, (transport, t)
    assert summary["totals"]["all"]["events_fired"] >= 1, summary["totals"]
    assert summary["seed"] == 47 and summary["versions"]["torch"] and summary["command"]
