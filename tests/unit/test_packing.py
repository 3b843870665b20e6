"""``boundary.store.packing``: the store's commands packed by hiredis are byte for byte what
redis-py packs, and whatever hiredis would pack differently still goes through redis-py."""

from __future__ import annotations

import enum
from typing import Any

import pytest
import redis
import redis.connection
from hypothesis import given
from hypothesis import strategies as st

from boundary import RedisCanonicalStore
from boundary.store.packing import HiredisPacker, fast_packing

FastConnection = fast_packing(redis.connection.Connection)


def _connections(**options: Any) -> tuple[Any, Any]:
    """A stock connection and a fast one, never connected (packing needs no server)."""
    return redis.connection.Connection(**options), FastConnection(**options)


plain = st.one_of(
    st.text(),
    st.binary(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)


@given(name=st.sampled_from(["EVALSHA", "SET", "HSET", "PUBLISH"]), args=st.lists(plain))
def test_plain_commands_pack_as_redis_py_packs_them(name: str, args: list[Any]) -> None:
    # Given a stock connection and one with the store's packer
    stock, fast = _connections()
    assert isinstance(fast._command_packer, HiredisPacker)
    # When each packs the same command of plain arguments (pipelines use the same packer)
    # Then the bytes on the wire are the same
    assert b"".join(fast.pack_command(name, *args)) == b"".join(stock.pack_command(name, *args))
    commands = [(name, *args), ("GET", "k")]
    assert b"".join(fast.pack_commands(commands)) == b"".join(stock.pack_commands(commands))


class Level(enum.IntEnum):
    HIGH = 2


class Status(enum.StrEnum):
    READY = "READY"


@pytest.mark.parametrize(
    "args",
    [
        ("SCRIPT LOAD", "return 1"),  # a two-word name, split by redis-py
        (b"CONFIG GET", b"maxmemory"),
        ("SET", "k", memoryview(b"value")),
        ("SET", "k", bytearray(b"value")),
        ("SET", "k", Level.HIGH),  # an int subclass: redis-py packs its repr
        ("SET", "k", Status.READY),
    ],
    ids=["two-words", "bytes-name", "memoryview", "bytearray", "int-enum", "str-enum"],
)
def test_anything_else_is_packed_by_redis_py(args: tuple[Any, ...]) -> None:
    stock, fast = _connections()
    assert b"".join(fast.pack_command(*args)) == b"".join(stock.pack_command(*args))


@pytest.mark.parametrize("bad", [True, None, 1j, object()])
def test_a_value_redis_py_refuses_is_refused_with_its_error(bad: Any) -> None:
    stock, fast = _connections()
    with pytest.raises(redis.DataError) as expected:
        stock.pack_command("SET", "k", bad)
    with pytest.raises(redis.DataError) as got:
        fast.pack_command("SET", "k", bad)
    assert str(got.value) == str(expected.value)


def test_a_connection_with_another_encoding_keeps_redis_pys_packer() -> None:
    # Given connections whose text is not UTF-8 with strict errors
    for options in ({"encoding": "latin-1"}, {"encoding_errors": "replace"}):
        # Then their packer is redis-py's, so their text is encoded as they asked
        assert not isinstance(FastConnection(**options)._command_packer, HiredisPacker)
    stock, fast = _connections(encoding="latin-1")
    assert fast.pack_command("SET", "k", "é") == stock.pack_command("SET", "k", "é")


def test_fast_packing_is_made_once_and_not_twice() -> None:
    assert fast_packing(redis.connection.Connection) is FastConnection
    assert fast_packing(FastConnection) is FastConnection
    ssl = fast_packing(redis.connection.SSLConnection)
    assert issubclass(ssl, redis.connection.SSLConnection)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0", "unix:///tmp/none.sock"]
)
def test_the_stores_connections_pack_with_hiredis(url: str) -> None:
    # Given a store made from a URL (no connection is opened to build it)
    store = RedisCanonicalStore.from_url(url)
    pool = store.client.connection_pool
    # Then the connections its pool makes use the store's packer, of the URL's kind
    connection = pool.make_connection()
    assert isinstance(connection._command_packer, HiredisPacker)
    stock_class = type(redis.ConnectionPool.from_url(url).make_connection())
    assert isinstance(connection, stock_class)
