"""The store's commands packed by hiredis in one call.

redis-py packs a command's arguments through a Python generator that checks and encodes each
argument before it hands the tuple to ``hiredis.pack_command``: 30-40 us for the 23
arguments of the seal script on a 2-core machine, where hiredis alone takes 4 (measured with
``timeit`` on ``Connection.pack_command``). A call runs three such scripts on its worker and
one on its caller. When every argument is a plain ``str``, ``bytes``, ``int`` or ``float`` and
the command's name is one word, hiredis produces exactly the bytes redis-py would (redis-py
encodes ``str`` as UTF-8 and numbers by ``repr``, as hiredis does; ``tests/unit/test_packing.py``
compares the two), so those go to hiredis at once; anything else (a ``bool``, ``None``, a
``memoryview``, an enum, a two-word name such as ``"SCRIPT LOAD"``) takes redis-py's own
packer, errors included.

``fast_packing(cls)`` is ``cls`` (a redis-py connection class) with that packer; the store
sets it on the pools it makes (``RedisCanonicalStore.from_url``, standalone and Sentinel).
A connection whose encoding is not UTF-8 with strict errors, or one given its own packer,
keeps redis-py's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import hiredis

__all__ = ["fast_packing"]

#: Argument types hiredis packs exactly as redis-py does (exact types: ``bool`` and enums,
#: which subclass them, are redis-py's to pack or refuse).
_PLAIN = frozenset({str, bytes, int, float})
_UTF8 = frozenset({"utf-8", "utf8", "UTF-8", "UTF8"})


class HiredisPacker:
    """A connection's command packer: plain commands straight to hiredis, the rest to
    ``standard`` (the packer redis-py built for the connection)."""

    __slots__ = ("_standard",)

    def __init__(self, standard: Any) -> None:
        self._standard = standard

    def pack(self, *args: Any) -> list[bytes]:
        name = args[0]
        if type(name) is str and " " not in name and _PLAIN.issuperset(map(type, args)):
            return [hiredis.pack_command(args)]
        packed: list[bytes] = self._standard.pack(*args)
        return packed


class _FastPacking:
    """Mixin of a redis-py connection class: its packer is a ``HiredisPacker``."""

    def _construct_command_packer(self, packer: Any) -> Any:
        standard = super()._construct_command_packer(packer)  # type: ignore[misc]
        encoder = getattr(self, "encoder", None)
        if (
            packer is not None
            or getattr(encoder, "encoding", None) not in _UTF8
            or getattr(encoder, "encoding_errors", None) != "strict"
        ):
            return standard
        return HiredisPacker(standard)


@cache
def fast_packing(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` whose commands are packed by a ``HiredisPacker`` (itself when it
    already is, or when redis-py builds no packer there)."""
    if issubclass(connection_class, _FastPacking) or not hasattr(
        connection_class, "_construct_command_packer"
    ):
        return connection_class
    return type(connection_class.__name__, (_FastPacking, connection_class), {})
