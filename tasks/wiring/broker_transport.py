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

A lost broker connection (the broker killed, restarted or unreachable while tasks run): kombu
tears the channel down with broker commands (the pending ``BRPOP``'s reply, the deletion of
auto-delete fanout bindings, the restore of every unacknowledged message) and, once one of them
has failed, closes it again after it has dropped the transport's address: the restore then
raises ``AttributeError`` ('NoneType' object has no attribute 'hostname') out of Celery's
reconnect and the worker exits (measured every time with a threads worker). Here:

- ``Connection.collect`` (what Celery calls on a lost connection, and kombu after a fork)
  forgets the connection's channels without a word to the broker (kombu's
  ``Transport._collect`` hook, which its AMQP transports implement the same way);
- a close whose broker stops answering is finished the same way;
- such a close restores nothing: every message the worker was given is still in its hands
  (running, or queued in its pool) and will be acked when its task ends. Restoring it would
  run it a second time at once; kombu's ``unacked`` entry stays in the broker instead (if the
  broker kept its data) and comes back after the visibility timeout only if that ack never
  arrives;
- the ack of such a message, after its channel closed, goes to the broker through the channel's
  last connection pool (kombu forgot the address, the pool has it) once the broker answers
  again; if it still cannot, it is logged and the message is left to the visibility timeout.

The reproductions for kombu upstream are ``docs/explanation/kombu-ack-oom.md`` and
``docs/explanation/kombu-lost-connection.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
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
#: A lost connection (refused, reset, timed out).
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = tuple(
    kombu_redis.get_redis_error_classes().connection_errors
)


class SafeAckQoS(kombu_redis.QoS):
    """kombu's Redis QoS whose ack, requeue, delivery record and restore never raise into the
    worker's event loop, and whose channel's lost connection restores nothing."""

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
            _refused("an ack", exc)
            virtual.QoS.ack(self, delivery_tag)
        except _CONNECTION_ERRORS as exc:
            if not self.channel.closed:
                raise  # Celery reconnects, as it always did
            _refused("an ack after the connection was lost", exc)
            virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except _REPLY_ERRORS as exc:
            _refused("a reject", exc)
            virtual.QoS.ack(self, delivery_tag)
        except _CONNECTION_ERRORS as exc:
            if not self.channel.closed:
                raise
            _refused("a reject after the connection was lost", exc)
            virtual.QoS.ack(self, delivery_tag)

    def restore_unacked_once(self, stderr: Any = None) -> None:
        if not self.channel.connection_lost:
            super().restore_unacked_once(stderr)
            return
        # Restores nothing, now or later (kombu would try again when the QoS is collected).
        self._on_collect.cancel()
        self._flush()
        delivered = self._delivered
        if delivered and not getattr(delivered, "restored", False):
            logger.warning(
                "broker connection lost with %d unacknowledged message(s): each is acked when "
                "its task ends, or returns after the visibility timeout",
                len(delivered),
            )
        delivered.restored = True  # type: ignore[attr-defined]


def _refused(what: str, exc: BaseException) -> None:
    logger.warning(
        "broker refused %s (%s): the message returns after the visibility timeout",
        what,
        type(exc).__name__,
    )


class _LostConnectionChannel(kombu_redis.Channel):
    """kombu's Redis channel, closed without a word to a broker that is gone.

    ``connection_lost`` is set by the transport's ``_collect`` (Celery's reaction to a lost
    connection) or by a close whose broker stopped answering; the close then sends nothing
    (see the module's docstring). A closed channel keeps its last connection pool, so the acks
    of the messages it delivered can still reach the broker.
    """

    connection_lost = False
    _kept_pool: Any = None

    def lose_connection(self) -> None:
        """Closes the channel without sending anything to the broker."""
        self.connection_lost = True
        self._in_poll = None  # type: ignore[assignment]
        super().close()

    def close(self) -> None:
        if self.connection_lost:
            self._in_poll = None  # type: ignore[assignment]
        try:
            super().close()
        except _CONNECTION_ERRORS:
            # The broker went away under the close: finished without a word to it.
            self.lose_connection()

    def queue_delete(self, queue: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection_lost:
            return None  # an auto-delete binding: left in the broker, declared again later
        return super().queue_delete(queue, *args, **kwargs)

    def _unsubscribe_from(self, queue: Any) -> None:
        if not self.connection_lost:
            super()._unsubscribe_from(queue)

    def _disconnect_pools(self) -> None:
        if self._pool is not None:
            self._kept_pool = self._pool
        super()._disconnect_pools()

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client or not self.closed:
            with super().conn_or_acquire(client) as acquired:
                yield acquired
            return
        # Closed: kombu dropped the transport's address; the pool kept it.
        if self._kept_pool is None:
            raise kombu_redis.get_redis_ConnectionError()("the broker channel is closed")
        options: dict[str, Any] = {"connection_pool": self._kept_pool}
        provider = self._kept_pool.connection_kwargs.get("credential_provider")
        if provider is not None:
            options["credential_provider"] = provider
        yield self.Client(**options)


class _CollectWithoutBroker(kombu_redis.Transport):
    """``Connection.collect`` forgets the channels without a word to the broker."""

    def _collect(self, connection: Any) -> None:
        if self.cycle is not None:
            self.cycle.close()
        for channels in (self._avail_channels, self.channels):
            while channels:
                channels.pop().lose_connection()


class SafeAckChannel(_LostConnectionChannel):
    QoS = SafeAckQoS


class SafeAckTransport(_CollectWithoutBroker):
    """The worker's Redis broker transport (``broker_transport`` for ``redis://`` URLs)."""

    Channel = SafeAckChannel


class SafeAckSentinelChannel(_LostConnectionChannel, kombu_redis.SentinelChannel):
    QoS = SafeAckQoS


class SafeAckSentinelTransport(_CollectWithoutBroker, kombu_redis.SentinelTransport):
    """The same through Redis Sentinel (``redis+sentinel://``, see ``tasks.wiring.sentinel``)."""

    Channel = SafeAckSentinelChannel


def broker_transport(url: str) -> type[kombu_redis.Transport] | None:
    """The transport class for a broker URL (as the settings have it): ours for Redis and
    Redis Sentinel, ``None`` (kombu's choice from the URL's scheme) for any other broker."""
    scheme = urlsplit(url).scheme.lower()
    if scheme == "redis+sentinel":
        return SafeAckSentinelTransport
    return SafeAckTransport if scheme in ("redis", "rediss") else None
