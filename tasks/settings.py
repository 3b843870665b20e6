"""Settings from ``TOOL_BOUNDARY_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from boundary import ConfigurationError, Limits
from boundary.call_context import DEFAULT_HEARTBEAT_INTERVAL_S
from boundary.core import DEFAULT_MAX_PENDING_S, DEFAULT_REAP_GRACE_S
from boundary.limits import LimitFields
from boundary.steps import DEFAULT_MAX_TOOL_THREADS, DEFAULT_PROJECTION_TIMEOUT_S
from boundary.store.base import DEFAULT_TTL_S
from boundary.store.redis_facts import cluster_enabled
from boundary.store.sentinel import is_sentinel_url, parse_sentinel_url

#: Where the store lives when nothing is configured (workers and the CLI; the demo embeds one).
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
#: The registry workers load when ``TOOL_BOUNDARY_TOOLS`` is not set: the demo's tools.
DEFAULT_TOOLS = "tasks.demo.tools:registry"


class Settings(BaseSettings, LimitFields):
    """Everything a worker, the CLI or the demo needs, from the environment.

    ``TOOL_BOUNDARY_REDIS_URL`` is the store; ``BROKER_URL`` and ``RESULT_BACKEND`` default to it.
    The byte limits (``LimitFields``: ``MAX_REQUEST_BYTES`` ... ``MAX_FACTS_BYTES``) are the
    same fields, defaults and bounds as ``Limits``.
    """

    # A rejected URL may hold a password: pydantic must not echo it in its error.
    model_config = SettingsConfigDict(
        env_prefix="TOOL_BOUNDARY_", extra="ignore", hide_input_in_errors=True
    )

    #: The store's Redis (``redis://``, ``rediss://``, ``redis+sentinel://``, a Cluster node);
    #: ``None``: ``redis://127.0.0.1:6379/0`` (the demo embeds a server instead).
    redis_url: str | None = None
    #: Celery's broker (``None``: the store's URL, so one Redis is enough to start).
    broker_url: str | None = None
    #: Celery's result backend (``None``: the store's URL); the outcome itself is always read
    #: from the sealed record.
    result_backend: str | None = None
    #: Import path of the ``ToolRegistry`` workers load, ``package.module:attribute``.
    tools: str = DEFAULT_TOOLS
    #: At least a second: Celery's ``result_expires`` is whole seconds, and 0 means never.
    ttl_s: float = Field(default=DEFAULT_TTL_S, ge=1)
    #: A call may stay PROJECTING this long (or until its run's deadline, if sooner) before
    #: the reaper may seal it WORKER_LOST.
    max_pending_s: float = Field(default=DEFAULT_MAX_PENDING_S, gt=0)
    #: Extra time past a call's deadline before the reaper may seal it WORKER_LOST.
    reap_grace_s: float = Field(default=DEFAULT_REAP_GRACE_S, ge=0)
    #: How often beat runs the reaper: a call whose tool stopped heartbeating is found within
    #: its ``heartbeat_timeout_s`` plus about this.
    reap_interval_s: float = Field(default=5.0, gt=0)
    #: A running tool's heartbeats write to the store at most once per this many seconds.
    heartbeat_interval_s: float = Field(default=DEFAULT_HEARTBEAT_INTERVAL_S, gt=0)
    #: Times the reaper sends a call again whose tool never started (its message never reached
    #: a worker), whatever its retry policy, before it seals it WORKER_LOST.
    max_redispatches: int = Field(default=2, ge=0)
    #: Redis broker: an unacknowledged message returns after this long. Must exceed the
    #: longest tool timeout, or a second worker would run a call that is still running.
    visibility_timeout_s: int = Field(default=3600, gt=0)
    #: Redis broker: seconds between sweeps that return unacknowledged messages past their
    #: visibility timeout (``None``: kombu's default, about 100 s).
    restore_sweep_s: int | None = Field(default=None, gt=0)
    #: Times an execute task is sent again after its worker process died under it.
    worker_lost_max_retries: int = Field(default=2, ge=0)
    #: Hard time limit of a task (prefork pool): a backstop above every tool's timeout.
    task_time_limit_s: float = Field(default=3600.0, gt=0)
    #: Seconds a projector may run before its call is sealed PROJECTION_FAILED.
    projection_timeout_s: float = Field(default=DEFAULT_PROJECTION_TIMEOUT_S, gt=0)
    #: Off (the default): every call is the chain the design card names, an execute task then
    #: a project task on the projections queue (which may be served by other workers:
    #: projectors that need machines of their own), and Flower lists both for every call.
    #: On (an opt-in): a worker projects a call in line right after its tool returned and its
    #: raw response was kept, and does not send the chained project task for a READY call: one
    #: broker hop a call instead of two (about half the worker's CPU a call; bench/README.md,
    #: "Issue 35"). An outcome that is an ERROR, or a projection that fails there, still sends
    #: it (monitoring lists the ERROR among failed tasks; a store failure is retried there).
    project_in_line: bool = False
    #: Threads a worker process may start for tools and projectors: each hung one holds a
    #: thread for good, so past this many hung at once, later runs time out unstarted.
    max_tool_threads: int = Field(default=DEFAULT_MAX_TOOL_THREADS, ge=1)
    #: On SIGTERM a worker stops taking messages and lets its running calls finish for this
    #: long, seconds; then it hands each unfinished one back to another worker (its attempt
    #: given up, its slot released, sent again at once). 20 s: under Kubernetes' default
    #: grace period (30 s), so the hand-back happens before the orchestrator's SIGKILL.
    worker_drain_s: float = Field(default=20.0, ge=0)
    #: A worker freezes its start-up heap (``gc.freeze()`` at the end of ``worker_init``, before
    #: a prefork pool forks): the collector never scans it again, and prefork children keep
    #: sharing its pages with their parent. A start-up object later left in a garbage cycle is
    #: never freed (``tasks.worker.gc_tuning``).
    worker_gc_freeze: bool = True
    #: A worker sends its buffered task events (Flower's) at most once per this many
    #: milliseconds, together as one message, instead of one message at nearly every event
    #: under load (``tasks.worker.event_flush``); 0: at the event loop's next turn, as Celery.
    worker_events_flush_ms: float = Field(default=5.0, ge=0, le=1000)
    #: Times the reaper sends the project step of a call again whose raw response is kept
    #: (its worker died before sealing it); past that the call is sealed WORKER_LOST.
    max_reprojections: int = Field(default=2, ge=0)
    #: Times a project step whose store failed under it is sent again (with a growing delay)
    #: instead of leaving the call PROJECTING for the reaper.
    project_resends: int = Field(default=5, ge=0)
    #: ``REDIS_URL`` names a node of a Redis Cluster (the store, the CLI, observe, reproject
    #: and the reaper then work across the cluster; the broker must be a plain Redis).
    #: ``None``: asked of the server at start (``INFO cluster``).
    redis_cluster: bool | None = None

    def store_is_cluster(self) -> bool:
        """``redis_cluster``, or when unset whether the store's Redis says it is a Cluster node
        (one round trip; a Redis that does not answer counts as a plain one)."""
        if self.redis_cluster is not None:
            return self.redis_cluster
        return cluster_enabled(self.store_url)

    #: A worker serves Prometheus ``/metrics`` on this port (``None``: no endpoint).
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: ...on this address; a host's other machines reach it only if told so ("0.0.0.0").
    metrics_host: str = "127.0.0.1"
    #: Refuse to start a worker on a store Redis without persistence (AOF or RDB).
    require_persistence: bool = False
    #: Seconds a broker publish may take (connecting included) before dispatch fails.
    publish_timeout_s: float = Field(default=5.0, gt=0)
    #: Times a worker tries its store, broker and result backend at start (1 s apart, growing
    #: to 5 s: 10 is about 40 s) before it stops with one line and exit 3.
    startup_attempts: int = Field(default=10, ge=1)
    #: After a create or a seal the store waits (``WAIT``, at most 100 ms) until this many
    #: replicas have it: a Sentinel failover then loses no accepted call (0: no wait).
    redis_wait_replicas: int = Field(default=0, ge=0)
    #: New calls are refused (STORE_UNAVAILABLE) while the store's Redis uses this fraction
    #: of its ``maxmemory`` or more, so accepted calls keep room to finish (1.0: only when
    #: full, as Redis itself refuses).
    memory_watermark: float = Field(default=0.9, gt=0, le=1)
    #: Publish a task-sent event for every task sent (Flower then shows a call's tasks as
    #: SENT before a worker takes them). A dispatcher's events are published behind its sends,
    #: from a thread of their own (``tasks.wiring.sent_events.SentEvents``): off saves that PUBLISH
    #: and its CPU, not the caller's wait; Flower still sees received, started and succeeded.
    task_sent_events: bool = True
    #: Re-projection chunks running at once across every worker and every job (the fleet's
    #: own flow-control entry ``tool_boundary.reproject``; ``tool-boundary limits set
    #: tool_boundary.reproject --concurrency N`` changes it at run time). Set it the same on
    #: every process, as a tool's declared limits are.
    reproject_concurrency: int = Field(default=2, ge=1)
    #: A chunk holds its slot as a lease it renews while it works (every third of this); a
    #: chunk whose worker died or stalled loses it this long after its last renewal, when
    #: the reaper's sweep frees it for the next chunk in line.
    reproject_lease_s: float = Field(default=30.0, gt=0)
    #: Bytes a re-projection job keeps in the store: its hash and its report lines (each
    #: run's diff) with Redis's own overhead, as ``MEMORY USAGE`` counts them; past it the
    #: oldest lines go (a follower has read them). 8 MiB: a few jobs' reports stay far below
    #: a store's memory, so jobs never crowd calls out (the store refuses calls at its memory
    #: watermark); ``--out FILE`` keeps the whole report. At least 16 KiB (a stream's first
    #: node alone takes about 4.6 KiB).
    job_report_max_bytes: int = Field(default=8 * 1024 * 1024, ge=16 * 1024, le=1024**3)
    #: Seconds a job (its hash and report lines) stays after its last checkpoint. A day: long
    #: enough to read a job after a night's run, short enough that old reports do not pile
    #: up in the store; ``tool-boundary jobs delete ID`` removes one at once.
    job_report_ttl_s: float = Field(default=86400.0, ge=60, le=30 * 86400)
    #: Monitoring events of the reaper's runs (``tool_boundary.reap``, every
    #: ``reap_interval_s``): off, they stay out of Flower's task list, which they would fill
    #: (task-sent, received, started, succeeded: no event at all); on, they show as any task.
    reap_events: bool = False

    @field_validator("redis_url", "broker_url", "result_backend")
    @classmethod
    def _parsable_url(cls, value: str | None) -> str | None:
        """A URL whose password holds a reserved character (``/ # ?``) unencoded splits in
        the wrong place: kombu then prints part of the password as the "port" in its
        traceback. Refused here, naming no part of it."""
        if value is not None and not _parsable(value):
            raise ValueError(
                "not a URL; percent-encode reserved characters in the password "
                "(/ as %2F, # as %23, ? as %3F)"
            )
        return value

    @property
    def store_url(self) -> str:
        return self.redis_url or DEFAULT_REDIS_URL

    @property
    def broker(self) -> str:
        return self.broker_url or self.store_url

    @property
    def backend(self) -> str:
        return self.result_backend or self.store_url

    @property
    def limits(self) -> Limits:
        """The byte limits: each ``Limits`` field comes from the setting of the same name."""
        return Limits(**{name: getattr(self, name) for name in Limits.model_fields})


class InvalidSettings(ConfigurationError):
    """``TOOL_BOUNDARY_*`` variables that do not validate.

    Names only: a value may be a password (a URL's) or a secret pasted in the wrong place.
    """

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"invalid settings: {', '.join(names)}")
        self.names = names


def load_settings() -> Settings:
    """The settings of the environment.

    Raises:
        InvalidSettings: naming each variable that does not validate, never its value.
    """
    try:
        return Settings()
    except ValidationError as exc:
        names = sorted({"TOOL_BOUNDARY_" + str(err["loc"][0]).upper() for err in exc.errors()})
        raise InvalidSettings(names) from None


def _parsable(url: str) -> bool:
    """Whether ``url`` splits where its writer meant: a scheme, a numeric port if any, a host
    for network schemes, and no ``@`` after the host (a sign the password was cut short)."""
    if is_sentinel_url(url):
        try:
            parse_sentinel_url(url)
        except ValueError:
            return False
        return True
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return False
    if not parts.scheme:
        return False
    if any("@" in piece for piece in (parts.path, parts.query, parts.fragment)):
        return False
    network = parts.scheme not in ("unix", "redis+socket", "memory", "filesystem")
    return not network or bool(parts.hostname) or parts.netloc == ""


def redis_location(url: str) -> str:
    """Host, port and DB of a Redis URL, never its credentials."""
    if is_sentinel_url(url):
        try:
            address = parse_sentinel_url(url)
        except ValueError:
            return "?"
        return f"sentinel service {address.service}/{address.db}"
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return parts.path or "?"
        host = parts.hostname or "?"
        return f"{host}:{parts.port or 6379}/{parts.path.lstrip('/') or '0'}"
    except ValueError:
        return "?"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1): the hosts the web view
    and the MCP server may bind without a token."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
