"""Moved to ``bench.reports.stats`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.reports.stats")
