"""The fair peer (``bench.peers.bare``) with our worker's event spacing loaded
(``bench.peers.events``): the same app, tasks and settings, its task events sent as ours are.
Measured against ours, it gives the boundary's own cost (like for like); the stock peer gives
what a user gets against stock Celery. Workers run ``celery -A bench.peers.bare_spaced worker``
on the queues ``bench.peers.bare.SPACED_QUEUES``.
"""

from __future__ import annotations

from bench.peers.bare import app
from bench.peers.events import space_events

space_events(app)

__all__ = ["app"]
