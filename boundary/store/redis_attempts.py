"""A call's attempts in Redis: the execute step's claim, the tool's heartbeats, and the
retries that hand the same record to a new attempt. Each is one Lua script on the record (and
the run's pending set, whose score is the call's reap time)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from boundary.models import CanonicalKey
from boundary.store import keys
from boundary.store._redis_common import RedisClient, record_script, script, translated
from boundary.store.base import AttemptState, Claim, ClaimStatus, WriteStatus
from boundary.store.codec import decode_record, from_ms, ms, timed_result, write_status
from boundary.store.codes import ScriptCode

_CLAIM = record_script("claim")
_HEARTBEAT = record_script("heartbeat")
_RETRY = record_script("retry")
_DEFER = record_script("defer")

_CLAIM_CODES = {
    ScriptCode.MISSING: ClaimStatus.MISSING,
    ScriptCode.NOT_PROJECTING: ClaimStatus.SEALED,
    ScriptCode.ALREADY_STORED: ClaimStatus.STORED,
    ScriptCode.SUPERSEDED: ClaimStatus.SUPERSEDED,
    ScriptCode.PAST_DEADLINE: ClaimStatus.PAST_DEADLINE,
}


def _ms(seconds: float | None) -> str | int:
    """A duration in ms for a script, or "" for none."""
    return "" if seconds is None else max(int(seconds * 1000), 1)


def _fraction(progress: float | None) -> str:
    # repr keeps every digit a float has; "" leaves the stored fraction as it is.
    return "" if progress is None else repr(float(progress))


class RedisAttempts:
    """The attempt half of ``RedisCanonicalStore`` (a mixin: the store's own ``claim``,
    ``heartbeat``, ``retry_attempt`` and ``attempt_state``, over its ``client``)."""

    client: RedisClient

    def _register_attempt_scripts(self) -> None:
        self._claim = script(self.client, _CLAIM)
        self._heartbeat = script(self.client, _HEARTBEAT)
        self._retry = script(self.client, _RETRY)
        self._defer = script(self.client, _DEFER)

    def claim(
        self, key: CanonicalKey, *, attempt: int, heartbeat_timeouts: Mapping[str, float]
    ) -> Claim:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        argv: list[str | int] = [attempt, key.identity]
        for tool, seconds in heartbeat_timeouts.items():
            argv += [tool, _ms(seconds)]
        with translated():
            reply: list[Any] = self._claim(keys=run_keys, args=argv)
        code = int(reply[0])
        if code <= 1:
            return Claim(_CLAIM_CODES[ScriptCode(code)])
        fields = dict(zip(reply[1::2], reply[2::2], strict=True))
        return Claim(ClaimStatus.STARTED, decode_record(fields), from_ms(code))

    def heartbeat(
        self,
        key: CanonicalKey,
        *,
        attempt: int,
        progress: float | None,
        message: str | None,
        heartbeat_timeout_s: float | None,
    ) -> WriteStatus:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        argv: list[str | int] = [
            attempt,
            _fraction(progress),
            message or "",
            _ms(heartbeat_timeout_s),
            key.identity,
        ]
        with translated():
            return timed_result(self._heartbeat(keys=run_keys, args=argv))

    def retry_attempt(
        self,
        key: CanonicalKey,
        *,
        attempt: int,
        reap_after_s: float,
        reap_grace_s: float,
        redispatch: bool = False,
        due_at: datetime | None = None,
        unstarted: bool = False,
        handback: bool = False,
    ) -> int | WriteStatus:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        argv: list[str | int] = [
            attempt,
            _ms(reap_after_s),
            key.identity,
            "handbacks" if handback else "redispatches" if redispatch else "retries",
            int(reap_grace_s * 1000),
            "" if due_at is None else ms(due_at),
            "unstarted" if unstarted else "",
        ]
        with translated():
            code = int(self._retry(keys=run_keys, args=argv))
        return code if code > 1 else write_status(code)

    def defer_reap(self, key: CanonicalKey, *, reap_after_s: float, reap_grace_s: float) -> bool:
        run_keys = [keys.record_key(key), keys.pending_key(key.run_id)]
        argv: list[str | int] = [key.identity, _ms(reap_after_s), int(reap_grace_s * 1000)]
        with translated():
            return int(self._defer(keys=run_keys, args=argv)) == ScriptCode.OK

    def attempt_state(self, key: CanonicalKey) -> AttemptState | None:
        record = keys.record_key(key)
        with translated():
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(
                record,
                ["status", "tool_name", "attempt", "started_at", "redispatches", "handbacks"],
            )
            pipe.hexists(record, "raw")
            (status, tool, attempt, started, redispatches, handbacks), has_raw = pipe.execute()
        if status != "PROJECTING" or not tool:
            return None
        return AttemptState(
            tool_name=tool,
            attempt=int(attempt or 1),
            started=bool(started),
            has_raw=bool(has_raw),
            redispatches=int(redispatches or 0),
            handbacks=int(handbacks or 0),
        )
