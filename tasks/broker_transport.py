"""kombu's Redis transport with acknowledgements that cannot stop a worker.

kombu keeps an unacknowledged message in two keys (``unacked`` and ``unacked_index``) and
updates both in a ``MULTI``/``EXEC`` pipeline: on delivery (``QoS.append``), on ack
(``QoS.ack``) and on requeue (``QoS.reject``). Redis refuses every command queued inside
``MULTI`` once its memory is past ``maxmemory`` (noeviction), even the ``ZREM``/``HDEL``
of an ack that would free memory, and kombu lets that ``OutOfMemoryError`` (a
``ResponseError``, which Celery counts as a channel error, not a connection error) escape
from the worker's event loop: Celery logs "Unrecoverable error" and the worker exits with
every call it was running (measured: 259 of 400 calls left PROJECTING, worker gone).

Here, for the worker's connection to a Redis broker:

- an ack removes the two entries in a plain pipeline (no ``MULTI``): ``ZREM``/``HDEL`` are
  allowed on a full Redis, so an ack succeeds where kombu's failed;
- an ack, requeue or delivery record that still fails with a Redis error other than a lost
  connection is logged and forgotten locally. The message then stays in (or is missing from)
  kombu's unacked set: a message left there comes back after the visibility timeout, and the
  execute step is idempotent (a call already run or sealed is not run again); a delivery that
  could not be recorded runs anyway, without the crash safety of late acks for that one message.
- a lost connection still raises as before: Celery reconnects, as it always did.

The reproduction for kombu upstream is in ``docs/KOMBU_ACK_OOM.md``.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

logger = logging.getLogger(__name__)

#: Redis errors that are not a lost connection (``ResponseError`` and its kind: OOM, READONLY
#: on a demoted master, ...). Connection errors are left to Celery, which reconnects.
_REPLY_ERRORS: tuple[type[BaseException], ...] = tuple(
    kombu_redis.get_redis_error_classes().channel_errors
)


class SafeAckQoS(kombu_redis.QoS):
    """kombu's Redis QoS whose ack, requeue and delivery record never raise a Redis reply
    error into the worker's event loop."""

    def _remove_from_indices(self, delivery_tag: Any, pipe: Any = None) -> Any:
        if pipe is not None:
            return super()._remove_from_indices(delivery_tag, pipe)
        # No MULTI: a full Redis refuses every command queued in a transaction, and the two
        # removals need none (each alone leaves kombu's restore with nothing, or nothing
        # more, to do).
        with self.channel.conn_or_acquire() as client:
            return (
                client.pipeline(transaction=False)
                .zrem(self.unacked_index_key, delivery_tag)
                .hdel(self.unacked_key, delivery_tag)
            )

    def append(self, message: Any, delivery_tag: Any) -> None:
        try:
            super().append(message, delivery_tag)
        except _REPLY_ERRORS as exc:
            logger.warning(
                "broker refused to record a delivered message (%s): it runs without late-ack "
                "crash safety",
                type(exc).__name__,
            )
            virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)
        except _REPLY_ERRORS as exc:
            logger.warning(
                "broker refused an ack (%s): the message returns after the visibility timeout",
                type(exc).__name__,
            )
            virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except _REPLY_ERRORS as exc:
            logger.warning(
                "broker refused a reject (%s): the message returns after the visibility timeout",
                type(exc).__name__,
            )
            virtual.QoS.ack(self, delivery_tag)


class SafeAckChannel(kombu_redis.Channel):
    QoS = SafeAckQoS


class SafeAckTransport(kombu_redis.Transport):
    """The worker's Redis broker transport (``broker_transport`` for ``redis://`` URLs)."""

    Channel = SafeAckChannel


class SafeAckSentinelChannel(kombu_redis.SentinelChannel):
    QoS = SafeAckQoS


class SafeAckSentinelTransport(kombu_redis.SentinelTransport):
    """The same through Redis Sentinel (``redis+sentinel://``, see ``tasks.sentinel``)."""

    Channel = SafeAckSentinelChannel


def broker_transport(url: str) -> type[kombu_redis.Transport] | None:
    """The transport class for a broker URL (as the settings have it): ours for Redis and
    Redis Sentinel, ``None`` (kombu's choice from the URL's scheme) for any other broker."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "redis+sentinel":
        return SafeAckSentinelTransport
    return SafeAckTransport if scheme in ("redis", "rediss") else None
