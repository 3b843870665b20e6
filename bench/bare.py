"""Moved to ``bench.peers.bare`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.peers.bare")
