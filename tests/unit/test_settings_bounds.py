"""Settings that would make Celery or Redis misbehave are refused when they are read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.settings import Settings
from tasks.wiring.app import celery_config


@pytest.mark.parametrize("ttl_s", [0, 0.2, 0.999])
def test_a_ttl_under_one_second_is_refused(ttl_s: float) -> None:
    # Celery's result_expires is whole seconds and 0 means "never expire"
    with pytest.raises(ValidationError):
        Settings(ttl_s=ttl_s)


@pytest.mark.parametrize(("ttl_s", "expires"), [(1, 1), (1.2, 2), (86400, 86400)])
def test_celery_results_expire_no_sooner_than_the_records(ttl_s: float, expires: int) -> None:
    assert celery_config(Settings(ttl_s=ttl_s))["result_expires"] == expires


def test_task_sent_events_are_on_unless_a_setting_turns_them_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Flower's SENT state needs them: on by default
    assert celery_config(Settings())["task_send_sent_event"] is True
    # TOOL_BOUNDARY_TASK_SENT_EVENTS=false turns them off (and nothing else)
    monkeypatch.setenv("TOOL_BOUNDARY_TASK_SENT_EVENTS", "false")
    off = celery_config(Settings())
    assert off["task_send_sent_event"] is False
    assert off["worker_send_task_events"] is True
