"""Moved to ``bench.studies.telemetry_cost`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.telemetry_cost")
