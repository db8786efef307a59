"""torch's own DistributedTest suite, run against ringcoll (or gloo, to compare).

The torch wheel ships the suite (`torch/testing/_internal/distributed/distributed_test.py`)
but not its runner; this file is that runner. It is not collected by the normal test
command (its name does not start with `test_`); run it by hand, once per backend:

    BACKEND=ringcoll WORLD_SIZE=3 python -m pytest tests/torch_distributed_suite.py \
        -p no:cacheprovider -q --junitxml=out-ringcoll.xml
    BACKEND=gloo     WORLD_SIZE=3 python -m pytest tests/torch_distributed_suite.py ...
    SUITE_GATES_AS=gloo BACKEND=ringcoll ...   # the tests gated on the name "gloo"

The suite gates features on backend names. torch's test utilities keep those sets in
`DistTestCases.backend_feature`, with a "plugin" entry meant for out-of-tree
backends; ringcoll is added to the sets gloo is in (ddp, subgroup, plugin) before
the suite is imported, since its decorators read them at import time. Tests that
compare BACKEND with the literal "gloo" still skip for ringcoll: those are the
tests the comparison leaves out.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("BACKEND", "ringcoll")
os.environ.setdefault("WORLD_SIZE", "3")
# SUITE_GATES_AS=gloo: the suite's decorators see BACKEND=gloo (so the tests gated
# on the literal name run) while every process group is still created with
# ringcoll: what those tests would say if their gates named ringcoll.
GATES_AS = os.environ.get("SUITE_GATES_AS")
RUN_BACKEND = os.environ["BACKEND"]
if GATES_AS:
    os.environ["BACKEND"] = GATES_AS

import torch  # noqa: E402

import ringcoll  # noqa: E402,F401  (registers the backend in this and every spawned process)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if RUN_BACKEND == "ringcoll":
    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("ringcoll")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)
from torch.testing._internal.distributed import distributed_test  # noqa: E402

if GATES_AS:
    distributed_test.BACKEND = RUN_BACKEND  # what init_process_group is given


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
