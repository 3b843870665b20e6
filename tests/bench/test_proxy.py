"""The delay proxy of ``bench.rig.proxy``: it forwards every byte both ways in order, holds
each chunk for its delay, closes each end when the other closes, and counts round trips and
pushes of a Redis connection. No timing is checked but a lower bound (a delayed round trip
cannot take less than twice the delay)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.rig.proxy import DelayProxy, ProxyThread, Resp, proxy_process
from tests.bench.runner import SERVER, positive, run_bench
from tests.conftest import REDIS_HOST, REDIS_PORT, require_service
from tests.support.helpers import wait_until


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """A TCP echo server on a free port."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _read(sock: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        assert chunk, "closed early"
        got += chunk
    return got


def test_the_proxy_forwards_every_byte_both_ways_in_order(echo: tuple[str, int]) -> None:
    # Given a proxy with a delay in front of an echo server
    payload = bytes(range(256)) * 8192  # 2 MiB
    with ProxyThread() as thread:
        proxy = thread.add(DelayProxy(echo, 0.001))
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            # When a client sends more than a socket buffer holds, in pieces
            sender = threading.Thread(target=sock.sendall, args=(payload,))
            sender.start()
            got = _read(sock, len(payload))
            sender.join()

    # Then it reads back every byte, in order
    assert got == payload


def test_a_round_trip_through_the_proxy_takes_at_least_twice_its_delay(
    echo: tuple[str, int],
) -> None:
    # Given a proxy adding 50 ms each way
    with ProxyThread() as thread:
        proxy = thread.add(DelayProxy(echo, 0.05))
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            # When a client sends a message and waits for its echo
            began = time.monotonic()
            sock.sendall(b"ping")
            assert _read(sock, 4) == b"ping"
            took = time.monotonic() - began

    # Then the echo came back no sooner than both delays
    assert took >= 0.1


def test_the_proxy_closes_each_end_when_the_other_closes(echo: tuple[str, int]) -> None:
    with ProxyThread() as thread:
        proxy = thread.add(DelayProxy(echo, 0.001))
        # Given a connection through the proxy, with bytes still on their way
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(b"last words")
            # When the client says it will write no more
            sock.shutdown(socket.SHUT_WR)
            # Then what was sent still arrives, then the end of the stream
            got = b""
            while chunk := sock.recv(100):
                got += chunk
        assert got == b"last words"
        # And the proxy lets go of both ends
        wait_until(lambda: not thread.call(lambda: len(proxy._sides)), "both ends closed", 10)
        port = proxy.port
    # And once stopped, it listens no more
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass


def test_resp_counts_values_split_across_reads_and_names_commands() -> None:
    requests, replies = Resp(), Resp()

    assert requests.feed(b"*2\r\n$4\r\nPING\r\n$1\r\na\r\n*1\r\n$3\r\nGE") == ["PING"]
    assert requests.feed(b"T\r\n") == ["GET"]
    assert replies.feed(b"+OK\r\n$5\r\nhel") == [""]
    assert replies.feed(b"lo\r\n:1\r\n$-1\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nx\r\n") == [
        "",
        "",
        "",
        "MESSAGE",
    ]


def test_a_counting_proxy_tells_round_trips_pipelines_and_pushes_apart() -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    with ProxyThread() as thread:
        proxy = thread.add(DelayProxy((REDIS_HOST, REDIS_PORT), count=True))
        client = redis.Redis(port=proxy.port, db=9)
        listener = redis.Redis(port=proxy.port, db=9).pubsub(ignore_subscribe_messages=True)
        try:
            listener.subscribe("bench-proxy-test")
            client.ping()
            thread.call(proxy.tally.clear)

            # When a client sends one command, a pipeline of three, and a message is published
            client.ping()
            pipe = client.pipeline(transaction=False)
            pipe.echo("a").echo("b").echo("c")
            pipe.execute()
            client.publish("bench-proxy-test", "hi")
            wait_until(lambda: listener.get_message(timeout=0.5), "the message", 10)
            exchanges, pushes = thread.call(
                lambda: (list(proxy.tally.exchanges), list(proxy.tally.pushes))
            )
        finally:
            listener.close()
            client.close()

    # Then the proxy counted three round trips (the pipeline is one) and one push
    assert [exchange.commands for exchange in exchanges] == [
        ["PING"],
        ["ECHO", "ECHO", "ECHO"],
        ["PUBLISH"],
    ]
    assert len(pushes) == 1


def test_the_proxy_process_forwards_to_redis_and_stops() -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)
    with (
        proxy_process((REDIS_HOST, REDIS_PORT), 0.25) as (port, proc),
        redis.Redis(port=port, db=9, socket_timeout=10) as client,
    ):
        assert client.ping()
    assert proc.poll() is not None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_bench_measures_b2_through_the_delay_proxy(tmp_path: Path) -> None:
    require_service("Redis", REDIS_HOST, REDIS_PORT)

    got = run_bench(
        "--quick",
        "--json",
        "--only",
        "b2",
        "--delay-ms",
        "0.25",
        "--redis-url",
        SERVER,
        "--out",
        str(tmp_path),
        timeout=240,
    )

    # The run says what it ran through: the delay asked, PINGs direct and through the proxy
    # (a round trip through it cannot be shorter than twice the delay), the proxy's CPU.
    proxy = got["meta"]["delay_proxy"]
    assert proxy["delay_ms"] == 0.25
    assert proxy["proxied_ping_p50_ms"] >= 0.5
    assert positive(proxy["direct_ping_p50_ms"]) and positive(proxy["proxy_cpu_s"])
    # And the sides' calls went through it: B2's PINGs are the store client's.
    assert got["results"]["b2"]["threads c=8"]["ping_p50_ms"] >= 0.5
    assert positive(got["figures"]["b2_call_over_bare_call_p50"])
