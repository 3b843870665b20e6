"""Every span, attribute and metric name of the boundary's telemetry, in one place.

Span and attribute names follow the OpenTelemetry GenAI conventions (``execute_tool
{gen_ai.tool.name}``, ``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
``error.type``); the rest are ``tool_boundary.*``. Metric labels are tool names, statuses and
codes only, never run or call ids (cardinality).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The instrumentation scope of every span and metric.
SCOPE = "tool_boundary"

# --- Span names ---------------------------------------------------------------------------
#: GenAI: ``execute_tool {gen_ai.tool.name}``.
EXECUTE_SPAN = "execute_tool"
SUBMIT_SPAN = "tool_boundary.submit"
#: A model turn's calls submitted together (``submit_many``): one span for the turn.
SUBMIT_MANY_SPAN = "tool_boundary.submit_many"
PROJECT_SPAN = "tool_boundary.project"

# --- Attributes ---------------------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
EXECUTE_TOOL = "execute_tool"
TOOL_NAME = "gen_ai.tool.name"
CALL_ID = "gen_ai.tool.call.id"
ERROR_TYPE = "error.type"
RUN_ID = "tool_boundary.run_id"
#: The calls of a turn (``tool_boundary.submit_many``'s span).
TURN_CALLS = "tool_boundary.turn.calls"
STATUS = "tool_boundary.status"
ATTEMPT = "tool_boundary.attempt"
EVIDENCE = "tool_boundary.evidence_status"
#: A ``submit(..., replay=True)`` that found the same call already made (nothing was sent).
REPLAYED = "tool_boundary.replayed"

# --- Metric label keys (the same in OpenTelemetry and Prometheus) ---------------------------
TOOL, CALL_STATUS, CODE = "tool", "status", "code"

#: The worker steps.
EXECUTE, PROJECT = "execute", "project"


@dataclass(frozen=True)
class Metric:
    """One metric: its OpenTelemetry instrument and its Prometheus name."""

    name: str
    prometheus: str
    kind: str  # "counter" | "histogram" | "gauge"
    unit: str
    description: str
    labels: tuple[str, ...] = ()


CALLS = Metric(
    "tool_boundary.calls",
    "tool_boundary_calls_total",
    "counter",
    "{call}",
    "Calls ended (sealed or refused), by tool, status and error code",
    (TOOL, CALL_STATUS, CODE),
)
EXECUTE_DURATION = Metric(
    "gen_ai.execute_tool.duration",
    "gen_ai_execute_tool_duration_seconds",
    "histogram",
    "s",
    "Time the tool ran in the execute step (GenAI execute_tool)",
    (TOOL, CODE),
)
QUEUE_WAIT = Metric(
    "tool_boundary.queue_wait.duration",
    "tool_boundary_queue_wait_seconds",
    "histogram",
    "s",
    "From the record's creation to its tool starting (first attempt)",
    (TOOL,),
)
PROJECT_DURATION = Metric(
    "tool_boundary.project.duration",
    "tool_boundary_project_duration_seconds",
    "histogram",
    "s",
    "Time of the project step (projector and seal)",
    (TOOL,),
)
CALL_DURATION = Metric(
    "tool_boundary.call.duration",
    "tool_boundary_call_duration_seconds",
    "histogram",
    "s",
    "From the record's creation to its seal, end to end",
    (TOOL, CALL_STATUS, CODE),
)
REAPER_SEALS = Metric(
    "tool_boundary.reaper.seals",
    "tool_boundary_reaper_seals_total",
    "counter",
    "{call}",
    "Calls the reaper sealed WORKER_LOST",
)
REAPER_REPROJECTIONS = Metric(
    "tool_boundary.reaper.reprojections",
    "tool_boundary_reaper_reprojections_total",
    "counter",
    "{call}",
    "Project steps the reaper sent again",
)
PROJECTING = Metric(
    "tool_boundary.projecting",
    "tool_boundary_projecting_calls",
    "gauge",
    "{call}",
    "Calls PROJECTING now (from the pending-runs index)",
)
HEARTBEAT_LAG = Metric(
    "tool_boundary.heartbeat.lag",
    "tool_boundary_heartbeat_lag_seconds",
    "gauge",
    "s",
    "Longest time since a running call's last heartbeat (or start)",
)

CALLS_RUNNING = Metric(
    "tool_boundary.calls.running",
    "tool_boundary_calls_running",
    "gauge",
    "{call}",
    "Calls of a limited tool holding one of its slots (fleet-wide, from its flow control)",
    (TOOL,),
)
CALLS_WAITING = Metric(
    "tool_boundary.calls.waiting",
    "tool_boundary_calls_waiting",
    "gauge",
    "{call}",
    "Calls of a limited tool waiting for a slot (fleet-wide, from its flow control)",
    (TOOL,),
)
CALLS_LIMIT = Metric(
    "tool_boundary.calls.limit",
    "tool_boundary_calls_limit",
    "gauge",
    "{call}",
    "A limited tool's concurrency cap in force (declared, overlaid by the run-time override;"
    " a tool without one is left out), the fleet's reserved entries included",
    (TOOL,),
)
SLOT_WAIT = Metric(
    "tool_boundary.slot_wait.duration",
    "tool_boundary_slot_wait_seconds",
    "histogram",
    "s",
    "Time a limited tool's call waited in line for a slot",
    (TOOL,),
)
STALE_HOLDERS = Metric(
    "tool_boundary.stale_holders",
    "tool_boundary_stale_holders_total",
    "counter",
    "{attempt}",
    "Attempts that went on after another attempt took their call over (a paused worker, a"
    " reclaimed slot): each refused at its next heartbeat or store step, counted once",
    (TOOL,),
)
HANDBACKS = Metric(
    "tool_boundary.handbacks",
    "tool_boundary_handbacks_total",
    "counter",
    "{attempt}",
    "Attempts a draining worker handed back to another worker (SIGTERM past"
    " TOOL_BOUNDARY_WORKER_DRAIN_S): given up in the store and sent again at once",
    (TOOL,),
)

#: Every metric, by OpenTelemetry name.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        CALLS,
        EXECUTE_DURATION,
        QUEUE_WAIT,
        PROJECT_DURATION,
        CALL_DURATION,
        REAPER_SEALS,
        REAPER_REPROJECTIONS,
        PROJECTING,
        HEARTBEAT_LAG,
        CALLS_RUNNING,
        CALLS_WAITING,
        CALLS_LIMIT,
        SLOT_WAIT,
        STALE_HOLDERS,
        HANDBACKS,
    )
}

#: Histogram bucket bounds of every duration, seconds: tools run from milliseconds to the
#: longest tool timeouts (minutes).
SECONDS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
