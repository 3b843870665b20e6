"""A Celery event receiver on an app's broker, consuming on a thread of its own while a block
runs (the tests that read the worker's and the caller's events)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from celery import Celery


@contextmanager
def receiving(
    app: Celery,
    handlers: Mapping[str, Callable[[dict[str, Any]], Any]],
    on_message: Callable[[Any], None] | None = None,
) -> Iterator[None]:
    """Events of ``app``'s broker go to ``handlers`` (by type, ``"*"`` for all) while the
    block runs; ``on_message`` sees each message's body first (a list: a ``*.multi`` batch).
    The block starts once the receiver consumes."""
    ready = threading.Event()
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers=dict(handlers))
        started = receiver.on_consume_ready

        def on_consume_ready(*args: Any, **kwargs: Any) -> None:
            started(*args, **kwargs)
            ready.set()

        receiver.on_consume_ready = on_consume_ready  # type: ignore[method-assign]
        if on_message is not None:
            receive = receiver._receive

            def seen_first(body: Any, message: Any) -> None:
                on_message(body)
                receive(body, message)

            receiver._receive = seen_first  # type: ignore[method-assign]
        thread = threading.Thread(
            target=lambda: receiver.capture(limit=None, timeout=None, wakeup=False), daemon=True
        )
        thread.start()
        assert ready.wait(10), "the event receiver never started consuming"
        try:
            yield
        finally:
            receiver.should_stop = True
            thread.join(10)
