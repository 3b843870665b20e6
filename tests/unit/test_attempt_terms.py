"""A worker's execute steps share one ``AttemptTerms``, made again only when the sender or a
setting it carries changes (it is read on every call)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.worker import process as calls


def test_the_terms_are_made_once_and_follow_their_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = SimpleNamespace(max_pending_s=30.0, reap_grace_s=5.0, heartbeat_interval_s=1.0)
    monkeypatch.setattr(calls, "get_runtime", lambda: SimpleNamespace(settings=settings))
    monkeypatch.setattr(calls, "_terms", None)
    # The process's sender is made on first use: the test's own goes when it ends (one kept
    # would send later tests' calls to the broker configured now, not to theirs).
    monkeypatch.setattr(calls, "_sender", None)
    first = calls.attempt_terms()
    assert calls.attempt_terms() is first
    assert (first.max_pending_s, first.reap_grace_s, first.heartbeat_interval_s) == (30, 5, 1)
    assert first.sender is calls.attempt_sender() and first.project_now is not None
    settings.heartbeat_interval_s = 2.5
    second = calls.attempt_terms()
    assert second is not first and second.heartbeat_interval_s == 2.5
    assert calls.attempt_terms() is second
    monkeypatch.setattr(calls, "_sender", None)  # another sender: new terms carrying it
    third = calls.attempt_terms()
    assert third is not second and third.sender is calls.attempt_sender()
