"""A TCP proxy of our own between Redis and its clients, for measuring at a distance and
counting round trips: ``python -m bench --delay-ms 0.25`` puts one between every client and
worker and Redis (the store, the broker and the result backend); the round-trip study puts
one on each leg (the caller's and the worker's connections to each of the three).

Each way, every chunk read is written on after ``delay_s`` (``0``: at once), in order: the
network of hosts ``2 * delay_s`` apart. The event loop waits on ``select`` (microsecond
timeouts): ``epoll``'s and ``poll``'s millisecond timeouts would round a 0.25 ms delay up
to 1 ms.

Counted, per proxy, when ``count`` is on (``Exchange`` and ``Push`` records, stamped with
``time.monotonic()``): a **round trip** is what the client writes (one command or a
pipeline of them, however many writes) up to the server's first reply after it; a **push**
is what the server writes when nothing was asked (a Pub/Sub message). A blocking command
(``BRPOP``, ...) is a round trip whose reply is a wake-up.

Run as a process: ``python -m bench.rig.proxy --listen PORT --upstream HOST:PORT --delay-ms
0.25`` (it prints ``ready PORT`` once it listens, and stops on SIGTERM or stdin's end).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: Commands whose reply waits for something to happen (a wake-up, not a round trip's work).
BLOCKING = frozenset({"BRPOP", "BLPOP", "BLMOVE", "BRPOPLPUSH", "BZPOPMIN", "BZPOPMAX", "XREAD"})
#: prctl's option that sets the calling thread's timer slack, in nanoseconds.
PR_SET_TIMERSLACK = 29


@dataclass
class Exchange:
    """One round trip: the client's write(s), then the server's reply."""

    connection: int
    sent: float
    commands: list[str]
    replied: float | None = None

    @property
    def blocking(self) -> bool:
        return bool(self.commands) and self.commands[0] in BLOCKING


@dataclass
class Push:
    """What the server wrote unasked (a Pub/Sub message)."""

    connection: int
    at: float


@dataclass
class Tally:
    """What one proxy counted."""

    exchanges: list[Exchange] = field(default_factory=list)
    pushes: list[Push] = field(default_factory=list)
    connections: int = 0

    def clear(self) -> None:
        self.exchanges = []
        self.pushes = []


class Resp:
    """Counts the complete RESP values of one direction of a connection, as they arrive in
    chunks (a reply split over two reads is one reply), and names the commands a client
    sends (each a RESP array whose first element is the name)."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[str]:
        """The values completed by ``data``: for each, its first element's name when it is
        an array of bulk strings (a command), else ``""``."""
        buffer = self.buffer + data
        done: list[str] = []
        at = 0
        while at < len(buffer):
            got = _value(buffer, at)
            if got is None:
                break
            at, name = got
            done.append(name)
        self.buffer = buffer[at:]
        return done


def _line(buffer: bytes, at: int) -> tuple[bytes, int] | None:
    end = buffer.find(b"\r\n", at)
    return None if end < 0 else (buffer[at:end], end + 2)


def _value(buffer: bytes, at: int) -> tuple[int, str] | None:
    """Where the RESP value at ``at`` ends, and its command name (``""`` if not a command);
    ``None`` when it is not complete yet."""
    line = _line(buffer, at + 1)
    if line is None:
        return None
    text, after = line
    kind = buffer[at : at + 1]
    if kind in (b"$", b"=", b"!"):
        size = int(text)
        if size < 0:
            return after, ""
        end = after + size + 2
        return (end, "") if end <= len(buffer) else None
    if kind in (b"*", b">", b"~", b"%", b"|"):
        count = int(text)
        if kind in (b"%", b"|"):
            count *= 2
        name = ""
        for index in range(max(count, 0)):
            if index == 0 and buffer[after : after + 1] == b"$":
                head = _line(buffer, after + 1)
                if head is None:
                    return None
                size, start = int(head[0]), head[1]
                if start + size + 2 > len(buffer):
                    return None
                word = buffer[start : start + size]
                name = word.decode(errors="replace").upper() if word.isalpha() else ""
                after = start + size + 2
                continue
            got = _value(buffer, after)
            if got is None:
                return None
            after = got[0]
        return after, name
    # + - : _ , # ( and inline commands: one line.
    return after, ""


