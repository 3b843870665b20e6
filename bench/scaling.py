"""Moved to ``bench.studies.scaling`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.scaling")
