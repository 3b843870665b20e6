"""Moved to ``bench.studies.telemetry_hooks`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.telemetry_hooks")
