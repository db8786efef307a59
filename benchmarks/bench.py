"""Same as `python -m ringcoll.bench` (see ringcoll/bench/__init__.py for options)."""
import sys

from ringcoll.bench import main

if __name__ == "__main__":
    sys.exit(main())
