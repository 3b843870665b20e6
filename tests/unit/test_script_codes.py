"""The record scripts' one table of return codes: the Lua table in ``lua/_prelude.lua`` and
``ScriptCode`` say the same, and every record script opens with its header and returns only
codes of that table (or a time, a count, a reply list)."""

from __future__ import annotations

import re
from importlib import resources

from boundary.store.codec import PROGRESS_FIELDS
from boundary.store.codes import ScriptCode
from boundary.store.scripts import load_script, record_script

_LUA = resources.files("boundary.store").joinpath("lua")
RECORD_SCRIPTS = sorted(
    p.name.removesuffix(".lua")
    for p in _LUA.iterdir()
    if p.name.endswith(".lua") and not p.name.startswith("_")
)


def lua_codes() -> dict[str, int]:
    prelude = load_script("_prelude")
    table = re.search(r"local CODE = \{(.*?)\n\}", prelude, re.S)
    assert table is not None
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s+([A-Z_]+) = (-?\d+),", table[1], re.M)}


def test_the_lua_table_and_the_python_enum_are_the_same() -> None:
    assert lua_codes() == {code.name: code.value for code in ScriptCode}


def test_every_record_script_has_the_prelude_and_a_header() -> None:
    # The 13 of a call's lifecycle and its run, a turn's create_many, side_write (--write),
    # read_records (a run's facts).
    assert len(RECORD_SCRIPTS) == 16
    for name in RECORD_SCRIPTS:
        own = load_script(name)
        assert record_script(name).endswith(own)
        assert record_script(name).startswith(load_script("_prelude"))
        assert "-- KEYS[1] = " in own, name
        assert "-- Returns" in own, name
        # No bare negative or zero code: every "nothing written" answer names its CODE.
        assert not re.search(r"return \{?-?[0-9]+\b(?!\s*\+)", own.replace("return 1\n", "")), name
        # The time is read through the prelude's now_ms() only.
        assert 'redis.call("TIME")' not in own, name


def test_read_records_reads_the_progress_fields_in_their_order() -> None:
    # The script keeps the field names (a call sends only the keys); replies are zipped with
    # PROGRESS_FIELDS, so a name missing, added or moved would shift every value.
    table = re.search(r"local FIELDS = \{(.*?)\n\}", load_script("read_records"), re.S)
    assert table is not None
    assert tuple(re.findall(r'"([a-z_0-9]+)"', table[1])) == PROGRESS_FIELDS
