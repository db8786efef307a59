"""setup.py's variant selection refuses what it cannot do, loudly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

# Runs on every torch CI tests (tests/conftest.py): the build's choices read the torch
# it builds against.
pytestmark = pytest.mark.every_torch

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


def test_cuda_home_without_headers_is_named(tmp_path):
    """A CUDA_HOME with nvcc but no runtime headers (/usr/local, where a wrapper in
    /usr/local/bin makes torch look) is not a toolkit: the build says so instead of
    failing later on a missing cuda_runtime_api.h."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")
    r = _setup({"RINGCOLL_CUDA": "1", "CUDA_HOME": str(tmp_path)})
    assert r.returncode != 0
    assert f"CUDA_HOME={tmp_path} has no bin/nvcc with include/cuda_runtime_api.h" in (
        r.stderr + r.stdout)


@pytest.mark.parametrize("value", ["adress", "address,thread", "thread,undefined"])
def test_bad_ringcoll_sanitize_value(value):
    r = _setup({"RINGCOLL_SANITIZE": value})
    assert r.returncode != 0
    assert (f"RINGCOLL_SANITIZE='{value}' must be a comma-separated list of address, "
            "undefined, thread, with thread alone") in r.stderr + r.stdout


def test_forced_cpu_variant_is_accepted():
    r = _setup({"RINGCOLL_CUDA": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ringcoll")


def test_unbuilt_checkout_says_to_build_it(tmp_path):
    """`import ringcoll` from a checkout whose extension was never built (a failed
    build) names the command that builds it, not Python's 'partially initialized
    module' circular-import message."""
    import shutil

    shutil.copytree(os.path.join(ROOT, "ringcoll"), tmp_path / "ringcoll",
                    ignore=shutil.ignore_patterns("_C*", "__pycache__"))
    shutil.copy(os.path.join(ROOT, "ringcoll_autoload.py"), tmp_path)
    # An editable install of this checkout would find the built extension through its
    # import hook: leave the hook out, as in a venv where the build failed.
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
            "if 'editable' not in repr(f).lower()]; import ringcoll")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ringcoll's C++ extension is not built in "), r.stderr
    assert "pip install --no-build-isolation -e ." in last and str(tmp_path) in last
    assert "circular import" not in r.stderr


def test_pyproject_declares_what_pip_needs():
    """A PEP 517/660 build (old pips fall back to `setup.py develop` without one), the
    Python that torch 2.13 needs, and no torch in the build requirements (pip would
    fetch a torch of its own into an isolated build: the extension must be built
    against the torch installed beside it)."""
    import re

    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()  # (tomllib is Python 3.11+; ringcoll supports 3.10)
    system = text.split("[build-system]", 1)[1].split("\n[", 1)[0]
    assert 'build-backend = "setuptools.build_meta"' in system
    requires = re.search(r"requires = \[(.*?)\]", system).group(1)
    assert "setuptools" in requires and "torch" not in requires
    assert re.search(r'^requires-python = ">=3.10"$', text, re.M)
