"""Moved to ``bench.studies.mcp_clients`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.mcp_clients")
