"""Moved to ``bench.reports.readme`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.reports.readme")
