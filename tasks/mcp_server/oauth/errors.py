"""Why a request was refused: a stable reason code for the operator's log line, and the HTTP
answer it gets. The token, its claims and the library's message never go anywhere."""

from __future__ import annotations

from enum import StrEnum

from boundary import BoundaryError, ErrorCode


class Reason(StrEnum):
    """The reason code logged for a refused request (one line, nothing else)."""

    MISSING_TOKEN = "missing_token"  # noqa: S105 (a reason code, not a secret)
    MALFORMED_TOKEN = "malformed_token"  # noqa: S105 (a reason code, not a secret)
    ALGORITHM_NOT_ALLOWED = "algorithm_not_allowed"
    UNKNOWN_ISSUER = "unknown_issuer"
    UNKNOWN_KEY = "unknown_key"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    WRONG_AUDIENCE = "wrong_audience"
    MISSING_CLAIM = "missing_claim"
    INVALID_TOKEN = "invalid_token"  # noqa: S105 (a reason code, not a secret)
    INSUFFICIENT_SCOPE = "insufficient_scope"
    KEYS_UNAVAILABLE = "keys_unavailable"


#: Reasons answered 403 (the token is good but may not do this) and 503 (the server cannot
#: check tokens now: the issuer's keys could not be fetched); every other one is 401.
FORBIDDEN = frozenset({Reason.INSUFFICIENT_SCOPE})
UNAVAILABLE = frozenset({Reason.KEYS_UNAVAILABLE})


class AuthRefused(BoundaryError):
    """A request the resource server refuses; ``reason`` says why (for the log only)."""

    code = ErrorCode.UNAUTHORIZED

    def __init__(self, reason: Reason) -> None:
        super().__init__()
        self.reason = reason
        self.args = (reason.value,)

    @property
    def status(self) -> int:
        if self.reason in FORBIDDEN:
            return 403
        if self.reason in UNAVAILABLE:
            return 503
        return 401
