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
# - a test marked `every_torch` (a module's pytestmark, or one test) runs in every
#   shard: it checks what changes with the torch version (autoload, the flight
#   recorder, the op and its dispatcher routes, compile, DDP, FSDP2, the build); of
#   a parametrized one, the first parameter set runs in every shard and the others
#   as below (the grid checks world sizes and transports, the same on every torch);
# - every other test runs in exactly one shard, chosen by a hash of its id.
# CI runs shard k/3 on its k-th torch, so every test runs at least once per CI run
# and the torch-dependent ones on every torch; left-out tests are reported as
# deselected. (CI_TEST_SHARD is not a RINGCOLL_ name: the test processes inherit
# this environment, and ringcoll warns about RINGCOLL_ names it does not know.)
def pytest_configure(config):
    config.addinivalue_line("markers", "every_torch: run in every CI shard (what it checks "
                                       "depends on the torch version)")


def pytest_collection_modifyitems(config, items):
    import os
    import zlib

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
        function = (item.nodeid.split("::")[0], getattr(item, "originalname", item.name))
        everywhere = item.get_closest_marker("every_torch") is not None and function not in seen
        seen.add(function)
        if not everywhere and zlib.crc32(item.nodeid.encode()) % n != k:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
