"""tool-boundary's core: preflight, the canonical store, lifecycle, limits, safe errors.

No Celery here; ``tasks`` wires this to Celery.
"""

#: The release, the one place it is written: pyproject.toml reads it (``tool.setuptools.dynamic``);
#: ``tasks.__version__`` and ``tool-boundary --version`` show it; CHANGELOG.md says what it holds.
__version__ = "0.6.0"

from boundary.call_context import CallCancelled, CallInfo, current_call, heartbeat
from boundary.core import ToolBoundary
from boundary.dispatch import Dispatcher, InProcessDispatcher
from boundary.errors import (
    BoundaryError,
    ConfigurationError,
    DispatchError,
    ErrorCode,
    StoreError,
    StoreUnavailable,
    ToolTimeout,
)
from boundary.handle import RunBoundary
from boundary.limits import Limits, canonical_json, utf8_size
from boundary.models import (
    CallProgress,
    CanonicalKey,
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    ObservedFact,
    ObservedFacts,
    Projection,
    RunContext,
    Submission,
    ToolCallEnvelope,
    ToolOutcome,
)
from boundary.progress import RunProgressProjector
from boundary.registry import (
    Projector,
    RateLimit,
    RetryPolicy,
    ToolRegistry,
    ToolSpec,
    load_registry,
)
from boundary.schema import SchemaError
from boundary.steps import execute_step, project_step
from boundary.store import CanonicalStore, RedisCanonicalStore

__all__ = [
    "BoundaryError",
    "CallCancelled",
    "CallInfo",
    "CallProgress",
    "CanonicalKey",
    "CanonicalRecord",
    "CanonicalStore",
    "ConfigurationError",
    "DispatchError",
    "Dispatcher",
    "ErrorCode",
    "EvidenceStatus",
    "InProcessDispatcher",
    "InvocationStatus",
    "Limits",
    "ObservedFact",
    "ObservedFacts",
    "Projection",
    "Projector",
    "RateLimit",
    "RedisCanonicalStore",
    "RetryPolicy",
    "RunBoundary",
    "RunContext",
    "RunProgressProjector",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "Submission",
    "ToolBoundary",
    "ToolCallEnvelope",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "ToolTimeout",
    "canonical_json",
    "current_call",
    "execute_step",
    "heartbeat",
    "load_registry",
    "project_step",
    "utf8_size",
]
