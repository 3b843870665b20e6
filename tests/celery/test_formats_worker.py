"""Format versions with a real worker (``boundary.formats``): a task message or a record of a
newer format fails that call with ``FORMAT_TOO_NEW`` (sealed, one log line, no traceback),
and a worker started against a store that holds a newer incompatible format exits 2."""

from __future__ import annotations

import pytest
import redis
from celery import Celery

from boundary import ErrorCode, ToolBoundary, formats
from boundary.store import keys
from tasks.exits import EXIT_USAGE
from tasks.runtime import get_runtime
from tasks.wiring.app import EXECUTE
from tests.celery.conftest import RUN
from tests.celery.workers import run_stopping_worker, settings_env
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, redis_url
from tests.support.helpers import create_projecting, envelope, key_of, wait_until


def test_a_task_message_of_a_newer_format_fails_its_call_with_the_code(
    celery_boundary: ToolBoundary, celery_session_app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a PROJECTING call, and its execute message sent by a (future) version of format 3
    store = get_runtime().store
    key = create_projecting(store, "fmt_msg", run_id=RUN.run_id, tool_name="lookup")
    celery_session_app.send_task(
        EXECUTE,
        args=(key.run_id, key.tool_call_id),
        queue="tools",
        headers={formats.HEADER: "3"},
    )

    # Then the worker seals the call FORMAT_TOO_NEW, and a caller gets the code
    def sealed() -> bool:
        record = store.get(key, with_raw=False)
        return record is not None and record.error_code is ErrorCode.FORMAT_TOO_NEW

    wait_until(sealed, "the call sealed FORMAT_TOO_NEW")
    outcome = celery_boundary.outcome(key.run_id, key.tool_call_id, timeout=1)
    assert outcome.error_code is ErrorCode.FORMAT_TOO_NEW
    assert "task message of format 3 refused" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_record_of_a_newer_format_fails_the_call_for_the_worker_and_the_caller(
    celery_boundary: ToolBoundary, celery_session_app: Celery, redis_client: redis.Redis
) -> None:
    # Given a call whose record a (future) version of format 3 wrote
    store = get_runtime().store
    key = create_projecting(store, "fmt_rec", run_id=RUN.run_id, tool_name="lookup")
    redis_client.hset(keys.record_key(key), "format", "3")

    # Then a caller's read fails with the code (the record is not guessed at)
    outcome = celery_boundary.outcome(key.run_id, key.tool_call_id, timeout=0.2)
    assert outcome.error_code is ErrorCode.FORMAT_TOO_NEW

    # And this version's worker refuses it too: the call is sealed with the code
    celery_session_app.send_task(EXECUTE, args=(key.run_id, key.tool_call_id), queue="tools")
    wait_until(
        lambda: redis_client.hget(keys.record_key(key), "error_code") == "FORMAT_TOO_NEW",
        "the call sealed FORMAT_TOO_NEW",
    )


def test_records_of_this_and_the_previous_format_run(
    celery_boundary: ToolBoundary, redis_client: redis.Redis
) -> None:
    # A record written now carries the format
    call = envelope("fmt_new", '{"query": "a"}', run_id=RUN.run_id, tool_name="lookup")
    assert celery_boundary.invoke(call, RUN, timeout=20).error_code is None
    record = keys.record_key(key_of("fmt_new", RUN.run_id))
    assert redis_client.hget(record, "format") == str(formats.CURRENT)

    # And one as 0.5.0 wrote it (no field) runs all the same
    store = get_runtime().store
    key = create_projecting(store, "fmt_old", run_id=RUN.run_id, tool_name="lookup")
    redis_client.hdel(keys.record_key(key), "format")
    celery_boundary.dispatcher.dispatch(key)
    outcome = celery_boundary.outcome(key.run_id, key.tool_call_id, timeout=20)
    assert outcome.error_code is None, outcome


def test_a_worker_against_a_store_of_a_newer_incompatible_format_exits_2(
    redis_client: redis.Redis,
) -> None:
    # Given a store whose marker says a version of format 4, readable from format 3, wrote it
    redis_client.hset(formats.FORMATS_KEY, mapping={"written": 4, "readers_from": 3})
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))

    # When a worker of this version starts
    done = run_stopping_worker(settings_env(settings), "-l", "INFO")

    # Then it says so in one line and exits 2
    assert done.returncode == EXIT_USAGE, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(ours) == 1 and "format 4" in ours[0] and "upgrade this worker" in ours[0]
    assert "Traceback" not in done.stdout + done.stderr


def test_a_worker_records_its_format_in_the_store(redis_client: redis.Redis) -> None:
    assert formats.check_store(redis_client) is None
    assert redis_client.hgetall(formats.FORMATS_KEY) == {
        "written": str(formats.CURRENT),
        "readers_from": str(formats.PREVIOUS),
    }
    # A newer compatible version's marker (readers_from 1) is kept and lets it start.
    redis_client.hset(formats.FORMATS_KEY, mapping={"written": 3, "readers_from": 1})
    assert formats.check_store(redis_client) is None
    assert redis_client.hget(formats.FORMATS_KEY, "written") == "3"
