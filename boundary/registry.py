"""Tools the boundary may run: each one an executor and the projector of its raw output."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from boundary.errors import ConfigurationError, ErrorCode
from boundary.models import SAFE_ID_PATTERN, Projection
from boundary.schema import (
    ANY_OBJECT,
    SchemaError,
    compile_schema,
    failed_schema_path,
    first_paragraph,
    function_arguments,
)

#: Default time a tool may run, in seconds.
DEFAULT_TIMEOUT_S = 30.0
#: The queue a tool's execute step goes to unless its spec names another.
DEFAULT_QUEUE = "tools"

Executor = Callable[[dict[str, Any]], Any]


@runtime_checkable
class Projector(Protocol):
    """Turns a raw response into a small, safe ``Projection``. Must be a pure function."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection | Mapping[str, Any]: ...


#: What a retry policy retries by default: the failures of infrastructure and time.
RETRYABLE_BY_DEFAULT = frozenset({ErrorCode.WORKER_LOST, ErrorCode.TOOL_TIMEOUT})


class RetryPolicy(BaseModel):
    """How often a read-only tool's call is run again when an attempt is lost or times out.

    A retry runs under the same canonical record (same run and tool_call_id, ``attempt`` + 1,
    a new Celery message), never as a new call: budgets count the call once, at most one raw
    response is kept, and the last attempt's failure is what gets sealed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Attempts in all, the first included (1: never retried).
    max_attempts: int = Field(default=1, ge=1, le=100)
    #: Pause before the second attempt, seconds; doubles per attempt.
    backoff_s: float = Field(default=1.0, ge=0)
    #: Longest pause between two attempts, seconds.
    max_backoff_s: float = Field(default=60.0, ge=0)
    #: The codes an attempt may end with and still be retried.
    retry_on: frozenset[ErrorCode] = RETRYABLE_BY_DEFAULT

    @field_validator("retry_on")
    @classmethod
    def _only_retryable(cls, value: frozenset[ErrorCode]) -> frozenset[ErrorCode]:
        if not value <= RETRYABLE_BY_DEFAULT:
            raise ValueError("retry_on may hold only WORKER_LOST and TOOL_TIMEOUT")
        return value

    def retries(self, code: ErrorCode, attempts_made: int) -> bool:
        """Whether an attempt that ended with ``code`` is run again, ``attempts_made`` of
        ``max_attempts`` having run."""
        return code in self.retry_on and attempts_made < self.max_attempts

    def backoff(self, attempts_made: int) -> float:
        """Seconds to wait before attempt ``attempts_made + 1``."""
        return float(min(self.backoff_s * 2 ** max(attempts_made - 1, 0), self.max_backoff_s))


class RateLimit(BaseModel):
    """At most ``limit`` starts of a tool in any window of ``period_s`` seconds, across the
    whole fleet, on the store's clock (a sliding window: never more in any such window)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limit: int = Field(ge=1, le=1_000_000)
    period_s: float = Field(gt=0, le=86_400)

    def __str__(self) -> str:
        return f"{self.limit}/{self.period_s:g}s"


