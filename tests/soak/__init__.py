"""The soak: a test harness that runs randomized programs on ringcoll (and on torch's
gloo backend, its judge). `python tests/soak/soak.py --help`; soak.py's docstring says
what it does."""