class _Side(asyncio.Protocol):
    """One end of a proxied connection: what it reads is written on the other end after the
    proxy's delay."""

    def __init__(self, link: _Link, client: bool) -> None:
        self.link = link
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        #: Close this end, or write its end of stream, once its queue is written.
        self.closing = False
        self.eof_pending = False
        #: This end's peer said it writes no more.
        self.got_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        with contextlib.suppress(OSError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # What the client wrote (or its end) while this end connected.
        if self.queue:
            self.schedule()
        elif self.eof_pending or self.closing:
            self._written()

    def data_received(self, data: bytes) -> None:
        self.link.seen(data, from_client=self.client)
        other = self.other
        assert other is not None
        delay = self.link.proxy.delay_s
        if delay <= 0 and not other.queue and other.transport is not None:
            other.transport.write(data)
            return
        other.queue.append((time.monotonic() + delay, data))
        other.schedule()

    def schedule(self) -> None:
        """Sets a timer for what waits to be written (once this end is connected)."""
        if self.timer is not None or not self.queue or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        # loop.time() is time.monotonic()
        self.timer = loop.call_at(self.queue[0][0], self.flush)

    def flush(self) -> None:
        self.timer = None
        now = time.monotonic()
        due = []
        while self.queue and self.queue[0][0] <= now:
            due.append(self.queue.popleft()[1])
        if due and self.transport is not None:
            self.transport.write(b"".join(due))
        if self.queue:
            self.schedule()
        else:
            self._written()

    def _written(self) -> None:
        """Everything due to this end is written: an end asked for is passed on."""
        if self.transport is None:
            return
        if self.closing:
            self.transport.close()
        elif self.eof_pending:
            self.eof_pending = False
            if self.transport.can_write_eof():
                self.transport.write_eof()
            # Both ways ended: nothing more can pass.
            if self.got_eof:
                self.transport.close()

    def close_after_queue(self) -> None:
        """Closes once everything due to this end is written."""
        self.closing = True
        if not self.queue and self.timer is None:
            self._written()

    def eof_after_queue(self) -> None:
        """Says "no more" to this end's peer once everything due to it is written."""
        self.eof_pending = True
        if not self.queue and self.timer is None:
            self._written()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.proxy.forget(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        if self.other is not None:
            self.other.close_after_queue()

    def eof_received(self) -> bool | None:
        """Half-closed: passed on to the other end, after what is due to it; the other way
        stays open until it ends too."""
        self.got_eof = True
        if self.other is not None:
            self.other.eof_after_queue()
            if self.other.got_eof and self.transport is not None and not self.queue:
                self.transport.close()
        return True

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()


class _Link:
    """A client's connection and the proxy's connection to the server for it."""

    def __init__(self, proxy: DelayProxy, number: int) -> None:
        self.proxy = proxy
        self.number = number
        self.open: Exchange | None = None
        self.requests = Resp()
        self.replies = Resp()
        #: Commands sent and not answered yet.
        self.waiting = 0

    def seen(self, data: bytes, *, from_client: bool) -> None:
        if not self.proxy.count:
            return
        tally = self.proxy.tally
        now = time.monotonic()
        if from_client:
            names = self.requests.feed(data)
            self.waiting += len(names)
            if self.open is None:
                self.open = Exchange(self.number, now, names)
            else:
                self.open.commands += names
            return
        for _ in self.replies.feed(data):
            if self.waiting > 0:
                self.waiting -= 1
                if self.open is not None:
                    # The first reply ends the round trip (a pipeline's others follow it).
                    self.open.replied = now
                    tally.exchanges.append(self.open)
                    self.open = None
            else:
                tally.pushes.append(Push(self.number, now))


class DelayProxy:
    """Listens on ``listen_port`` (0: any free port, ``port`` says which) and forwards each
    connection to ``upstream`` (host, port), ``delay_s`` each way; ``delay_s`` and ``count``
    may change while it runs."""

    def __init__(
        self,
        upstream: tuple[str, int],
        delay_s: float = 0.0,
        *,
        listen_port: int = 0,
        count: bool = False,
        name: str = "",
    ) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.listen_port = listen_port
        self.count = count
        self.name = name
        self.tally = Tally()
        self.server: asyncio.Server | None = None
        self._links = 0
        self._sides: set[_Side] = set()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def start(self) -> DelayProxy:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            self._accepted, "127.0.0.1", self.listen_port, reuse_address=True
        )
        return self

    def _accepted(self) -> _Side:
        self._links += 1
        self.tally.connections += 1
        link = _Link(self, self._links)
        client = _Side(link, client=True)
        # What the client writes before the upstream end is connected queues for it.
        upstream = _Side(link, client=False)
        upstream.other, client.other = client, upstream
        self._sides.update((client, upstream))
        asyncio.get_running_loop().create_task(self._connect(client, upstream))
        return client

    async def _connect(self, client: _Side, upstream: _Side) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: upstream, *self.upstream)
        except OSError:
            self._sides.discard(upstream)
            if client.transport is not None:
                client.transport.close()

    def forget(self, side: _Side) -> None:
        self._sides.discard(side)

    async def stop(self) -> None:
        """Stops listening and closes every connection."""
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for side in list(self._sides):
            if side.transport is not None:
                side.transport.close()
        self._sides.clear()


