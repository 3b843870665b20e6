"""Opened runs in Redis: a run's policy kept under its id, so a server (MCP) names a run by id
and a request cannot bring its own policy."""

from __future__ import annotations

import json
from collections.abc import Callable

from pydantic import ValidationError

from boundary.errors import ErrorCode, StoreError
from boundary.limits import canonical_json
from boundary.models import SAFE_ID, RunContext
from boundary.store import keys
from boundary.store._redis_common import RedisClient, record_script, script, translated
from boundary.store.base import OpenRunStatus
from boundary.store.codes import ScriptCode

_OPEN_RUN = record_script("open_run")
_CLOSE_RUN = record_script("close_run")

_OPEN_CODES = {
    ScriptCode.OK: OpenRunStatus.OPENED,
    ScriptCode.UNCHANGED: OpenRunStatus.ALREADY_OPEN,
    ScriptCode.CLOSED: OpenRunStatus.CLOSED,
    ScriptCode.CONFLICT: OpenRunStatus.CONFLICT,
}


def policy_json(run: RunContext) -> str:
    """The run's canonical JSON: equal policies give equal text (sets are sorted)."""
    fields = run.model_dump(mode="json")
    fields["authorized_tools"] = sorted(fields["authorized_tools"])
    # Left out at their defaults, so a run opened before they existed keeps its text.
    if fields["tenant"] is None:
        del fields["tenant"]
    if fields["priority"] == 0:
        del fields["priority"]
    return canonical_json(fields)


class RedisRuns:
    """The run half of ``RedisCanonicalStore``: one hash per opened run (``keys.run_key``)."""

    def __init__(self, client: RedisClient, ttl_s: float, now_ms: Callable[[], int]) -> None:
        self._client = client
        self._ttl_ms = int(ttl_s * 1000)
        self._now_ms = now_ms
        self._open = script(client, _OPEN_RUN)
        self._close = script(client, _CLOSE_RUN)

    def open_run(self, run: RunContext) -> OpenRunStatus:
        if SAFE_ID.fullmatch(run.run_id) is None:
            raise ValueError("run_id is not a safe identifier")
        argv: list[str | int] = [policy_json(run), self._now_ms(), self._ttl_ms]
        with translated():
            code = int(self._open(keys=[keys.run_key(run.run_id)], args=argv))
        return _OPEN_CODES[ScriptCode(code)]

    def get_run(self, run_id: str) -> RunContext | None:
        if SAFE_ID.fullmatch(run_id) is None:
            return None
        with translated():
            values: list[str | None] = self._client.hmget(  # type: ignore[assignment]
                keys.run_key(run_id), ["state", "policy"]
            )
        state, policy = values
        if state != "open" or policy is None:
            return None
        try:
            return RunContext.model_validate(json.loads(policy))
        except (ValueError, ValidationError):
            # A hash this code did not write: refuse it rather than guess.
            raise StoreError(ErrorCode.STORE_UNAVAILABLE) from None

    def close_run(self, run_id: str) -> bool:
        if SAFE_ID.fullmatch(run_id) is None:
            return False
        with translated():
            code = int(self._close(keys=[keys.run_key(run_id)], args=[self._now_ms()]))
        return code == ScriptCode.OK
