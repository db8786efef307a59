"""The soak (tests/soak/soak.py), briefly, judged by gloo: a few rounds of randomized
programs, each run on torch's gloo backend and on ringcoll over shared memory, gloo
point-to-point and the stream emulation, plus a round with a killed rank; any hang,
crash, wrong result, unplanned or unclear error, or difference from gloo that
docs/SUPPORTED.md does not list fails. Run as a user runs it (its command line, its
JSON). The harness's own tests are in test_soak_harness.py (run without the
sanitizers)."""

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
def test_soak_briefly_judged_by_gloo(tmp_path):
    """Seed 52: round 0 kills a rank (p = 2), rounds 1 and 2 are judged (one run: one
    fork server to start)."""
    # About 40 s here; a hang costs --stall-s and the stacks, hence the long timeout.
    rc, summary, text = soak(tmp_path, "--ops", "1500", "--seconds", "45", "--seed", "52",
                             "--nproc", "2,3", "--threads", "3", "--max-bytes", "262144",
                             "--round-ops", "150", "--pg-timeout-s", "4", "--stall-s", "15",
                             timeout=400)
    assert summary is not None, text[-6000:]
    assert rc == 0 and not summary["failed_rounds"], text[-20000:]
    t = summary["totals"]
    # It did something: calls checked and judged on every transport (a soak that
    # checks nothing passes), every kind of step ran, gloo judged, an event fired.
    for transport in ("shm", "gloo", "stream"):
        tt = t.get(transport, {})
        assert tt.get("judged", 0) >= 2 and tt.get("checked", 0) >= 300, (transport, tt)
        assert tt["divergences"] == 0 and tt["wrong"] == 0, (transport, tt)
        for step in ("chains", "churns", "gates", "objects", "errors_planned"):
            assert tt[step] > 0, (transport, step, tt)
    assert t["judge"]["runs"] >= 2 and t["judge"]["failed"] == 0, t["judge"]
    assert t["all"]["events_fired"] >= 1 and t["all"]["errors_clear"] >= 1, t["all"]
    assert {"more-dtypes-ops", "future-where-gloo-has-none", "ended-group-call"} <= \
        set(t["all"]["listed"]), t["all"]["listed"]
    assert summary["seed"] == 52 and summary["versions"]["torch"] and summary["command"]
