"""Settings that would make Celery or Redis misbehave are refused when they are read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tasks.app import celery_config
from tasks.settings import Settings


@pytest.mark.parametrize("ttl_s", [0, 0.2, 0.999])
def test_a_ttl_under_one_second_is_refused(ttl_s: float) -> None:
    # Celery's result_expires is whole seconds and 0 means "never expire"
    with pytest.raises(ValidationError):
        Settings(ttl_s=ttl_s)


@pytest.mark.parametrize(("ttl_s", "expires"), [(1, 1), (1.2, 2), (86400, 86400)])
def test_celery_results_expire_no_sooner_than_the_records(ttl_s: float, expires: int) -> None:
    assert celery_config(Settings(ttl_s=ttl_s))["result_expires"] == expires
