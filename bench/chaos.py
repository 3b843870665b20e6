"""Moved to ``bench.studies.chaos`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.chaos")
