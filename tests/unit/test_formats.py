"""Format versions (``boundary.formats``): what this version reads, what it refuses with
``FORMAT_TOO_NEW``, and that the Lua scripts write the format the code says."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from boundary import ErrorCode, formats
from boundary.call_steps import outcome_from_message
from boundary.formats import FormatTooNew
from boundary.store.codec import decode_record, readable
from boundary.store.seal_message import SealMessage

LUA = Path(formats.__file__).parent / "store" / "lua"
SEAL = "c1\n5000\n1700000000000\n1\nREADY\nEVIDENCE_FOUND\n\n\n" + '{"hits":[1]}'
FIELDS = {
    "run_id": "run-1",
    "tool_call_id": "c1",
    "tool_name": "search",
    "status": "PROJECTING",
    "request": "{}",
    "seq": "1",
    "created_at": "1700000000000",
    "updated_at": "1700000000000",
}


@pytest.mark.parametrize(("value", "found"), [(None, 1), ("", 1), ("1", 1), ("2", 2), (2, 2)])
def test_absent_means_format_1_and_a_number_is_itself(value: object, found: int) -> None:
    assert formats.parse(value) == found
    assert formats.check("record", value) == found


@pytest.mark.parametrize("value", ["3", "99", "x", "0", "-1"])
def test_a_newer_or_unknown_format_is_refused_with_one_line_naming_both(
    value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(FormatTooNew) as refused:
        formats.check("record", value)
    assert refused.value.code is ErrorCode.FORMAT_TOO_NEW
    assert str(refused.value) == "FORMAT_TOO_NEW"  # no text but the code
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "format" in lines[0] and f"formats {formats.PREVIOUS} to {formats.CURRENT}" in lines[0]


def test_the_code_is_stable_and_not_retryable() -> None:
    assert ErrorCode.FORMAT_TOO_NEW.value == "FORMAT_TOO_NEW"
    assert not ErrorCode.FORMAT_TOO_NEW.retryable
    assert "newer version" in ErrorCode.FORMAT_TOO_NEW.message


def test_records_of_the_previous_and_current_format_decode_and_a_newer_one_is_refused() -> None:
    assert decode_record(FIELDS).tool_call_id == "c1"  # 0.5.0: no field
    assert decode_record(FIELDS | {"format": "2", "handbacks": "3"}).handbacks == 3
    assert readable(FIELDS | {"format": "2"})
    with pytest.raises(FormatTooNew):
        decode_record(FIELDS | {"format": "3"})
    assert not readable(FIELDS | {"format": "3"})


def test_seal_messages_with_and_without_the_format_line() -> None:
    old = SealMessage.parse(SEAL)
    new = SealMessage.parse(SEAL + "\nformat=2")
    assert old is not None and new is not None
    assert (old.format, new.format) == (1, 2)
    assert old.agent_result == new.agent_result == '{"hits":[1]}'
    outcome = outcome_from_message(new)
    assert outcome is not None and outcome.result == {"hits": [1]}


def test_a_seal_message_of_a_newer_format_fails_the_call_with_the_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = SealMessage.parse(SEAL + "\nformat=3")
    assert message is not None
    with caplog.at_level(logging.ERROR):
        outcome = outcome_from_message(message)
    assert outcome is not None and outcome.error_code is ErrorCode.FORMAT_TOO_NEW
    assert len(caplog.records) == 1 and "seal message of format 3" in caplog.records[0].getMessage()


def test_a_0_5_0_reader_never_takes_a_wrong_outcome_from_a_new_seal_message() -> None:
    # 0.5.0 split the message in 9 and parsed the last part as the result: with the format
    # line after it, a READY result no longer parses as JSON (it reads the record instead).
    import json

    last = (SEAL + "\nformat=2").split("\n", 8)[8]
    with pytest.raises(ValueError):
        json.loads(last)


def test_the_scripts_write_the_current_format() -> None:
    assert f'"format", "{formats.CURRENT}"' in (LUA / "create.lua").read_text()
    assert f'"format={formats.CURRENT}"' in (LUA / "seal.lua").read_text()


class _Request:
    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)


def test_the_message_header_is_read_from_the_request_or_its_headers() -> None:
    assert formats.message_format(_Request()) is None
    assert formats.message_format(_Request(tool_boundary_format="2")) == "2"
    assert formats.message_format(_Request(headers={formats.HEADER: "3"})) == "3"
    with pytest.raises(FormatTooNew):
        formats.check_message(_Request(tool_boundary_format="3"))


def test_failure_code() -> None:
    assert formats.failure_code(FormatTooNew("record", 3)) is ErrorCode.FORMAT_TOO_NEW
    from boundary import StoreError

    assert formats.failure_code(StoreError()) is ErrorCode.STORE_UNAVAILABLE
