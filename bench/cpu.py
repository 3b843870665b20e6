"""Moved to ``bench.suite.cpu`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.suite.cpu")
