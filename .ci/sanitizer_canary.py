"""Checks, before CI's sanitized tests, that a sanitizer's report from any process the
tests start reaches the report folder (.ci/sanitizers' log_path), so that a clean
folder at the end means no report and not a lost one.

    python .ci/sanitizer_canary.py DIR

Run with the environment sanitizer_env made (LD_PRELOAD, ASAN_OPTIONS with
log_path=DIR/asan). Each child below reads freed memory through ctypes, which
ASan's memcpy interceptor reports as a heap-use-after-free, and ends with that
report (halt_on_error); one child per way the tests start a process: a
subprocess of its own interpreter (torchrun, the tests' command lines), a rank
forked from a fork server (tests/mp.py's default) and a spawned rank
(TESTS_MP_START=spawn). One more child calls a function compiled and linked here as
setup.py's _sanitize_flags builds the extension (keep the two alike), whose signed overflow
UBSan reports to DIR/ubsan (UBSAN_OPTIONS) and ends the process with. The canary
checks each child's report file names its error, then deletes those files, and
fails, saying which, otherwise.
"""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import shutil
import subprocess
import sys


def use_after_free():
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    p = libc.malloc(64)
    libc.free(p)
    ctypes.string_at(p, 8)  # a memcpy from freed memory: ASan reports and ends us
    sys.exit("canary: reading freed memory was not reported (is ASan preloaded?)")


def signed_overflow(lib):
    import ctypes

    f = ctypes.CDLL(lib).ringcoll_canary_overflow
    f(1)  # INT_MAX + 1: UBSan reports and ends us (-fno-sanitize-recover)
    sys.exit("canary: a signed overflow was not reported (UBSan)")


def _overflow_library(folder):
    """A library of one function that overflows, built as setup.py builds a sanitized
    extension."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="canary-", dir=folder)
    src, lib = os.path.join(tmp, "overflow.c"), os.path.join(tmp, "liboverflow.so")
    with open(src, "w") as f:
        f.write("int ringcoll_canary_overflow(int x) { return x + 2147483647; }\n")
    # Not under the preload: gcc is not sanitized.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", "-static-libubsan",
                    "-Wl,--exclude-libs,libubsan.a", src, "-o", lib], check=True, env=env)
    return tmp, lib


def main(folder):
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        sys.exit("canary: LD_PRELOAD has no libasan (run under .ci/sanitizers' sanitizer_env)")
    children = {}  # how it was started -> (pid, what its report must say)
    proc = subprocess.Popen([sys.executable, __file__, "--child"])
    proc.wait()
    children["a subprocess"] = (proc.pid, "asan", "heap-use-after-free")
    tmp, lib = _overflow_library(folder)
    proc = subprocess.Popen([sys.executable, __file__, "--child-ubsan", lib])
    proc.wait()
    children["UBSan in a subprocess"] = (proc.pid, "ubsan", "signed integer overflow")
    for method in ("forkserver", "spawn"):
        p = mp.get_context(method).Process(target=use_after_free)
        p.start()
        p.join(60)
        children[f"a {method} process"] = (p.pid, "asan", "heap-use-after-free")
    missing = []
    for how, (pid, tool, error) in children.items():
        files = glob.glob(os.path.join(folder, f"{tool}.{pid}"))
        text = "".join(open(f, errors="replace").read() for f in files)
        if error not in text:
            missing.append(f"{how} (pid {pid}, {error})")
        for f in files:
            os.remove(f)
    shutil.rmtree(tmp)
    if missing:
        sys.exit(f"canary: no ASan report in {folder} from " + ", ".join(missing)
                 + ": the sanitizers' reports would be lost")
    print(f"canary: the sanitizers' reports reach {folder} from "
          + ", ".join(children) + " (checked, then removed)")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        use_after_free()
    if sys.argv[1] == "--child-ubsan":
        signed_overflow(sys.argv[2])
    main(sys.argv[1])
