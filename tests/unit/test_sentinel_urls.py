"""One Sentinel syntax for store, broker and backend: parsed, translated for kombu/Celery,
accepted by the settings, refused in one line naming no part of it."""

from __future__ import annotations

import pytest
from kombu.transport import resolve_transport

from boundary.store.sentinel import SentinelAddress, parse_sentinel_url
from tasks.settings import InvalidSettings, Settings, load_settings
from tasks.wiring.app import celery_config
from tasks.wiring.broker_transport import SafeAckSentinelTransport, SafeAckTransport
from tasks.wiring.sentinel import celery_url
from tasks.wiring.transport_names import broker_transport_name

URL = "redis+sentinel://:p%40ss@10.0.0.1:26379,10.0.0.2:26380,10.0.0.3/tb/2"


def test_a_sentinel_url_names_the_sentinels_the_service_the_db_and_the_password() -> None:
    assert parse_sentinel_url(URL) == SentinelAddress(
        sentinels=(("10.0.0.1", 26379), ("10.0.0.2", 26380), ("10.0.0.3", 26379)),
        service="tb",
        db=2,
        password="p@ss",
    )


def test_kombu_and_celery_get_their_own_form_and_the_master_name() -> None:
    url, options = celery_url(URL)
    assert url == (
        "sentinel://:p%40ss@10.0.0.1:26379/2;sentinel://:p%40ss@10.0.0.2:26380/2;"
        "sentinel://:p%40ss@10.0.0.3:26379/2"
    )
    assert options == {"master_name": "tb"}
    assert celery_url("redis://h:1/0") == ("redis://h:1/0", {})


def test_every_setting_takes_the_syntax_and_the_worker_keeps_its_safe_acks() -> None:
    config = celery_config(Settings(redis_url=URL))
    assert config["broker_url"].startswith("sentinel://")
    assert config["broker_transport_options"]["master_name"] == "tb"
    assert config["result_backend_transport_options"] == {"master_name": "tb"}
    assert resolve_transport(config["broker_transport"]) is SafeAckSentinelTransport
    assert resolve_transport(broker_transport_name("redis://h/0")) is SafeAckTransport
    assert broker_transport_name("amqp://h//") is None


@pytest.mark.parametrize(
    "bad",
    [
        "redis+sentinel://:secret@h1:x/tb",
        "redis+sentinel://:secret@h1:26379",
        "redis+sentinel://:secret@h1:26379/tb/notadb",
    ],
)
def test_a_bad_sentinel_url_is_refused_naming_the_variable_only(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_BOUNDARY_BROKER_URL", bad)
    with pytest.raises(InvalidSettings) as caught:
        load_settings()
    assert caught.value.names == ["TOOL_BOUNDARY_BROKER_URL"]
    assert "secret" not in str(caught.value)


def test_stores_that_wait_for_replicas_or_follow_sentinels_keep_async_calls_on_threads() -> None:
    from boundary import RedisCanonicalStore

    # (no connection is made: the stores are only built)
    assert RedisCanonicalStore.from_url("redis://127.0.0.1:1/0").async_store() is not None
    waiting = RedisCanonicalStore.from_url("redis://127.0.0.1:1/0", wait_replicas=1)
    assert waiting.async_store() is None
    assert RedisCanonicalStore.from_url(URL).async_store() is None
