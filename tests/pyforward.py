"""examples/bruck_alltoall.py's Bruck all-to-all registered as "pyforward" without
its declaration of equal splits: what the checker and the runtime say about an
algorithm right only for equal splits that does not say so. Loaded through
RINGCOLL_ALGO_MODULES in the processes of the tests that need it."""

import os
import sys

from ringcoll.schedules import load_modules, register

load_modules(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "bruck_alltoall.py"))

register("pyforward", "all_to_all")(sys.modules["bruck_alltoall"].all_to_all)
