"""torch finds ringcoll by itself (ringcoll_autoload.py's entry points): a script
with no `import ringcoll` runs under torchrun; an install that cannot load does not
break `import torch` (one warning says why); an extension built for another torch
says which torch it was built for. Each case runs in fresh interpreters, since
autoload happens at `import torch`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

# Runs on every torch CI tests (tests/conftest.py): torch's entry-point groups differ by
# version (torch.backends; torch.distributed.backends from 2.14).
pytestmark = pytest.mark.every_torch

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    dist.init_process_group("ringcoll")
    r, p = dist.get_rank(), dist.get_world_size()
    x = torch.full((5,), float(r + 1))
    dist.all_reduce(x)
    assert x.tolist() == [p * (p + 1) / 2] * 5, x
    print(f"rank {r}: {dist.get_backend()} {x[0].item():g}", flush=True)
    dist.destroy_process_group()
""")


def _installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.name == "ringcoll" for group in ("torch.backends", "torch.distributed.backends")
               for ep in entry_points(group=group))


def test_entry_points_fit_the_torch_built_for():
    # torch.backends is loaded at every `import torch`: only where torch has no lazy
    # group (before 2.14), since a dangling one (a deleted checkout) breaks the import.
    from importlib.metadata import entry_points

    import torch.distributed as dist

    if not _installed():
        pytest.skip("ringcoll is not pip-installed here (no entry points)")
    lazy = hasattr(dist.Backend, "_ensure_backend_registered")
    eager = [ep for ep in entry_points(group="torch.backends") if ep.name == "ringcoll"]
    later = [ep for ep in entry_points(group="torch.distributed.backends")
             if ep.name == "ringcoll"]
    assert len(later) == 1 and later[0].value == "ringcoll_autoload:register"
    assert len(eager) == (0 if lazy else 1), eager


needs_install = pytest.mark.skipif(
    not _installed(), reason="ringcoll is not pip-installed here (no entry points): "
                             "pip install --no-build-isolation -e .")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGCOLL_")}
    env.update(extra)
    return env


@needs_install
def test_script_without_import_under_torchrun(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert "ringcoll" not in SCRIPT.replace('"ringcoll"', "")  # named only as the backend
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "3",
         "--standalone", str(script)],
        capture_output=True, text=True, timeout=180, env=_env(OMP_NUM_THREADS="1"),
        cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    for r in range(3):
        assert f"rank {r}: ringcoll 6" in out.stdout, out.stdout + out.stderr


def _broken_ringcoll(tmp_path) -> Path:
    """A `ringcoll` package that fails to import, first on the path."""
    fake = tmp_path / "fake"
    (fake / "ringcoll").mkdir(parents=True)
    (fake / "ringcoll" / "__init__.py").write_text(
        "raise ImportError('undefined symbol: _ZN3c104cuda_made_up')\n")
    shutil.copy(REPO / "ringcoll_autoload.py", fake / "ringcoll_autoload.py")
    return fake


@needs_install
def test_broken_install_does_not_break_import_torch(tmp_path):
    fake = _broken_ringcoll(tmp_path)
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("default")
        import torch
        print("torch imported", torch.ones(2).sum().item())
        import torch.distributed as dist
        try:
            dist.init_process_group("ringcoll", init_method="tcp://127.0.0.1:0",
                                    rank=0, world_size=1)
            print("created")
        except Exception as e:
            print("refused:", type(e).__name__, e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_env(PYTHONPATH=str(fake)), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch imported 2.0" in out.stdout, out.stdout + out.stderr
    assert "refused:" in out.stdout, out.stdout + out.stderr
    # One warning, naming the reason.
    assert out.stderr.count("ringcoll is installed but cannot be loaded") == 1, out.stderr
    assert "_ZN3c104cuda_made_up" in out.stderr, out.stderr
    if hasattr(torch.distributed.Backend, "_ensure_backend_registered"):
        # torch 2.14+ asks ringcoll_autoload.register, which raises the reason.
        assert "cannot be loaded" in out.stdout and "_ZN3c104cuda_made_up" in out.stdout, \
            out.stdout


def test_extension_for_another_torch_says_so(tmp_path):
    """ringcoll/__init__.py's guard: the extension fails to import and the build was
    for another torch: the error names both versions (a copy of the package whose _C
    fails and whose _built_for names another torch)."""
    pkg = tmp_path / "ringcoll"
    pkg.mkdir()
    shutil.copy(REPO / "ringcoll" / "__init__.py", pkg / "__init__.py")
    (pkg / "_C.py").write_text("raise ImportError('undefined symbol: _ZN3c10made_up')\n")
    (pkg / "_built_for.py").write_text("TORCH_VERSION = '1.99.0'\n")
    code = "import ringcoll"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=_env(PYTHONPATH=str(tmp_path),
                                               TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
                         cwd=tmp_path)
    assert out.returncode != 0
    assert "ringcoll was built for torch 1.99.0" in out.stderr, out.stderr
    assert f"torch {torch.__version__} is installed" in out.stderr, out.stderr


def test_without_torch_the_error_says_to_activate_the_venv(tmp_path):
    """A Python that cannot import torch (the usual case: the venv is not active)
    gets told which Python it is and to activate the venv (a copy of the package's
    __init__.py behind a torch that fails to import)."""
    pkg = tmp_path / "ringcoll"
    pkg.mkdir()
    shutil.copy(REPO / "ringcoll" / "__init__.py", pkg / "__init__.py")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    out = subprocess.run([sys.executable, "-c", "import ringcoll"], capture_output=True,
                         text=True, timeout=120, env=_env(PYTHONPATH=str(tmp_path)),
                         cwd=tmp_path)
    assert out.returncode != 0
    assert "ringcoll needs torch" in out.stderr, out.stderr
    assert sys.executable in out.stderr and "activate" in out.stderr, out.stderr
