"""Moved to ``bench.studies.long_tools`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.long_tools")
