"""The reaper's figures, through the OpenTelemetry metrics API (the SDK's in-memory reader)."""

from __future__ import annotations

from boundary import RedisCanonicalStore
from boundary.reaper import reap_once
from tests.support import otel
from tests.support.helpers import create_terms, key_of


def test_reaper_seals_and_reprojections_are_counted(store: RedisCanonicalStore) -> None:
    # Given two calls past their reap time, one whose raw response is kept
    otel.install()
    sealed_before = otel.count("tool_boundary.reaper.seals")
    reprojected_before = otel.count("tool_boundary.reaper.reprojections")
    terms = create_terms(max_pending_s=0, reap_grace_s=0)
    store.create(key_of("lost", "reaped-run"), **terms)
    kept = key_of("kept", "reaped-run")
    store.create(kept, **terms)
    store.store_raw(kept, '{"hits": []}')
    sent: list[str] = []

    # When the reaper passes
    reaped = reap_once(
        store,
        lambda key: sent.append(key.tool_call_id),
        retry_after_s=60,
        max_reprojections=2,
    )

    # Then one seal and one re-projection are counted
    assert (reaped.sealed, reaped.reprojected, sent) == (1, 1, ["kept"])
    assert otel.count("tool_boundary.reaper.seals") - sealed_before == 1
    assert otel.count("tool_boundary.reaper.reprojections") - reprojected_before == 1
