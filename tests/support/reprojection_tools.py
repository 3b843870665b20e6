"""A tool whose projector has two versions, for the re-projection tests: a worker started
with ``TB_TEST_PROJECTOR_V=2`` (``TOOL_BOUNDARY_TOOLS=tests.support.reprojection_tools:registry``)
runs version 2, as a fleet does after a projector upgrade."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from boundary import EvidenceStatus, Projection, ToolRegistry, ToolSpec

TOOL = "lookup"
#: Only the raw response holds it: no projector of either version shows it.
SECRET = "sk-live-REPROJECT-51c0de"
#: The environment variable that selects the projector's version in a process.
VERSION_ENV = "TB_TEST_PROJECTOR_V"
#: A file that version 2 waits for (``hold`` queries), and one it kills its process for once
#: (``die`` queries): the paths come from the environment.
HOLD_ENV = "TB_TEST_HOLD_FILE"
DIE_ENV = "TB_TEST_DIE_MARKER"
#: A Redis URL: version 2 then keeps a gauge of the projections running at once across every
#: worker (``GAUGE_*`` keys), and its high-water mark, in Redis's own order of events. A
#: chunk projects its records one after another, so the mark is at most the chunks running
#: at once.
GAUGE_ENV = "TB_TEST_GAUGE_URL"
GAUGE_LIVE = "tb:test:gauge:live"
GAUGE_MAX = "tb:test:gauge:max"
GAUGE_SEEN = "tb:test:gauge:seen"
#: Set while a ``hold`` query holds its projector.
GAUGE_HOLDING = "tb:test:gauge:holding"
#: How long each projection stays in the gauge, seconds: long enough for two chunks running
#: at once to be in it together.
GAUGE_PAUSE_S = 0.05
_ENTER = """
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
redis.call('INCR', KEYS[3])
return n
"""
_gauge: list[Any] = []


def _gauge_client() -> Any:
    url = os.environ.get(GAUGE_ENV)
    if not url:
        return None
    if not _gauge:
        import redis

        _gauge.append(redis.Redis.from_url(url))
    return _gauge[0]


def lookup(arguments: dict[str, Any]) -> dict[str, Any]:
    """Hits for a query: ``score`` decides version 2's evidence."""
    query = str(arguments.get("query", ""))
    hits = [] if query.startswith("none") else [{"id": f"doc-{query}", "score": arguments["score"]}]
    return {"hits": hits, "token": SECRET}


class LookupV1:
    """Evidence whenever there are hits."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        if not raw["hits"]:
            return Projection(
                evidence_status=EvidenceStatus.NO_EVIDENCE, scope={"q": request["query"]}
            )
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"first": raw["hits"][0]["id"]},
            scope={"q": request["query"]},
        )


class LookupV2(LookupV1):
    """Evidence only for hits scored 0.5 or more (a low score is now NO_EVIDENCE), the count
    of hits in the result, and a bug: ``boom`` queries raise."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        gauge = _gauge_client()
        if gauge is None:
            return self._project(raw, request)
        holding = request["query"] == "hold"
        gauge.eval(_ENTER, 3, GAUGE_LIVE, GAUGE_MAX, GAUGE_SEEN)
        try:
            if holding:
                gauge.set(GAUGE_HOLDING, 1)
            time.sleep(GAUGE_PAUSE_S)
            return self._project(raw, request)
        finally:
            if holding:
                gauge.delete(GAUGE_HOLDING)
            gauge.decr(GAUGE_LIVE)

    def _project(self, raw: Any, request: dict[str, Any]) -> Projection:
        query = request["query"]
        if query == "boom":
            raise RuntimeError(f"projector v2 broke on {raw['token']}")
        if query == "hold":
            hold = Path(os.environ[HOLD_ENV])
            deadline = time.monotonic() + 60
            # Not wait_until: a projector's body in the worker, which goes on after 60 s
            while not hold.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if query == "die":
            marker = Path(os.environ[DIE_ENV])
            if not marker.exists():
                marker.touch()
                os.killpg(os.getpgid(0), signal.SIGKILL)  # the whole worker, at once
        hits = raw["hits"]
        if not hits or hits[0]["score"] < 0.5:
            return Projection(evidence_status=EvidenceStatus.NO_EVIDENCE, scope={"q": query})
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"first": hits[0]["id"], "count": len(hits)},
            scope={"q": query},
        )


def make_registry(version: str) -> ToolRegistry:
    projector = LookupV2() if version == "2" else LookupV1()
    tools = ToolRegistry()
    tools.register(
        ToolSpec(
            name=TOOL,
            executor=lookup,
            projector=projector,
            read_only=True,
            projector_version=version,
        )
    )
    return tools


registry = make_registry(os.environ.get(VERSION_ENV, "1"))
