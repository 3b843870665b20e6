"""tool-boundary's core: preflight, the canonical store, lifecycle, limits, safe errors.

No Celery here; ``tasks`` wires this to Celery. ``__all__`` lists the public names by role;
the worker's own steps (``boundary.steps``) and every other part are reached through their
modules.
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
from boundary.store import CanonicalStore, RedisCanonicalStore

__all__ = [  # noqa: RUF022 (grouped by role, sorted within each group)
    # Calls: the boundary an agent's tool loop calls, a run's policy, a call, a dispatcher.
    "Dispatcher",
    "InProcessDispatcher",
    "RunBoundary",
    "RunContext",
    "ToolBoundary",
    "ToolCallEnvelope",
    # Tools and projectors: declaring tools, and measuring what a projector keeps.
    "Projection",
    "Projector",
    "RateLimit",
    "RetryPolicy",
    "RunProgressProjector",
    "ToolRegistry",
    "ToolSpec",
    "canonical_json",
    "load_registry",
    "utf8_size",
    # Records and outcomes: what a call leaves and what a caller gets back.
    "CallProgress",
    "CanonicalKey",
    "CanonicalRecord",
    "EvidenceStatus",
    "InvocationStatus",
    "ObservedFact",
    "ObservedFacts",
    "Submission",
    "ToolOutcome",
    # Inside a tool: the running call, its heartbeat, its cancellation.
    "CallCancelled",
    "CallInfo",
    "current_call",
    "heartbeat",
    # Errors: the stable codes agents see, and what the library raises.
    "BoundaryError",
    "ConfigurationError",
    "DispatchError",
    "ErrorCode",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "ToolTimeout",
    # Stores: the canonical store and its byte limits.
    "CanonicalStore",
    "Limits",
    "RedisCanonicalStore",
]
