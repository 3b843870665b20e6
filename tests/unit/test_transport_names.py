"""The worker's Redis transports keep their acks and the URLs people read keep ``redis://``.

kombu prints a transport handed over as a class as the URL's scheme (the worker's banner and
Flower read ``<class '...SafeAckTransport'>://``, and Flower's Broker page then answers 404);
under our transport names the URL is the settings' own, password masked, and the connection
still runs our transport.
"""

from __future__ import annotations

import pytest
from celery import Celery

from tasks.settings import Settings
from tasks.wiring.app import celery_config
from tasks.wiring.broker_transport import SafeAckSentinelTransport, SafeAckTransport
from tasks.wiring.publisher import publisher_app


def app_for(url: str) -> Celery:
    app = Celery("transport-names", set_as_current=False)
    app.config_from_object(celery_config(Settings(redis_url=url)))
    return app


@pytest.mark.parametrize(
    ("url", "shown", "transport"),
    [
        ("redis://:s3cret@127.0.0.1:6399/4", "redis://:**@127.0.0.1:6399/4", SafeAckTransport),
        ("rediss://:s3cret@127.0.0.1:6399/4", "rediss://:**@127.0.0.1:6399/4", SafeAckTransport),
        (
            "redis+sentinel://:s3cret@127.0.0.1:26399/tb/2",
            "sentinel://:**@127.0.0.1:26399/2",
            SafeAckSentinelTransport,
        ),
    ],
)
def test_the_broker_url_keeps_its_scheme_and_the_worker_keeps_its_transport(
    url: str, shown: str, transport: type
) -> None:
    # Given the app's configuration for a Redis broker URL with a password
    app = app_for(url)
    # When kombu builds the connection the worker and Flower use (no I/O happens here)
    with app.connection_for_read() as connection:
        # Then it shows the URL's own scheme, password masked, and runs our transport
        assert connection.as_uri() == shown
        assert "s3cret" in connection.as_uri(include_password=True)
        assert "class" not in connection.as_uri()
        assert connection.get_transport_cls() is transport


def test_the_publisher_still_gets_its_publishing_transport() -> None:
    app = app_for("redis://127.0.0.1:6399/4")
    publisher = publisher_app(app)
    transport = publisher.conf.broker_transport
    assert isinstance(transport, type) and issubclass(transport, SafeAckTransport)
    assert transport is not SafeAckTransport


def test_other_brokers_keep_kombus_choice() -> None:
    config = celery_config(Settings(redis_url="redis://h/0", broker_url="amqp://g:p@h:5672//"))
    assert config["broker_transport"] is None
