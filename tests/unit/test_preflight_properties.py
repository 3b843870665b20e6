"""Properties of preflight over arbitrary envelopes: it never raises, it only ever answers with
a preflight code, and what it accepts round-trips and fits the limits."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boundary import (
    Limits,
    RunContext,
    ToolCallEnvelope,
    ToolRegistry,
    ToolSpec,
    canonical_json,
    utf8_size,
)
from boundary.errors import PREFLIGHT_CODES, ErrorCode
from boundary.models import SAFE_ID_PATTERN, is_safe_id
from boundary.preflight import Accepted, Rejected, preflight
from tests.support.helpers import FakeProjector, FakeTool

NOW = datetime(2030, 1, 1, tzinfo=UTC)
RUN_ID = "run-1"
#: Small limits, so that both sides of each limit are reached often.
LIMITS = Limits(max_request_bytes=256, max_json_depth=4)
PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    for name, read_only in (("search", True), ("fetch", True), ("write", False)):
        registry.register(
            ToolSpec(name=name, executor=FakeTool(), projector=FakeProjector(), read_only=read_only)
        )
    return registry


REGISTRY = _registry()

#: Any code point; lone surrogates (rare in hypothesis' defaults) on purpose.
any_char = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=[]),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
)
any_text = st.one_of(st.text(max_size=40), st.text(any_char, max_size=40))
safe_ids = st.from_regex(SAFE_ID_PATTERN, fullmatch=True)


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` seven times in ten: valid values keep later checks reachable."""
    return st.integers(0, 9).flatmap(lambda i: usual if i < 7 else other)


ids = mostly(
    st.one_of(safe_ids, st.sampled_from(["call_1", "call_A.b-9", "a" * 128])),
    st.one_of(st.none(), any_text, st.text(min_size=120, max_size=140)),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
#: Almost JSON: what a model or a buggy framework might send.
loose_scalars = st.one_of(
    json_scalars,
    st.floats(),  # NaN and infinities included
    st.text(any_char, max_size=10),  # lone surrogates included
)
loose_values = st.recursive(
    loose_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.one_of(st.text(any_char, max_size=5), st.integers()), children),
    ),
    max_leaves=12,
)


@st.composite
def encoded_objects(draw: st.DrawFn) -> str | bytes:
    value = draw(json_objects)
    text = json.dumps(
        value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2]))
    )
    return text.encode("utf-8") if draw(st.booleans()) else text


arguments = st.one_of(
    json_objects,
    encoded_objects(),
    st.dictionaries(st.text(max_size=5), loose_values, max_size=4),
    json_values.map(json.dumps),
    any_text,
    st.binary(max_size=60),
    st.integers(),
    st.floats(),
    st.none(),
    st.lists(json_values, max_size=3),
    st.text(max_size=300).map(lambda s: json.dumps({"q": s})),  # near the size limit
)

deadlines = st.one_of(
    st.none(),
    st.timedeltas(min_value=timedelta(hours=-1), max_value=timedelta(hours=1)).map(
        lambda delta: NOW + delta
    ),
)
tool_names = mostly(
    st.sampled_from(["search", "fetch", "write", "unknown"]), st.one_of(st.none(), any_text)
)
all_tools = frozenset({"search", "fetch", "write"})


@st.composite
def runs(draw: st.DrawFn) -> RunContext:
    return RunContext(
        run_id=RUN_ID,
        active=draw(mostly(st.just(True), st.just(False))),
        deadline=draw(mostly(st.none(), deadlines)),
        authorized_tools=draw(
            mostly(
                st.just(all_tools),
                st.sets(st.sampled_from(["search", "fetch", "write", "unknown"])).map(frozenset),
            )
        ),
    )


@st.composite
def envelopes(draw: st.DrawFn) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=draw(mostly(st.just(RUN_ID), st.one_of(st.none(), any_text))),
        tool_call_id=draw(ids),
        tool_name=draw(tool_names),
        arguments=draw(arguments),
    )


def _depth(value: Any) -> int:
    """Nesting of objects and arrays, the top level counted as 1; scalars are 0."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@PROPERTY_SETTINGS
@given(call=envelopes(), run=runs())
def test_preflight_never_raises_and_answers_only_with_preflight_codes(
    call: ToolCallEnvelope, run: RunContext
) -> None:
    # Given any envelope and any run
    # When it is checked
    result = preflight(call, run, REGISTRY, LIMITS, now=NOW)
    # Then the answer is an acceptance or a preflight code, never an exception
    if isinstance(result, Rejected):
        assert result.code in PREFLIGHT_CODES
        # Duplicates, budgets and the store are the store's to judge, not preflight's
        assert result.code not in {
            ErrorCode.DUPLICATE_TOOL_CALL,
            ErrorCode.RUN_BUDGET_EXHAUSTED,
            ErrorCode.TOOL_BUDGET_EXHAUSTED,
            ErrorCode.STORE_UNAVAILABLE,
        }
        return
    assert isinstance(result, Accepted)
    # And an accepted request round-trips, fits the limit, and keeps the exact ids
    assert json.loads(result.request) == result.arguments
    assert utf8_size(result.request) <= LIMITS.max_request_bytes
    assert result.key.tool_call_id == call.tool_call_id
    assert result.key.run_id == run.run_id
    assert result.spec.read_only
    assert result.spec.name in run.authorized_tools
    assert run.active
    assert run.deadline is None or run.deadline > NOW


@PROPERTY_SETTINGS
@given(tool_call_id=ids, run=runs())
def test_only_safe_ids_pass_the_id_check(tool_call_id: str | None, run: RunContext) -> None:
    # Given any id
    call = ToolCallEnvelope(run_id=RUN_ID, tool_call_id=tool_call_id, tool_name="search")
    # When the call is checked
    result = preflight(call, run, REGISTRY, LIMITS, now=NOW)
    # Then it fails the id check exactly when the id is not safe
    refused_id = isinstance(result, Rejected) and result.code is ErrorCode.INVALID_TOOL_CALL_ID
    assert refused_id is not is_safe_id(tool_call_id)


@PROPERTY_SETTINGS
@given(tool_call_id=safe_ids, value=json_objects, form=st.sampled_from(["dict", "text", "bytes"]))
def test_valid_calls_are_accepted_and_round_trip(
    tool_call_id: str, value: dict[str, Any], form: str
) -> None:
    # Given a valid call to an authorized read-only tool in an active run
    text = json.dumps(value, ensure_ascii=False)
    sent: Any = {"dict": value, "text": text, "bytes": text.encode("utf-8")}[form]
    call = ToolCallEnvelope(
        run_id=RUN_ID, tool_call_id=tool_call_id, tool_name="search", arguments=sent
    )
    run = RunContext(run_id=RUN_ID, authorized_tools=frozenset({"search"}))
    # When it is checked
    result = preflight(call, run, REGISTRY, LIMITS, now=NOW)
    # Then it is accepted exactly when it fits the depth and size limits
    too_deep = _depth(value) > LIMITS.max_json_depth
    too_large = utf8_size(canonical_json(value)) > LIMITS.max_request_bytes
    if too_deep:
        assert isinstance(result, Rejected)
        assert result.code in {ErrorCode.INVALID_ARGUMENTS, ErrorCode.REQUEST_TOO_LARGE}
    elif too_large:
        assert isinstance(result, Rejected)
        assert result.code is ErrorCode.REQUEST_TOO_LARGE
    else:
        # And the request is the input, exactly, under the caller's id
        assert isinstance(result, Accepted)
        assert result.key.tool_call_id == tool_call_id
        assert json.loads(result.request) == value == result.arguments
        assert result.request == canonical_json(value)
