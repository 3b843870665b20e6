"""Moved to ``bench.peers.tools`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.peers.tools")
