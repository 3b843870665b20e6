"""``Settings.project_in_line`` on a real worker subprocess that consumes the tools queue
only: a call still ends READY (projected on the execute task's thread) and sends no project
task, which would otherwise wait forever on the unconsumed projections queue; an outcome that
is an ERROR still sends its project task, so monitoring lists it among the failed tasks.
With it off (``TOOL_BOUNDARY_PROJECT_IN_LINE=false``) the worker keeps the raw response and
sends the chained project task for the projections queue's workers, READY or not."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery

from boundary import CanonicalKey, ToolBoundary, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import PROJECTIONS_QUEUE, TOOLS_QUEUE, create_app
from tests.celery.conftest import RUN
from tests.celery.workers import celery_process, worker_args
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url
from tests.support.helpers import wait_until

pytestmark = pytest.mark.slow

#: Longest wait for one call's outcome, seconds (a bound, not a timing assertion).
CALL_TIMEOUT_S = 30.0


@pytest.fixture
def tools_only_worker(
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
    celery_session_app: Celery,
    tmp_path: Path,
) -> Iterator[tuple[ToolBoundary, redis.Redis]]:
    """A boundary over a worker that consumes ``tools`` only, on a broker DB of its own
    (which the test reads); it projects in line unless the test's parameter says False."""
    in_line = getattr(request, "param", True)
    settings = celery_test_settings(
        broker_url=redis_url(SUBPROCESS_BROKER_DB), project_in_line=in_line
    )
    broker = flush_db(SUBPROCESS_BROKER_DB)
    app = create_app(settings, name="tests_in_line")
    args = [TOOLS_QUEUE if arg == "tools,projections" else arg for arg in worker_args("in-line")]
    with celery_process(settings, *args, log=tmp_path / "worker.log"):
        yield get_runtime().boundary(CeleryDispatcher(app)), broker
    broker.flushdb()


#: Longest wait for the worker to ack its execute task after the call's seal, seconds.
ACK_TIMEOUT_S = 10.0


def _waiting_projections(broker: redis.Redis) -> int:
    """Messages on the projections queue (and its priority lists, if any), once the worker
    acked every message it took: the execute task sends its chained project task, if it
    does, before its late ack, and the call's waiter wakes at the seal, before either."""
    wait_until(
        lambda: not broker.hlen("unacked"),
        "the worker to ack its execute task",
        ACK_TIMEOUT_S,
        every=0.05,
    )
    return sum(int(broker.llen(name)) for name in broker.scan_iter(f"{PROJECTIONS_QUEUE}*"))


def _envelope(tool: str) -> ToolCallEnvelope:
    return ToolCallEnvelope(
        run_id=RUN.run_id,
        tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
        tool_name=tool,
        arguments={"query": "in line"},
    )


def test_a_call_projected_in_line_ends_ready_and_sends_no_project_task(
    tools_only_worker: tuple[ToolBoundary, redis.Redis],
) -> None:
    boundary, broker = tools_only_worker

    # When a call runs on a worker that projects in line and serves no projections queue
    envelope = _envelope("lookup")
    outcome = boundary.invoke(envelope, RUN, timeout=CALL_TIMEOUT_S)

    # Then it ends READY with its projected result, and no project task was sent
    assert outcome.status == "READY", outcome
    assert outcome.result is not None
    assert _waiting_projections(broker) == 0
    # And the record kept the tool's complete raw response, written with the seal
    record = boundary.store.get(CanonicalKey(run_id=RUN.run_id, tool_call_id=envelope.tool_call_id))
    assert record is not None and record.status == "READY"
    assert record.raw is not None and json.loads(record.raw)


def test_an_error_projected_in_line_still_sends_its_project_task(
    tools_only_worker: tuple[ToolBoundary, redis.Redis],
) -> None:
    boundary, broker = tools_only_worker

    # When the projector of a call projected in line raises
    envelope = _envelope("bad_projector")
    outcome = boundary.invoke(envelope, RUN, timeout=CALL_TIMEOUT_S)

    # Then the call is sealed ERROR in line, and its project task still went out (for
    # monitoring: it reports the sealed ERROR as a failed task), to report the seal only,
    # not to project the call again
    assert outcome.status == "ERROR"
    assert outcome.error_code == "PROJECTION_FAILED"
    # with the tool's raw response kept, for a re-projection
    key = CanonicalKey(run_id=RUN.run_id, tool_call_id=envelope.tool_call_id)
    record = boundary.store.get(key)
    assert record is not None and record.raw is not None
    assert _waiting_projections(broker) == 1
    (message,) = [
        json.loads(raw)
        for name in broker.scan_iter(f"{PROJECTIONS_QUEUE}*")
        for raw in broker.lrange(name, 0, -1)
    ]
    assert message["headers"]["task"] == "tool_boundary.project"
    assert message["headers"]["kwargsrepr"] == "{'report': True}"
    _args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert kwargs == {"report": True}


@pytest.mark.parametrize("tools_only_worker", [False], indirect=True)
def test_with_in_line_projection_off_the_chained_project_task_goes(
    tools_only_worker: tuple[ToolBoundary, redis.Redis],
) -> None:
    boundary, broker = tools_only_worker
    envelope = _envelope("lookup")
    key = CanonicalKey(run_id=envelope.run_id, tool_call_id=envelope.tool_call_id)

    # When a call runs on a worker that does not project in line and serves no projections
    # queue
    assert boundary.submit(envelope, RUN).accepted

    # Then its raw response is kept, the record waits PROJECTING for its project step, and
    # that step's task waits on the projections queue
    wait_until(
        lambda: (
            (kept := boundary.store.get(key, with_raw=True)) is not None and kept.raw is not None
        ),
        "the tool's raw response to be kept",
        CALL_TIMEOUT_S,
        every=0.05,
    )
    assert _waiting_projections(broker) == 1
    record = boundary.store.get(key, with_raw=False)
    assert record is not None and record.status == "PROJECTING"