def new_loop() -> asyncio.AbstractEventLoop:
    """An event loop on ``select``: timers to the microsecond (see the module's note)."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


def precise_timers() -> None:
    """This thread's timers end on time: Linux lets a sleep run 50 us late by default
    (its timer slack), which would add that much to each delayed write."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1)


class ProxyThread:
    """Proxies running on an event loop of their own in a thread of this process (for
    counting: a thread shares this process's CPU; timed runs use ``proxy_process``)."""

    def __init__(self) -> None:
        self.loop = new_loop()
        self.thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self.proxies: list[DelayProxy] = []

    def _run(self) -> None:
        precise_timers()
        self.loop.run_forever()

    def __enter__(self) -> ProxyThread:
        self.thread.start()
        return self

    def add(self, proxy: DelayProxy) -> DelayProxy:
        asyncio.run_coroutine_threadsafe(proxy.start(), self.loop).result(10)
        self.proxies.append(proxy)
        return proxy

    def call(self, function: Any, *args: Any) -> Any:
        """``function(*args)`` on the proxies' loop (their state is the loop's)."""

        async def run() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def __exit__(self, *exc: object) -> None:
        async def stop_all() -> None:
            for proxy in self.proxies:
                await proxy.stop()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop_all(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def proxy_process(
    upstream: tuple[str, int], delay_ms: float, log: Path | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``python -m bench.rig.proxy`` in a process of its own (its CPU is not the client's)
    until the block ends: yields its port and the process."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "bench.rig.proxy",
        "--listen",
        str(port),
        "--upstream",
        f"{upstream[0]}:{upstream[1]}",
        "--delay-ms",
        str(delay_ms),
    ]
    root = Path(__file__).resolve().parents[2]
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log.open("ab") if log is not None else subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(b"ready"):
            raise RuntimeError("the delay proxy did not start")
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Distance:
    """``python -m bench --delay-ms``: a proxy process between the bench's clients and
    workers and its Redis server, ``delay_ms`` each way; ``url`` is the proxy's (the server's
    with the proxy's port). ``summary()``: the delay asked, a PING's round trip direct and
    through the proxy (p50 of ``pings``), and the proxy's CPU seconds."""

    def __init__(self, server_url: str, delay_ms: float, log: Path | None = None) -> None:
        self.server_url = server_url
        self.delay_ms = delay_ms
        self.log = log
        self.url = ""
        self._cpu_began = 0.0
        self._context: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.pings: dict[str, float] = {}

    def __enter__(self) -> Distance:
        parts = urlsplit(self.server_url)
        upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._context = proxy_process(upstream, self.delay_ms, self.log)
        port, self._proc = self._context.__enter__()
        netloc = f"{parts.username or ''}{':' if parts.password else ''}{parts.password or ''}"
        netloc = f"{netloc}@" if netloc else ""
        self.url = urlunsplit((parts.scheme, f"{netloc}127.0.0.1:{port}", parts.path, "", ""))
        self.pings = {
            "direct_ping_p50_ms": ping_p50_ms(self.server_url),
            "proxied_ping_p50_ms": ping_p50_ms(self.url),
        }
        self._cpu_began = process_cpu_s(self._proc.pid)
        return self

    def summary(self) -> dict[str, float]:
        assert self._proc is not None
        cpu = process_cpu_s(self._proc.pid) - self._cpu_began
        return {"delay_ms": self.delay_ms, **self.pings, "proxy_cpu_s": cpu}

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)


def ping_p50_ms(url: str, pings: int = 200) -> float:
    """The median of ``pings`` PINGs' round trips to ``url``, in ms."""
    import redis

    with redis.Redis.from_url(url) as client:
        client.ping()
        times = []
        for _ in range(pings):
            began = time.perf_counter()
            client.ping()
            times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rig.proxy", description=__doc__)
    parser.add_argument("--listen", type=int, required=True, help="port to listen on")
    parser.add_argument("--upstream", required=True, help="HOST:PORT forwarded to")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added each way")
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    precise_timers()
    loop = new_loop()
    proxy = DelayProxy((host, int(port)), args.delay_ms / 1000, listen_port=args.listen)
    loop.run_until_complete(proxy.start())
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    loop.add_signal_handler(signal.SIGINT, lambda: stop.done() or stop.set_result(None))

    def stdin_closed() -> None:
        # The parent died: nothing will stop this process otherwise.
        if not sys.stdin.buffer.read1(1) and not stop.done():
            stop.set_result(None)

    with contextlib.suppress(ValueError, OSError):
        loop.add_reader(sys.stdin.fileno(), stdin_closed)
    print(f"ready {proxy.port}", flush=True)
    loop.run_until_complete(stop)
    loop.run_until_complete(proxy.stop())
    loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
