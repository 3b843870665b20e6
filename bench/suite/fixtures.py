"""Sealed runs written through the store's own code, fast: the store's scripts are queued on a
pipeline and sent in batches instead of one round trip each.

``DeferredScripts`` is a client for ``RedisCanonicalStore`` whose EVALSHA answers "done" at
once and queues the call; ``flush`` sends the queue and checks that every script really did
what the store was told. So each record is made by the store's own argument building, keys and
Lua, as ``create``, ``store_raw`` and ``seal`` would make it, at a fraction of the time.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import redis

from bench.peers.tools import NOOP
from boundary import CanonicalKey, EvidenceStatus, RedisCanonicalStore, canonical_json
from boundary.store.base import CreateResult, CreateTerms
from boundary.store.scripts import record_script


def load_script(name: str) -> str:
    """The source of the store's ``lua/<name>.lua`` (the bytes its EVALSHA hashes)."""
    return record_script(name)


#: What each script answers on success, told apart by its SHA1 (as EVALSHA names it).
_DONE: dict[str, Any] = {
    hashlib.sha1(load_script(name).encode()).hexdigest(): done
    for name, done in (("create", [1, "0"]), ("store_raw", 1), ("seal", [1, ""]))
}
#: Calls queued before the pipeline is sent.
BATCH_CALLS = 500


class DeferredScripts(redis.Redis):
    """Queues the store's scripts; see the module docstring."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(connection_pool=client.connection_pool)
        self._pipe = client.pipeline(transaction=False)
        self._shas: list[str] = []

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        self._pipe.evalsha(sha, numkeys, *keys_and_args)
        self._shas.append(sha)
        return _DONE[sha]

    def flush(self) -> None:
        replies = self._pipe.execute(raise_on_error=False)
        for sha, reply in zip(self._shas, replies, strict=True):
            # create: {1, seq}; seal: {1, tool}; store_raw: its write time (epoch ms, > 1).
            done = reply[0] == 1 if isinstance(_DONE[sha], list) else _positive(reply)
            if not done:
                raise RuntimeError(f"a store script did not succeed: {reply!r}")
        self._shas.clear()


def _positive(reply: Any) -> bool:
    return isinstance(reply, int) and reply >= 1


def payload(size: int) -> dict[str, Any]:
    """A raw response whose canonical JSON is about ``size`` bytes."""
    return {"hits": [{"id": 1, "text": "x" * max(size - 30, 0)}]}


#: A call of the no-op tool under no budget, due for the reaper an hour on.
NOOP_CALL: CreateTerms = {
    "tool_name": NOOP,
    "request": "{}",
    "deadline": None,
    "max_pending_s": 3600,
    "reap_grace_s": 0,
    "max_run_calls": None,
    "max_tool_calls": None,
}


def create_noop(store: RedisCanonicalStore, key: CanonicalKey, **terms: Any) -> CreateResult:
    """Creates ``key`` PROJECTING: ``NOOP_CALL`` with ``terms`` instead where given."""
    return store.create(key, **(NOOP_CALL | terms))  # type: ignore[arg-type]


def _request(key: CanonicalKey) -> str:
    return canonical_json({"query": f"q {key.tool_call_id}"})


def batched(
    store: RedisCanonicalStore,
    calls: Iterable[CanonicalKey],
    write: Callable[[RedisCanonicalStore, CanonicalKey], object],
) -> int:
    """``write(batch, key)`` for each call, ``batch`` being ``store`` on ``DeferredScripts``
    (sent every ``BATCH_CALLS`` calls); returns the count."""
    deferred = DeferredScripts(store.client)  # type: ignore[arg-type]
    batch = RedisCanonicalStore(client=deferred, ttl_s=store.ttl_s, limits=store.limits)
    written = 0
    for key in calls:
        write(batch, key)
        written += 1
        if written % BATCH_CALLS == 0:
            deferred.flush()
    deferred.flush()
    return written


def write_sealed(
    store: RedisCanonicalStore,
    calls: Iterable[CanonicalKey],
    *,
    raw_bytes: int = 256,
    result: dict[str, Any] | None = None,
) -> int:
    """Creates, fills and seals READY each call, as the worker would; returns the count."""
    raw = canonical_json(payload(raw_bytes))
    agent_result = canonical_json(result or {"hits": 1, "top": "x" * 40})

    def write(batch: RedisCanonicalStore, key: CanonicalKey) -> None:
        create_noop(batch, key, request=_request(key))
        batch.store_raw(key, raw)
        batch.seal(key, evidence_status=EvidenceStatus.EVIDENCE_FOUND, agent_result=agent_result)

    return batched(store, calls, write)


def write_pending(
    store: RedisCanonicalStore, calls: Iterable[CanonicalKey], *, deadline: datetime
) -> int:
    """Creates each call PROJECTING (a call a worker never finished), due for the reaper at
    its ``deadline``; returns the count."""
    return batched(
        store,
        calls,
        lambda batch, key: create_noop(batch, key, request=_request(key), deadline=deadline),
    )


#: The example RAG tool whose sealed runs ``write_rag_runs`` writes (its projector:
#: ``projectors.rag``), and the registry that holds it.
RAG_TOOL = "search_docs"
EXAMPLE_TOOLS = "tasks.demo.tools:registry"


def rag_raw_response(n: int) -> str:
    """A RAG tool's raw response: three ranked hits of a few hundred bytes."""
    hits = [
        {
            "doc_id": f"doc-{n}-{i}",
            "score": 1.0 / (i + 1),
            "title": f"Runbook {i}",
            "text": f"Retry timeouts on the payments api after deploy {n}. " * 4,
        }
        for i in range(3)
    ]
    return canonical_json({"query": "payments timeouts", "hits": hits})


def write_rag_runs(
    store: RedisCanonicalStore, runs: int, calls: int, *, prefix: str = "b8-run"
) -> float:
    """Writes ``runs`` runs (``<prefix>-<n>``) of ``calls`` calls of ``RAG_TOOL``, sealed
    READY with an old projection and their raw responses kept (what a re-projection with
    the current projector reads): seconds taken."""
    sealed = canonical_json({"hits": [{"doc_id": "doc", "snippet": "old"}]})
    request = canonical_json({"query": "payments timeouts"})

    def keys() -> Iterator[CanonicalKey]:
        for r in range(runs):
            for c in range(calls):
                yield CanonicalKey(run_id=f"{prefix}-{r}", tool_call_id=f"call_{c}")

    def write(batch: RedisCanonicalStore, key: CanonicalKey) -> None:
        create_noop(batch, key, tool_name=RAG_TOOL, request=request)
        batch.store_raw(key, rag_raw_response(int(key.tool_call_id.rsplit("_", 1)[1])))
        batch.seal(
            key,
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            agent_result=sealed,
            projector_version="1",
        )

    began = time.perf_counter()
    batched(store, keys(), write)
    return time.perf_counter() - began


def ensure_scripts(store: RedisCanonicalStore) -> None:
    """Loads the store's scripts on the server (a pipeline cannot answer NOSCRIPT itself)."""
    key = CanonicalKey(run_id="bench-scripts", tool_call_id="load")
    create_noop(store, key, max_pending_s=60)
    store.store_raw(key, "{}")
    store.seal(key, evidence_status=EvidenceStatus.NO_EVIDENCE, agent_result="{}")
