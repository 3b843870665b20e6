"""The app that publishes calls: the dispatcher's own, with a publish timeout.

A broker that accepts connections but never answers (a paused or swapping Redis) blocked a
publish on the socket for ever: kombu's Redis transport has no socket timeout by default, and
``broker_connection_timeout`` only bounds the connect. The publisher's connections get socket
timeouts so every publish attempt gives up; the worker's own connections keep none (a slow
Redis answer must not make a busy worker drop its broker connection).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from celery import Celery

from tasks.broker_transport import SafeAckChannel, SafeAckTransport

#: Attempts of one publish (the first and ``task_publish_retry_policy``'s retries) share the
#: publish timeout between them.
_RETRY_FLOOR_S = 0.05


def publish_attempt_timeout_s(app: Celery) -> float:
    """Socket timeout of one publish attempt: the publish timeout shared by all attempts."""
    total = float(app.conf.broker_connection_timeout or 4.0)
    policy = app.conf.task_publish_retry_policy or {}
    attempts = 1 + int(policy.get("max_retries", 3))
    pauses = sum(
        min(
            policy.get("interval_start", 0) + n * policy.get("interval_step", 0.2),
            policy.get("interval_max", 0.2),
        )
        for n in range(attempts - 1)
    )
    # One wait more than attempts: a retry's fresh connection sends a command of its own
    # (measured: a paused broker otherwise took one socket timeout past the total).
    return max(float(total - pauses) / (attempts + 1), _RETRY_FLOOR_S)


class _PublishChannel(SafeAckChannel):
    """kombu's Redis channel, keeping one client on its connection pool for publishing.

    kombu builds a new ``redis.Redis`` per publish (and per task-sent event), each copying
    redis-py's table of ~170 response callbacks: about a fifth of a dispatch's CPU. The client
    holds no connection of its own (it borrows one from the channel's pool per command), so
    one per pool serves every publish.
    """

    _publish_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        kept = self._publish_client
        if kept is None or kept.connection_pool is not self.pool:
            # First use, or the pools were dropped (a reconnect): a client on the new one.
            kept = self._publish_client = self._create_client()
        yield kept


class _PublishTransport(SafeAckTransport):
    Channel = _PublishChannel


def publisher_app(app: Celery) -> Celery:
    """A copy of ``app`` for sending only (tasks are sent by name): same broker, routes and
    serializers, with publish socket timeouts, and no result backend subscription per send
    (the waits use ``app``'s backend)."""
    publisher = Celery(f"{app.main}-publisher", set_as_current=False)
    conf: dict[str, Any] = {key: value for key, value in app.conf.items() if key.islower()}
    timeout = publish_attempt_timeout_s(app)
    transport = dict(conf.get("broker_transport_options") or {})
    transport.setdefault("socket_timeout", timeout)
    transport.setdefault("socket_connect_timeout", timeout)
    conf["broker_transport_options"] = transport
    conf["broker_connection_timeout"] = timeout
    # Sending never reads results: no backend, so no result subscription per send.
    conf["result_backend"] = None
    broker = conf.get("broker_url") or ""
    # The app's own Redis transport (tasks.broker_transport) or none: ours keeps its acks.
    redis_broker = urlsplit(broker).scheme in ("redis", "rediss")
    if conf.get("broker_transport") in (None, SafeAckTransport) and redis_broker:
        conf["broker_transport"] = _PublishTransport
    publisher.conf.update(conf)
    return publisher
