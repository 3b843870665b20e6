"""The old names of the bench's modules, kept for the commands and imports the docs quote.

A module that moved into ``bench.suite``, ``bench.peers``, ``bench.rig``, ``bench.studies`` or
``bench.reports`` leaves a one-line module at its old path::

    moved(__name__, "bench.studies.ceiling")

Imported (``import bench.ceiling``, ``celery -A bench.bare``, ``bench.tools:registry``), the
old name is the new module itself, one module object under both names. Run
(``python -m bench.ceiling``), it runs the new module as ``__main__``, as
``python -m bench.studies.ceiling`` would.
"""

from __future__ import annotations

import importlib
import runpy
import sys


def moved(name: str, target: str) -> None:
    """``name``: the old module's ``__name__``; ``target``: where it lives now."""
    if name == "__main__":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.modules[name] = importlib.import_module(target)
