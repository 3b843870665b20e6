"""A worker that cannot use its Redis as configured stops at start with one line naming why:
an untrusted certificate, a hostname mismatch, TLS to a plaintext port, plaintext to a TLS
port, a refused password, a missing client certificate, a user without the seal channels;
never a traceback, a password or a URL."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.rig.workers import celery_command
from tasks.exits import EXIT_UNAVAILABLE, EXIT_USAGE
from tests.celery.workers import ROOT, celery_process, settings_env, worker_args
from tests.conftest import celery_test_settings
from tests.support.servers import redis_server
from tests.tls.certs import Certificates
from tests.tls.servers import TlsRedisServer, Users, add_user, role_rules, tls_server

#: A password only the refused URLs hold.
WRONG = "wrong-Pw-7c1e"


def start_worker(url: str, **overrides: object) -> tuple[int, str]:
    settings = celery_test_settings(
        redis_url=url, broker_url=url, result_backend=url, startup_attempts=2, **overrides
    )
    done = subprocess.run(
        celery_command("tasks", *worker_args("refused")),
        cwd=ROOT,
        env=settings_env(settings) | {"C_FORCE_ROOT": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def one_line(output: str, *words: str, secrets: tuple[str, ...] = ()) -> str:
    lines = [line for line in output.splitlines() if "cannot start" in line]
    assert len(lines) == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    for secret in (WRONG, "@localhost", "ssl_ca_certs=", *secrets):
        assert secret not in output, output[-3000:]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def other_servers(
    tmp_path_factory: pytest.TempPathFactory, tls_certs: Certificates, tls_users: Users
) -> Iterator[dict[str, TlsRedisServer]]:
    """Servers presenting a certificate of another CA, and one for another host name."""
    with (
        tls_server(
            tmp_path_factory.mktemp("untrusted"),
            tls_certs,
            tls_users,
            server_pair=tls_certs.untrusted_server,
        ) as untrusted,
        tls_server(
            tmp_path_factory.mktemp("wrong-host"),
            tls_certs,
            tls_users,
            server_pair=tls_certs.wrong_host_server,
        ) as wrong_host,
    ):
        yield {"untrusted": untrusted, "wrong-host": wrong_host}


def test_an_untrusted_certificate(other_servers: dict[str, TlsRedisServer]) -> None:
    code, output = start_worker(other_servers["untrusted"].url_for("worker", 0))
    assert code == EXIT_USAGE, output[-3000:]
    one_line(output, "not trusted")


def test_a_hostname_mismatch(other_servers: dict[str, TlsRedisServer]) -> None:
    code, output = start_worker(other_servers["wrong-host"].url_for("worker", 0))
    assert code == EXIT_USAGE, output[-3000:]
    one_line(output, "hostname mismatch")


def test_tls_to_a_plaintext_port(tmp_path: Path, tls_redis: TlsRedisServer) -> None:
    with redis_server(tmp_path / "plain") as plain:
        url = tls_redis.url_for("worker", 0).replace(f":{tls_redis.port}/", f":{plain.port}/")
        code, output = start_worker(url)
    # (a plaintext Redis waits for the rest of what it takes for a command: no answer)
    assert code == EXIT_UNAVAILABLE, output[-3000:]
    one_line(output, "plaintext port", secrets=(tls_redis.users.passwords["worker"],))


def test_plaintext_to_a_tls_port(tls_redis: TlsRedisServer) -> None:
    url = tls_redis.url_for("worker", 0).replace("rediss://", "redis://").split("?")[0]
    code, output = start_worker(url)
    assert code == EXIT_UNAVAILABLE, output[-3000:]
    one_line(output, "use rediss://", secrets=(tls_redis.users.passwords["worker"],))


def test_a_wrong_password(tls_redis: TlsRedisServer) -> None:
    url = tls_redis.url_as("tb-worker", WRONG, 0)
    code, output = start_worker(url)
    assert code == EXIT_USAGE, output[-3000:]
    one_line(output, "WRONGPASS")


def test_a_missing_client_certificate(tls_redis: TlsRedisServer) -> None:
    url = tls_redis.url_for("worker", 0, client_cert=False)
    code, output = start_worker(url)
    # (TLS 1.3: the refusal arrives as the server's alert or as an EOF, whichever is read
    # first; the alert is final, an EOF may be a restarting server: retried)
    assert code in (EXIT_USAGE, EXIT_UNAVAILABLE), output[-3000:]
    one_line(output, "client certificate", secrets=(tls_redis.users.passwords["worker"],))


def test_a_user_without_the_seal_channels(tls_redis: TlsRedisServer) -> None:
    # Given the shipped worker's rules without its channel patterns (as Redis 7 makes a new
    # user: acl-pubsub-default resetchannels)
    rules = [rule for rule in role_rules("worker") if not rule.startswith("&")]
    password = "nochannel-Pw-41ab"
    add_user(tls_redis, "tb-nochannel", password, rules)
    code, output = start_worker(tls_redis.url_as("tb-nochannel", password, 0))
    # Then the worker stops at start, naming the refused channel right
    assert code == EXIT_USAGE, output[-3000:]
    line = one_line(output, "NOPERM", "channel", secrets=(password,))
    assert "store" in line


def test_verification_off_in_the_url_works_and_warns_once_a_part(
    other_servers: dict[str, TlsRedisServer], tmp_path: Path
) -> None:
    # Given a server whose certificate nobody trusts, and URLs that say not to verify it
    server = other_servers["untrusted"]
    url = server.url_for("worker", 0).replace("ssl_cert_reqs=required", "ssl_cert_reqs=none")
    settings = celery_test_settings(redis_url=url, broker_url=url, result_backend=url)
    log = tmp_path / "worker.log"
    # When a worker starts on them, it starts
    with celery_process(settings, *worker_args("unverified"), log=log, timeout_s=60):
        pass
    # And it says, once for each of the store, the broker and the backend, what that costs
    warned = [line for line in log.read_text().splitlines() if "is not verified" in line]
    assert len(warned) == 3, log.read_text()[-3000:]
