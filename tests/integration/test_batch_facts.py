"""A batch of runs' facts (what the ``project_runs`` task answers) is built from the records'
fields as read, without a model per record (``tasks.views.observe_runs_text``): on a store of
every kind of record, each line the CLI writes and its summary are byte for byte what the
model path gives (``observe_runs``, the lines before this fast path)."""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from boundary import (
    ErrorCode,
    EvidenceStatus,
    Limits,
    RedisCanonicalStore,
    canonical_json,
)
from boundary.store import keys
from tasks.cli.common import dumps
from tasks.views import observe_run, observe_runs, observe_runs_text
from tasks.wiring.reproject import BatchSummary
from tests.support.helpers import create_projecting, key_of

FOUND, NONE, ERROR = (
    EvidenceStatus.EVIDENCE_FOUND,
    EvidenceStatus.NO_EVIDENCE,
    EvidenceStatus.ERROR,
)


def sealed(
    store: RedisCanonicalStore,
    run_id: str,
    call_id: str,
    evidence: EvidenceStatus = FOUND,
    result: Any = None,
    **terms: Any,
) -> None:
    key = create_projecting(store, call_id, run_id=run_id)
    store.store_raw(key, '{"raw":"only for the harness"}')
    if evidence is ERROR:
        store.seal(key, evidence_status=ERROR, error_code=ErrorCode.TOOL_EXECUTION_FAILED)
        return
    agent_result = canonical_json({"n": call_id, "text": "é ✓ \u2028", "x": [1.5, 2e20]})
    store.seal(
        key,
        evidence_status=evidence,
        agent_result=agent_result if result is None else result,
        **terms,
    )


def member(run_id: str, call_id: str, expires_in_s: float) -> str:
    return f"{run_id}:{call_id}:{int((time.time() + expires_in_s) * 1000)}"


def varied_store(store: RedisCanonicalStore, redis_client: redis.Redis) -> list[str]:
    """Runs holding every kind of record and member; the ids of a chunk that names them."""
    # A long run: evidence and negative facts, more than the bounds let through.
    for n in range(40):
        evidence = NONE if n % 3 == 0 else FOUND
        sealed(store, "run-long", f"c{n:02d}", evidence, scope='{"q":"é"}', projector_version="2")
    # A run of one of each kind.
    run = "run-mixed"
    sealed(store, run, "ready")
    sealed(store, run, "negative", NONE, scope=canonical_json({"query": "nothing"}))
    sealed(store, run, "failed", ERROR)
    create_projecting(store, "running", run_id=run)  # in flight: pending, not indexed
    sealed(store, run, "projecting-indexed")
    redis_client.hset(
        keys.record_key(key_of("projecting-indexed", run)),
        mapping={"status": "PROJECTING", "evidence_status": ""},
    )
    sealed(store, run, "deleted")
    redis_client.delete(keys.record_key(key_of("deleted", run)))
    redis_client.zadd(keys.progress_key(run), {member(run, "gone", -60): 20})  # expired
    redis_client.zadd(keys.progress_key(run), {member("run-long", "c01", 600): 21})  # foreign
    sealed(store, run, "moved")
    redis_client.hset(keys.record_key(key_of("moved", run)), "run_id", "run-long")
    for n, fields in enumerate(
        [
            {"status": "DONE"},
            {"seq": "first"},
            {"agent_result": "{not json"},
            {"evidence_status": "MAYBE"},
            {"error_code": "NOT_A_CODE"},
            {"created_at": "yesterday"},
            {"attempt": "two"},
            {"diagnostic": "{not a diagnostic"},
            {"agent_result": '{"b": 1,  "a": [1.0, 1e3, "\\u00e9\\/"], "a": 2}'},
            {"agent_result": '{"x": NaN, "y": -Infinity}'},
            {"agent_result": "", "scope": ""},
            {"projector_version": ""},
        ]
    ):
        call_id = f"odd{n}"
        sealed(store, run, call_id)
        redis_client.hset(keys.record_key(key_of(call_id, run)), mapping=fields)
    for n, text in enumerate(["garbage", f"{run}:c{{9}}:1", f"{run}:c9:not-a-time"]):
        redis_client.zadd(keys.progress_key(run), {text: 30 + n})
    # A run whose facts hold non-ASCII ids of tools and long results.
    sealed(store, "run-wide", "w1", result=canonical_json({"text": "x" * 3000}))
    sealed(store, "run-wide", "w2", result=canonical_json(["ü", {"z": None, "a": True}]))
    return ["run-long", "run-mixed", "run-nobody", "run{bad}", "run-wide", "run-mixed"]


def cli_bytes(text: str) -> tuple[list[str], dict[str, Any]]:
    """The lines the CLI writes of a chunk's text, and its summary."""
    lines = json.loads(text)
    summary = BatchSummary()
    for line in lines:
        summary.add(line)
    return [dumps(line) for line in lines], summary.as_dict()


def test_a_chunks_lines_and_summary_are_byte_for_byte_the_model_paths(
    redis_client: redis.Redis,
) -> None:
    # Given a store of every kind of record, with bounds that cut the long run
    store = RedisCanonicalStore(
        client=redis_client, ttl_s=600, limits=Limits(max_facts=25, max_facts_bytes=6000)
    )
    chunk = varied_store(store, redis_client)

    # When the chunk is projected from the fields as read, and through the model
    fast = observe_runs_text(store, chunk)
    model = json.dumps(observe_runs(store, chunk), ensure_ascii=False, separators=(",", ":"))

    # Then the CLI writes the same bytes, and the same summary, either way
    assert cli_bytes(fast) == cli_bytes(model)
    assert json.loads(fast) == json.loads(model)
    lines, summary = cli_bytes(fast)
    assert len(lines) == len(chunk)
    for run_id, line in zip(chunk, json.loads(fast), strict=True):
        if run_id != "run{bad}":
            assert line == observe_run(store, run_id).model_dump(mode="json")
    # ... and the store held every case: cut facts, negatives, and each reason
    assert summary["omitted"] > 0 and summary["negative"] > 0 and summary["evidence"] > 0
    assert set(summary["excluded"]) == {"cross_run", "error", "expired", "missing", "projecting"}
    assert summary["failed"] == {"INVALID_RUN_ID": 1}


def test_a_chunk_of_runs_with_no_records_gives_empty_lines(redis_client: redis.Redis) -> None:
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)

    text = observe_runs_text(store, ["run-a", "run-b"])

    assert json.loads(text) == [
        {"run_id": "run-a", "facts": [], "excluded": {}, "omitted": 0},
        {"run_id": "run-b", "facts": [], "excluded": {}, "omitted": 0},
    ]
    assert observe_runs_text(store, []) == "[]"
