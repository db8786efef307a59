"""setup.py's variant selection refuses what it cannot do, loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setup(env_extra):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "setup.py", "--name"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_bad_ringcoll_cuda_value():
    r = _setup({"RINGCOLL_CUDA": "yes"})
    assert r.returncode != 0
    assert "RINGCOLL_CUDA='yes' must be 0 or 1" in r.stderr + r.stdout


@pytest.mark.skipif(torch.version.cuda is not None, reason="torch is a CUDA build here")
def test_forced_cuda_without_cuda_torch_fails_naming_why():
    r = _setup({"RINGCOLL_CUDA": "1"})
    assert r.returncode != 0
    out = r.stderr + r.stdout
    assert "RINGCOLL_CUDA=1 but the CUDA variant cannot be built" in out
    assert "is not a CUDA build" in out


def test_forced_cpu_variant_is_accepted():
    r = _setup({"RINGCOLL_CUDA": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ringcoll")
