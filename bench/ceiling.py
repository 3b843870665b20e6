"""Moved to ``bench.studies.ceiling`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.ceiling")
