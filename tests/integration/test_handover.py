"""The project step of a call whose execute step ran in the same process takes the record it
left (no read), and its seal is refused if the record under those ids is another call's."""

from __future__ import annotations

import json
from datetime import timedelta

import redis

from boundary import EvidenceStatus, InvocationStatus, RedisCanonicalStore, ToolRegistry
from boundary.handover import process_handover
from boundary.steps import ExecuteResult, execute_step, project_step
from boundary.store.base import WriteStatus
from tests.support.helpers import FakeProjector, create_projecting, monitored, register


def test_store_raw_into_returns_the_record_as_a_read_gives_it(
    store: RedisCanonicalStore,
) -> None:
    key = create_projecting(store)
    read = store.get(key)
    assert read is not None
    written, stored = store.store_raw_into(read, '{"hits":[]}')
    assert written is WriteStatus.OK
    # The write time included: equal, field for field, to what the project step would read.
    assert stored == store.get(key)
    # A second write is refused, and nothing is handed back for it.
    assert store.store_raw_into(read, '{"hits":[1]}') == (WriteStatus.ALREADY_STORED, None)


def test_the_project_step_takes_the_handed_over_record_instead_of_reading_it(
    store: RedisCanonicalStore, registry: ToolRegistry, redis_client: redis.Redis
) -> None:
    _, projector = register(registry, projector=FakeProjector())
    key = create_projecting(store)
    assert execute_step(store, registry, key) is ExecuteResult.STORED
    with monitored(redis_client, round_trips=True) as commands:
        outcome = project_step(store, registry, key)
    assert outcome.status is InvocationStatus.READY
    assert outcome.result == {"count": 1}
    # No read of the record (HGETALL, HMGET) sent by the step: only the seal script (which
    # itself reads the fields its seal message carries).
    assert not [c for c in commands if c.split()[0] in ("hgetall", "hmget")], commands
    assert any(c.startswith("evalsha") for c in commands)
    assert projector.seen[0][0] == {"hits": [{"id": 1, "text": "timeout in api"}]}
    record = store.get(key)
    assert record is not None and record.status is InvocationStatus.READY


def test_a_handed_over_record_of_an_earlier_call_with_the_same_ids_is_not_sealed(
    store: RedisCanonicalStore, registry: ToolRegistry
) -> None:
    # Given a record left by an execute step for a call that expired since, and a new call
    # under the same ids, created later, whose raw response was kept by another process
    _, projector = register(registry)
    key = create_projecting(store)
    current = store.get(key)
    assert current is not None
    assert store.store_raw(key, json.dumps({"hits": ["new"]})) is WriteStatus.OK
    earlier = current.model_copy(
        update={
            "raw": json.dumps({"hits": ["old"]}),
            "created_at": current.created_at - timedelta(hours=25),
        }
    )
    process_handover().put(earlier)
    # When its project step runs here
    outcome = project_step(store, registry, key)
    # Then the seal naming the earlier record was refused, and the call was projected from
    # the record the store holds
    assert outcome.status is InvocationStatus.READY
    assert [raw for raw, _ in projector.seen] == [{"hits": ["old"]}, {"hits": ["new"]}]
    record = store.get(key)
    assert record is not None and record.evidence_status is EvidenceStatus.EVIDENCE_FOUND


def test_a_seal_naming_another_creation_time_writes_nothing(store: RedisCanonicalStore) -> None:
    key = create_projecting(store)
    record = store.get(key)
    assert record is not None
    other = record.created_at - timedelta(milliseconds=1)
    sealed = store.seal(key, evidence_status=EvidenceStatus.NO_EVIDENCE, created_at=other)
    assert sealed is WriteStatus.REPLACED
    assert store.get(key) == record
    same = store.seal(key, evidence_status=EvidenceStatus.NO_EVIDENCE, created_at=record.created_at)
    assert same is WriteStatus.OK
