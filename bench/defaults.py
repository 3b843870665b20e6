"""Moved to ``bench.peers.defaults`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.peers.defaults")
