"""Moved to ``bench.studies.reaper_first_pass`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.reaper_first_pass")