class ToolSpec(BaseModel):
    """One registered tool, declared once for every agent framework.

    ``description`` and ``input_schema`` are what adapters export as the tool's definition
    (OpenAI ``parameters``, Anthropic ``input_schema``, MCP ``inputSchema``, ...); preflight
    validates every call's arguments against ``input_schema`` (``None``: any JSON object).
    The schema is checked against its metaschema here, so a broken one fails at start-up.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(min_length=1, max_length=128)
    executor: Executor
    projector: Projector
    read_only: bool
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    #: What the tool does, for the model: exported as the tool's description.
    description: str = ""
    #: A JSON Schema object for the arguments, or ``None`` for any JSON object.
    input_schema: dict[str, Any] | None = None
    #: The tool calls ``heartbeat()`` at least this often, seconds: a running call silent for
    #: longer is lost (its worker died) and is retried or sealed WORKER_LOST within seconds.
    #: ``None``: the tool does not heartbeat, and a call is judged lost only past its
    #: ``max_pending_s`` (and grace).
    heartbeat_timeout_s: float | None = Field(default=None, gt=0)
    #: How long an attempt that went silent keeps its call, and for a limited tool its slot,
    #: before the fleet reclaims them (hands the call to a new attempt, the slot to the next
    #: call), seconds; at least ``heartbeat_timeout_s``, whose value it takes by default. A
    #: longer lease suits a tool whose hosts pause (long GC pauses, throttled containers):
    #: fewer false reclaims, at the price of a slot held that much longer when a worker dies.
    #: Only for a tool that heartbeats (docs/how-to/flow-control.md, "Paused holders").
    slot_lease_s: float | None = Field(default=None, gt=0)
    #: How lost or timed-out attempts are run again (default: never).
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    #: The Celery queue of the tool's execute step: long tools get a queue (and workers) of
    #: their own, so short calls never wait behind them.
    queue: str = Field(default=DEFAULT_QUEUE, min_length=1, max_length=128, pattern=r"^[\w.-]+$")
    #: Runs of this tool at once per worker process (``None``: no bound of its own). Runs past
    #: it wait for a slot within their time limit, so a hung tool cannot hold every thread.
    max_concurrency: int | None = Field(default=None, ge=1)
    #: Calls of this tool running at once across every worker and host (``None``: no bound).
    #: A call past it is accepted and waits in the store, not as a Celery message.
    concurrency: int | None = Field(default=None, ge=1)
    #: Calls of this tool running at once per tenant (``RunContext.tenant``); ``None``: no bound.
    tenant_concurrency: int | None = Field(default=None, ge=1)
    #: Starts of this tool per period, fleet-wide (``None``: no bound).
    rate_limit: RateLimit | None = None
    #: Calls that may wait for a slot; past it a call is refused at submit with ``TOOL_BUSY``
    #: (nothing created or charged). ``None``: no bound.
    max_waiting: int | None = Field(default=None, ge=0)
    #: The version of ``projector``, written into each record it seals (``projector_version``)
    #: and naming the side projections a re-projection keeps (``tool-boundary reproject
    #: --projectors current --write``). Change it with the projector's code.
    projector_version: str = Field(default="1", pattern=SAFE_ID_PATTERN, max_length=64)

    #: ``input_schema`` and its compiled validator: built once, reused by every call, and
    #: built again if the schema object is replaced (``model_copy(update=...)`` copies this).
    _compiled: tuple[dict[str, Any], Validator] | None = PrivateAttr(default=None)

    @field_validator("input_schema")
    @classmethod
    def _schema_is_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            compile_schema(value)  # raises SchemaError (a ValueError) when invalid
        return value

    @model_validator(mode="after")
    def _lease_is_renewed(self) -> ToolSpec:
        if self.slot_lease_s is not None:
            if self.heartbeat_timeout_s is None:
                raise ValueError("slot_lease_s needs heartbeat_timeout_s (a tool that heartbeats)")
            if self.slot_lease_s < self.heartbeat_timeout_s:
                raise ValueError("slot_lease_s must be at least heartbeat_timeout_s")
        return self

    def model_post_init(self, context: Any, /) -> None:
        if self.input_schema is not None:
            self._compiled = (self.input_schema, compile_schema(self.input_schema))

    @property
    def limited(self) -> bool:
        """True when a call of this tool goes through the fleet's flow control (a slot, the
        rate limit or the waiting line); a tool without limits pays no round trip for it."""
        return (
            self.concurrency is not None
            or self.tenant_concurrency is not None
            or self.rate_limit is not None
            or self.max_waiting is not None
        )

    @property
    def lease_s(self) -> float | None:
        """How long a silent attempt keeps its call and slot: ``slot_lease_s``, by default
        ``heartbeat_timeout_s``; ``None`` for a tool that does not heartbeat."""
        return self.slot_lease_s if self.slot_lease_s is not None else self.heartbeat_timeout_s

    @property
    def arguments_schema(self) -> dict[str, Any]:
        """The schema to export to a framework: ``input_schema`` or "any JSON object"."""
        return self.input_schema if self.input_schema is not None else dict(ANY_OBJECT)

    @classmethod
    def from_function(
        cls,
        fn: Callable[..., Any],
        *,
        projector: Projector,
        read_only: bool,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        name: str | None = None,
        description: str | None = None,
        **options: Any,
    ) -> ToolSpec:
        """A spec declared by a typed function: its name, its docstring's first paragraph
        as the description, and its parameters (by pydantic) as ``input_schema``.

        The executor validates the arguments into the parameters' types and calls ``fn``
        with them as keywords; ``fn`` returns the JSON-able raw response. ``options`` are
        the other fields (``heartbeat_timeout_s``, ``retry``, ``queue``, ``max_concurrency``,
        ``concurrency``, ``tenant_concurrency``, ``rate_limit``, ``max_waiting``).
        """
        schema, executor = function_arguments(fn)
        return cls(
            name=name or fn.__name__,
            executor=executor,
            projector=projector,
            read_only=read_only,
            timeout_s=timeout_s,
            description=first_paragraph(fn.__doc__) if description is None else description,
            input_schema=schema,
            **options,
        )

    def schema_violation(self, arguments: Mapping[str, Any]) -> str | None:
        """``None`` when ``arguments`` satisfy ``input_schema``, else the JSON Pointer of the
        schema keyword they fail. Never raises, never names a value."""
        schema = self.input_schema
        if schema is None:
            return None
        compiled = self._compiled
        if compiled is None or compiled[0] is not schema:
            try:
                compiled = (schema, compile_schema(schema))
            except SchemaError:
                # Only an unvalidated copy can hold a broken schema: refuse every call.
                return "/"
            self._compiled = compiled
        return failed_schema_path(compiled[1], arguments)


class ToolRegistry:
    """Tools by name. Accepts ``read_only=False`` specs so a misconfigured tool is visible;
    preflight refuses calls to them."""

    def __init__(self, specs: list[ToolSpec] | None = None) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: ToolSpec) -> ToolSpec:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str | None) -> ToolSpec | None:
        return self._specs.get(name) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def heartbeat_timeouts(self) -> dict[str, float]:
        """Tool -> how long a silent call keeps its call and slot (``ToolSpec.lease_s``), of
        the tools that heartbeat."""
        return {spec.name: spec.lease_s for spec in self if spec.lease_s is not None}

    def silent_after(self, grace_s: float) -> dict[str, float]:
        """Tool -> seconds a started call may go without a sign of life before the reaper
        judges it lost (what the execute step's claim sets): the heartbeat timeout of a tool
        that heartbeats; for a limited tool that does not, its time limit plus ``grace_s``, so
        a killed worker never holds the tool's slot much past the tool's own time limit."""
        silent = self.heartbeat_timeouts
        for spec in self:
            if spec.limited and spec.heartbeat_timeout_s is None:
                silent[spec.name] = spec.timeout_s + grace_s
        return silent

    @property
    def longest_timeout_s(self) -> float:
        return max((spec.timeout_s for spec in self), default=DEFAULT_TIMEOUT_S)


def load_registry(path: str) -> ToolRegistry:
    """Imports a registry from ``"package.module:attribute"``.

    Raises:
        ConfigurationError: the path is malformed, fails to import, or names no registry.
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"tools path {path!r} is not of the form 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
        registry = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load tools from {path!r}: {exc}") from exc
    if callable(registry) and not isinstance(registry, ToolRegistry):
        registry = registry()
    if not isinstance(registry, ToolRegistry):
        raise ConfigurationError(f"{path!r} is not a ToolRegistry")
    return registry
