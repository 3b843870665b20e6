"""The app that publishes calls: the dispatcher's own, with a publish timeout.

(Its two helpers live beside it: ``publish_thread`` publishes the async calls' sends from
one thread, ``sent_events`` publishes the sends' task-sent events behind them.)

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

import redis
from celery import Celery

from tasks.wiring.broker_transport import SafeAckChannel, SafeAckTransport

# The publishing thread and the task-sent events, at their old path as well.
from tasks.wiring.publish_thread import PublishThread
from tasks.wiring.sent_events import HeldEvents, SentEvents
from tasks.wiring.transport_names import TRANSPORT_NAMES

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


class PublishUnconfirmed(Exception):
    """A publish the broker did not answer in time: the message may be queued or not.

    Not a connection error, so kombu does not publish it again: a paused broker runs every
    ``LPUSH`` it got once it wakes, and a retry that went through after it woke queued a second
    copy of the call's execute message (the chaos run: two copies ran one tool twice at once).
    The call ends ``DISPATCH_FAILED`` (sealed, so a copy that does arrive is skipped).
    """


class _PublishChannel(SafeAckChannel):
    """kombu's Redis channel, keeping one client on its connection pool for publishing.

    kombu builds a new ``redis.Redis`` per publish (and per task-sent event), each copying
    redis-py's table of ~170 response callbacks: about a fifth of a dispatch's CPU. The client
    holds no connection of its own (it borrows one from the channel's pool per command), so
    one per pool serves every publish.
    """

    _publish_client: Any = None

    def _put(self, queue: Any, message: Any, **kwargs: Any) -> None:
        try:
            super()._put(queue, message, **kwargs)
        except redis.TimeoutError:
            raise PublishUnconfirmed() from None

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


class _Publisher(Celery):  # type: ignore[misc]
    """Sends as no task's child: a call a task sends (a slot it handed on, a retry, a wake-up)
    is not that task's child, so Flower never shows another call as its Parent (Celery would
    take the parent and root ids from the task running on the sending thread)."""

    current_worker_task = None


def publisher_app(app: Celery) -> Celery:
    """A copy of ``app`` for sending only (tasks are sent by name): same broker, routes and
    serializers, with publish socket timeouts, and no result backend subscription per send
    (the waits use ``app``'s backend)."""
    publisher = _Publisher(f"{app.main}-publisher", set_as_current=False)
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
    # The app's own Redis transport (tasks.wiring.broker_transport) or none: ours keeps its acks.
    redis_broker = urlsplit(broker).scheme in ("redis", "rediss")
    if redis_broker and conf.get("broker_transport") in {None, SafeAckTransport, *TRANSPORT_NAMES}:
        conf["broker_transport"] = _PublishTransport
    publisher.conf.update(conf)
    return publisher


__all__ = [
    "HeldEvents",
    "PublishThread",
    "PublishUnconfirmed",
    "SentEvents",
    "publish_attempt_timeout_s",
    "publisher_app",
]
