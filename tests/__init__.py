"""The test suite.

Compiled modules are cached in ``__pycache__`` (git ignores it). Where the environment says
``PYTHONDONTWRITEBYTECODE``, every process the suite starts (xdist workers, Celery workers,
CLI runs) would compile the project's sources again, so the suite's processes write the
cache: this package is imported before the root conftest and anything it starts.
"""

import os
import sys

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
