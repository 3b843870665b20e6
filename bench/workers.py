"""Moved to ``bench.rig.workers`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.rig.workers")
