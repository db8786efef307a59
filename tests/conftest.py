"""Shared fixtures. `transport`: every multi-process test that takes it runs once per
CPU transport (shared memory and gloo point-to-point), since both must give the
same results as gloo, exactly."""

from __future__ import annotations

import pytest

TRANSPORTS = ["shm", "gloo"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param



# Sharding for CI (.ci/run): with CI_TEST_SHARD=k/N, a parametrized
# multi-process test (one in a module using tests.mp: real processes, the bulk of
# the suite's time) runs only the parameter sets of shard k (0 <= k < N), chosen
# by a hash of the test id; every other test runs in full. CI runs shards 0/3, 1/3
# and 2/3 on its three torches, so each torch is exercised on every kind of test
# and together they run every parameter set once. Left-out tests are reported as deselected. (Not a
# RINGCOLL_ name: ringcoll rejects unknown RINGCOLL_ variables, and the test
# processes inherit this environment.)
# A test marked `once_across_shards` (slow, and the same on every torch: the
# namespace tests of test_hosts.py, the harness's hang tests) is sharded like a
# parameter set, so that CI runs it once, not once per torch.
def pytest_configure(config):
    config.addinivalue_line("markers", "once_across_shards: run in one CI shard only "
                                       "(slow, and the same on every torch)")


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
    keep, drop = [], []
    for item in items:
        sharded = ((getattr(item, "callspec", None) is not None
                    and getattr(getattr(item, "module", None), "mp", None) is not None)
                   or item.get_closest_marker("once_across_shards") is not None)
        if sharded and zlib.crc32(item.nodeid.encode()) % n != k:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
