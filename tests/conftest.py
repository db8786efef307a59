"""Shared fixtures. `transport`: every multi-process test that takes it runs once per
CPU transport (shared memory and gloo point-to-point), since both must give the
same results as gloo, exactly."""

from __future__ import annotations

import os

import pytest

TRANSPORTS = ["shm", "gloo"]

# Every test process (and every rank, which inherits the environment) runs ringcoll's
# debug checks (docs/KNOBS.md): a lock held where Python may run, or a Work's memory
# freed while its device may still use it, aborts the rank naming it, so a test fails
# at the breach instead of hanging when the GIL happens to be contended.
os.environ.setdefault("RINGCOLL_CHECKS", "1")


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param



# Sharding for CI (.ci/run). With CI_TEST_SHARD=k/N only shard k (0 <= k < N) runs:
# - the files in SANITIZED run in shard 0, which CI runs on a build with
#   AddressSanitizer and UndefinedBehaviorSanitizer (.ci/run, setup.py's
#   RINGCOLL_SANITIZE): the backend's threads, failures, teardown and
#   point-to-point, the op, the Python algorithms, the soak and what programs do
#   (test_programs: polling, callbacks, threads, abort) run sanitized in every CI
#   run. Each file has a share: (1, 1) runs whole there; (1, k) runs one in k of its
#   tests, chosen by a hash of the test's id there (the same ones every run), and
#   the rest in shards 1..N-1 as other tests (the tests run 2-4 times slower under
#   the sanitizers: all of these files whole made shard 0 alone 17 minutes);
# - a test marked `every_torch` (a module's pytestmark, or one test) runs in every
#   shard: it checks what changes with the torch version (autoload, the flight
#   recorder, the op and its dispatcher routes, compile, DDP, FSDP2, the build); of
#   a parametrized one, the first parameter set runs in every shard and the others
#   as below (the grid checks world sizes and transports, the same on every torch);
# - every other test runs in exactly one shard, chosen by a hash of its id: one of
#   shards 1..N-1, or shard 0 for the share SHARD0_SHARE of them (the sanitized
#   files make shard 0 long: its tests run 2-4 times slower under the sanitizers).
# CI runs shard k/3 on its k-th torch, so every test runs at least once per CI run
# and the torch-dependent ones on every torch; left-out tests are reported as
# deselected. (CI_TEST_SHARD is not a RINGCOLL_ name: the test processes inherit
# this environment, and ringcoll warns about RINGCOLL_ names it does not know.)
SANITIZED = {
    # whole: the lock rule's and the teardown's tests, the soak, the op, capture
    "test_programs.py": (1, 1), "test_stream_p2p.py": (1, 1), "test_soak.py": (1, 1),
    "test_ops.py": (1, 1), "test_capture.py": (1, 1),
    # a share: grids over transports, world sizes and algorithms
    "test_stream.py": (1, 2), "test_p2p.py": (1, 2), "test_failures.py": (1, 3),
    "test_python_algorithms.py": (1, 4),
}
# Of the other tests, the share shard 0 runs, in 1/SHARD0_SHARE[1] parts (measured:
# docs/TESTS.md's CI section).
SHARD0_SHARE = (0, 16)


# Lanes (CI_TEST_ALONE): CI runs its shards side by side, each in a pytest of its
# own (.ci/run), then the tests marked `alone` one shard after the other. `alone`
# marks a test that needs the machine to itself: it compares /dev/shm or open files
# before and after (another test's segments would count), or bounds a wait from
# above within about a second of what it waits for (a loaded machine stretches
# that). CI_TEST_ALONE=skip leaves those out, =only runs only them; unset, all run.


def pytest_configure(config):
    config.addinivalue_line("markers", "every_torch: run in every CI shard (what it checks "
                                       "depends on the torch version)")
    config.addinivalue_line("markers", "alone: CI runs it with no other test beside it "
                                       "(reads /dev/shm, or bounds a wait tightly)")


def _shard_of(nodeid, n):
    """The shard that runs a test that is neither sanitized nor every_torch."""
    import zlib

    h = zlib.crc32(nodeid.encode())
    if n == 1:
        return 0
    parts, whole = SHARD0_SHARE
    if h % whole < parts:
        return 0
    return 1 + (h // whole) % (n - 1)


def _sanitized(nodeid, share):
    """Whether a test of a SANITIZED file runs in shard 0 (its share, by hash)."""
    import zlib

    parts, whole = share
    return zlib.crc32(b"sanitized/" + nodeid.encode()) % whole < parts


def pytest_collection_modifyitems(config, items):
    import os
    import zlib

    alone = os.environ.get("CI_TEST_ALONE", "")
    if alone not in ("", "skip", "only"):
        raise pytest.UsageError(f"CI_TEST_ALONE={alone!r}: expected skip or only")
    if alone:
        keep, drop = [], []
        for item in items:
            marked = item.get_closest_marker("alone") is not None
            (keep if marked == (alone == "only") else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    spec = os.environ.get("CI_TEST_SHARD", "")
    if not spec:
        return
    try:
        k, n = (int(x) for x in spec.split("/"))
        assert 0 <= k < n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"CI_TEST_SHARD={spec!r}: expected k/N with 0 <= k < N")
    keep, drop, seen = [], [], set()
    for item in items:
        path = item.nodeid.split("::")[0]
        function = (path, getattr(item, "originalname", item.name))
        everywhere = item.get_closest_marker("every_torch") is not None and function not in seen
        seen.add(function)
        share = SANITIZED.get(os.path.basename(path))
        if share is not None and _sanitized(item.nodeid, share):
            run = k == 0 or everywhere
        elif share is not None:
            run = everywhere or n == 1 or 1 + zlib.crc32(item.nodeid.encode()) % (n - 1) == k
        else:
            run = everywhere or _shard_of(item.nodeid, n) == k
        (keep if run else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
