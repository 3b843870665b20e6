"""Sentinel over TLS: a ``redis+sentinel://`` URL whose query carries the TLS options reaches
the Sentinel and the master it names over mutual TLS (verified certificates), as each role's
ACL user, for the store, the broker and the result backend alike; a call is READY through a
worker, the Sentinel fails the primary over, and a second call is READY."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.rig import workers as rig
from boundary import (
    InvocationStatus,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
)
from boundary.store.sentinel import parse_sentinel_url
from tasks import CeleryDispatcher
from tasks.settings import InvalidSettings, Settings, load_settings
from tasks.wiring.app import celery_config, create_app
from tasks.wiring.redis_access import unverified
from tests.celery.workers import celery_process
from tests.conftest import celery_test_settings
from tests.support.celery_tools import registry
from tests.tls.certs import Certificates
from tests.tls.sentinels import TlsSentinelSet, tls_sentinel_set
from tests.tls.servers import Users

RUN = RunContext(run_id="run-tls-sentinel", authorized_tools=frozenset({"lookup"}))


def _settings(sentinels: TlsSentinelSet, users: Users, role: str) -> Settings:
    url = sentinels.url_for(role, users)
    return celery_test_settings(redis_url=url, broker_url=url, result_backend=url)


def _call(boundary: ToolBoundary, call_id: str) -> object:
    envelope = ToolCallEnvelope(
        run_id=RUN.run_id, tool_call_id=call_id, tool_name="lookup", arguments={"query": call_id}
    )
    return boundary.invoke(envelope, RUN, timeout=60)


@pytest.mark.slow
def test_a_call_is_ready_over_tls_sentinel_before_and_after_a_failover(
    tmp_path: Path, tls_certs: Certificates, tls_users: Users
) -> None:
    with tls_sentinel_set(tmp_path / "set", tls_certs, tls_users) as sentinels:
        settings = _settings(sentinels, tls_users, "caller")
        store = RedisCanonicalStore.from_url(settings.store_url, ttl_s=600)
        app = create_app(settings, name="tls_sentinel_caller")
        boundary = ToolBoundary(store=store, registry=registry, dispatcher=CeleryDispatcher(app))
        log = tmp_path / "worker.log"
        args = rig.worker_args("threads", 2, ("tools", "projections"), node="tls-sentinel@%h")
        with celery_process(_settings(sentinels, tls_users, "worker"), *args, log=log):
            first = _call(boundary, "before")
            assert first.status is InvocationStatus.READY, (first, log.read_text()[-3000:])
            old = sentinels.master_port()
            sentinels.failover()
            assert sentinels.master_port() != old
            second = _call(boundary, "after")
            assert second.status is InvocationStatus.READY, (second, log.read_text()[-3000:])
        text = log.read_text()
        for password in tls_users.passwords.values():
            assert password not in text


TLS_URL = (
    "redis+sentinel://u:pw@10.0.0.1:26379,10.0.0.2/tb/1"
    "?ssl_ca_certs=%2Fca.pem&ssl_certfile=%2Fc.pem&ssl_keyfile=%2Fc.key"
)


def test_the_query_makes_sentinels_and_master_tls_with_verification_on_by_default() -> None:
    address = parse_sentinel_url(TLS_URL)
    expected = {
        "ssl": True,
        "ssl_cert_reqs": "required",
        "ssl_ca_certs": "/ca.pem",
        "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/c.key",
    }
    assert address.tls_kwargs() == expected
    assert address.verified
    assert parse_sentinel_url("redis+sentinel://h/tb").tls_kwargs() == {}
    assert parse_sentinel_url("redis+sentinel://h/tb?ssl=true").tls_kwargs() == {
        "ssl": True,
        "ssl_cert_reqs": "required",
    }
    config = celery_config(celery_test_settings(broker_url=TLS_URL, result_backend=TLS_URL))
    # The Sentinels' connections (both kombu and Celery hand sentinel_kwargs to redis-py)
    assert config["broker_transport_options"]["sentinel_kwargs"] == expected
    assert config["result_backend_transport_options"]["sentinel_kwargs"] == expected
    # The master's: kombu's and Celery's Sentinel-managed TLS connections
    assert config["broker_use_ssl"]["ssl_ca_certs"] == "/ca.pem"
    assert config["redis_backend_use_ssl"]["ssl_certfile"] == "/c.pem"
    # No query in kombu's chunks (Celery would read it as a plain, unmanaged TLS connection)
    assert "?" not in config["broker_url"] and "?" not in config["result_backend"]


def test_an_unknown_option_is_refused_naming_the_option_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "redis+sentinel://:secret@h/tb?ssl_password=hunter2"
    with pytest.raises(ValueError, match="'ssl_password'") as refused:
        parse_sentinel_url(url)
    assert "hunter2" not in str(refused.value) and "secret" not in str(refused.value)
    # (the settings name the variable, never its value)
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", url)
    with pytest.raises(InvalidSettings) as invalid:
        load_settings()
    assert str(invalid.value) == "invalid settings: TOOL_BOUNDARY_REDIS_URL"


def test_turning_verification_off_warns() -> None:
    url = TLS_URL + "&ssl_cert_reqs=none"
    assert not parse_sentinel_url(url).verified
    (warning,) = unverified({"store": url})
    assert "not verified" in warning
