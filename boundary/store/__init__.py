"""The canonical store: its interface and the Redis implementation."""

from boundary.store.base import (
    AttemptState,
    CanonicalStore,
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
