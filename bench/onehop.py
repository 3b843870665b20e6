"""Moved to ``bench.studies.onehop`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.onehop")
