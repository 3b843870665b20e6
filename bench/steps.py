"""Moved to ``bench.studies.steps`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.steps")
