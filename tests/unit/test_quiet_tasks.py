"""The tasks sent without their task-sent event (annotated ``send_events: False``) are read
once per ``task_annotations`` value, and again when the setting is replaced."""

from __future__ import annotations

from tasks.settings import Settings
from tasks.wiring.app import REAP, create_app
from tasks.wiring.results import _quiet_tasks


def test_the_quiet_tasks_are_read_once_and_again_when_the_annotations_are_replaced() -> None:
    # Given an app whose reaper runs send no events (the default)
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0", broker_url="memory://", result_backend="cache+memory://"
    )
    app = create_app(settings, name="tests_quiet_tasks")

    # Then the reaper is quiet, and asking again gives the very same answer (not read again)
    first = _quiet_tasks(app)
    assert REAP in first
    assert _quiet_tasks(app) is first

    # When the setting is replaced (configure, conf.update) with one that lets it speak
    app.conf.update(task_annotations={REAP: {"send_events": True}})

    # Then the new value is read
    assert _quiet_tasks(app) == frozenset()
