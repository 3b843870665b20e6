"""Moved to ``bench.peers.dbos_worker`` (``bench.moved``)."""

from bench.moved import moved

moved(__name__, "bench.peers.dbos_worker")
