"""Moved to ``bench.studies.schema_validation`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.schema_validation")
