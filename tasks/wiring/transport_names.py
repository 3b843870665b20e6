"""The worker's Redis transports (``tasks.wiring.broker_transport``) under kombu transport names.

Handed to kombu as a class, a transport becomes the scheme of every URL kombu prints: the
worker's banner and Flower read ``<class 'tasks.wiring.broker_transport.SafeAckTransport'>://...``,
and Flower's Broker page and ``/api/queues/length`` answer 404 ("broker is not supported")
because they pick their Redis client by that scheme. Registered under names of their own in
kombu's transport registry, with kombu's display mapping from each name back to the URL's
scheme (as kombu does for ``pyamqp`` -> ``amqp``), the transports stay ours and every URL an
operator or Flower reads stays ``redis://``, ``rediss://`` or ``sentinel://``.

Only new names are added to kombu's tables: kombu's own ``redis`` transport keeps its name,
so other kombu users in the same process are untouched.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from kombu import connection as kombu_connection
from kombu import transport as kombu_transport

#: Our name for each broker URL scheme (as the settings have it), the transport it loads and
#: the scheme kombu shows for it.
_NAMES: dict[str, tuple[str, str, str]] = {
    "redis": ("tool-boundary-redis", "tasks.wiring.broker_transport:SafeAckTransport", "redis"),
    "rediss": ("tool-boundary-rediss", "tasks.wiring.broker_transport:SafeAckTransport", "rediss"),
    "redis+sentinel": (
        "tool-boundary-sentinel",
        "tasks.wiring.broker_transport:SafeAckSentinelTransport",
        "sentinel",
    ),
}

#: Every name registered here (the publisher recognises the app's transport by it).
TRANSPORT_NAMES = frozenset(name for name, _, _ in _NAMES.values())


def register_transport_names() -> None:
    """Adds our names to kombu's registry and display mapping (idempotent)."""
    for name, path, shown_as in _NAMES.values():
        kombu_transport.TRANSPORT_ALIASES.setdefault(name, path)
        kombu_connection.resolve_aliases.setdefault(name, shown_as)


def broker_transport_name(url: str) -> str | None:
    """kombu's transport name for a broker URL (as the settings have it): ours for Redis and
    Redis Sentinel, ``None`` (kombu's choice from the URL's scheme) for any other broker."""
    entry = _NAMES.get(urlsplit(url).scheme.lower())
    return None if entry is None else entry[0]


register_transport_names()
