"""The canonical store: its interface and the Redis implementation."""

from boundary.store.base import (
    AttemptState,
    CanonicalStore,
    Claim,
    ClaimStatus,
    CreateResult,
    CreateStatus,
    OpenRunStatus,
    ProgressEntry,
    ReapDecision,
    RunSummary,
    ServerFacts,
    WriteStatus,
)
from boundary.store.redis import RedisCanonicalStore

__all__ = [
    "AttemptState",
    "CanonicalStore",
    "Claim",
    "ClaimStatus",
    "CreateResult",
    "CreateStatus",
    "OpenRunStatus",
    "ProgressEntry",
    "ReapDecision",
    "RedisCanonicalStore",
    "RunSummary",
    "ServerFacts",
    "WriteStatus",
]
