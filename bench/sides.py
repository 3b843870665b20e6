"""Moved to ``bench.suite.sides`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.suite.sides")
