"""Moved to ``bench.studies.pgreport`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.pgreport")
