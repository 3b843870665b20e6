"""A publish to a broker that stops answering is not sent again: the paused Redis runs the
first ``LPUSH`` when it wakes, so a retry that got through afterwards queued a second copy of
the call's execute message, and the two copies ran the tool twice at once (the chaos run).
Now the call ends ``DISPATCH_FAILED`` and at most one copy is ever queued (the sealed call
makes a worker skip it)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import redis
from celery import Celery

from boundary import ErrorCode, Submission, ToolCallEnvelope
from tasks import CeleryDispatcher
from tasks.runtime import get_runtime
from tasks.wiring.app import TOOLS_QUEUE, create_app
from tasks.wiring.publisher import publish_attempt_timeout_s
from tests.celery.conftest import RUN
from tests.conftest import celery_test_settings
from tests.support.servers import redis_server

#: Bound of the wait for the submit (it ends within the publish timeout; a hang would not).
GIVE_UP_S = 60.0


def copies_queued(broker: redis.Redis, task_id: str) -> int:
    """How many messages of ``task_id`` wait in the tools queue (no worker consumes it)."""
    messages = broker.lrange(TOOLS_QUEUE, 0, -1)
    return sum(1 for m in messages if json.loads(m)["headers"]["id"] == task_id)


def test_a_publish_the_paused_broker_did_not_answer_is_not_sent_again(
    redis_client: redis.Redis, celery_session_app: Celery, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "broker") as broker:
        settings = celery_test_settings(broker_url=broker.url, publish_timeout_s=2.0)
        app = create_app(settings, name="tests_publish_once")
        boundary = get_runtime().boundary(CeleryDispatcher(app))
        call = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id="publish-once", tool_name="lookup", arguments={}
        )
        # The dispatcher's connection is open (a first publish), so the next LPUSH is sent
        warm = ToolCallEnvelope(
            run_id=RUN.run_id, tool_call_id="publish-warm", tool_name="lookup", arguments={}
        )
        assert boundary.submit(warm, RUN).accepted
        # Given a broker that stops answering while a call is submitted
        submissions: list[Submission] = []
        thread = threading.Thread(target=lambda: submissions.append(boundary.submit(call, RUN)))
        broker.pause()
        thread.start()
        # When it answers again while the publish could still be tried again
        time.sleep(publish_attempt_timeout_s(app) * 1.5)
        broker.resume()
        thread.join(GIVE_UP_S)
        assert submissions, "the submit did not return"
        # Then at most one copy of the call's execute message was queued, and a call that
        # was not confirmed ended DISPATCH_FAILED
        submission = submissions[0]
        queued = copies_queued(broker.client(), f"{RUN.run_id}:publish-once:execute")
        assert queued <= 1
        if not submission.accepted:
            assert submission.outcome is not None
            assert submission.outcome.error_code is ErrorCode.DISPATCH_FAILED
        print(f"accepted={submission.accepted} copies queued={queued}")
