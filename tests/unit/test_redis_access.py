"""``describe``: one line of why a Redis connection failed, from the exception or one it was
raised from (also through ``raise ... from None``), never the driver's URL or password."""

from __future__ import annotations

import ssl

import redis

from tasks.wiring.redis_access import describe, plaintext_hint


def _wrapped(inner: BaseException) -> BaseException:
    """As the store raises: its own error, the driver's suppressed (but kept as context)."""
    try:
        try:
            raise inner
        except Exception:
            raise RuntimeError("store unavailable") from None
    except RuntimeError as outer:
        return outer


def test_a_refused_right_is_permanent_and_names_redis_words() -> None:
    exc = redis.exceptions.NoPermissionError(
        "this user has no permissions to access one of the channels used as arguments"
    )
    reason = describe(_wrapped(exc))
    assert reason is not None and reason.permanent
    assert "NOPERM" in reason.text and "channels" in reason.text


def test_a_refused_password() -> None:
    exc = redis.exceptions.AuthenticationError("invalid username-password pair user:s3cret")
    reason = describe(exc)
    assert reason is not None and reason.permanent and "s3cret" not in reason.text


def test_certificates() -> None:
    untrusted = ssl.SSLCertVerificationError(1, "certificate verify failed")
    untrusted.verify_code, untrusted.verify_message = 20, "unable to get local issuer certificate"
    mismatch = ssl.SSLCertVerificationError(1, "certificate verify failed")
    mismatch.verify_code, mismatch.verify_message = 62, "Hostname mismatch"
    first, second = describe(_wrapped(untrusted)), describe(_wrapped(mismatch))
    assert first is not None and "not trusted" in first.text and first.permanent
    assert second is not None and "hostname mismatch" in second.text and second.permanent


def test_a_plaintext_url_to_a_closing_server_gets_a_hint_a_tls_one_does_not() -> None:
    closed = redis.exceptions.ConnectionError("Connection closed by server.")
    hint = plaintext_hint("redis://:pw@host:6380/0", _wrapped(closed))
    assert hint is not None and "rediss://" in hint.text and not hint.permanent
    assert plaintext_hint("rediss://:pw@host:6380/0", closed) is None


def test_anything_else_has_no_reason() -> None:
    assert describe(redis.exceptions.ConnectionError("Error 111 connecting")) is None
