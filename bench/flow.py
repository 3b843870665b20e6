"""Moved to ``bench.studies.flow`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.flow")
