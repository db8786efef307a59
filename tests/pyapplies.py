"""A test-only algorithm that declares where it applies (ringcoll.schedules.Applies):
examples/pyring.py's all-reduce for world sizes 2 and 4, from 1 KiB. Loaded through
RINGCOLL_ALGO_MODULES in the processes of the tests that need it (not registered in
the test session itself, where auto and the tools would meet it)."""

import os
import sys

from ringcoll.schedules import Applies, load_modules, register

load_modules(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "pyring.py"))
pyring = sys.modules["pyring"]

register("pyapplies", "all_reduce",
         applies=Applies(world_sizes=(2, 4), min_bytes=1024))(pyring.all_reduce)
