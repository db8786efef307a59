"""Shared fixtures. `transport`: every multi-process test that takes it runs once per
CPU transport (shared memory and gloo point-to-point), since both must give the
same results as gloo, exactly."""

from __future__ import annotations

import pytest

TRANSPORTS = ["shm", "gloo"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param
