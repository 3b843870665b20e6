"""Moved to ``bench.studies.mcp_restart`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.studies.mcp_restart")
