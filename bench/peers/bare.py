"""Bare Celery: the same two-step chain as ours (execute on one queue, project on another)
with no-op tasks and nothing of the boundary: no preflight, no store, no projection.

The app takes our Celery configuration unchanged (``tasks.wiring.app.celery_config``: serializer,
acks_late, prefetch, events, track-started, result expiry, broker and backend URLs), so the
only difference the benchmark sees is the boundary's own work. Its queues have their own
names so both workers can stay up on one broker DB and the two sides can be measured in
turns; a queue's name costs nothing. Workers run ``celery -A bench.peers.bare worker``.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue

from tasks.settings import Settings
from tasks.wiring.app import celery_config

#: The bare worker's queues, in the roles of ours ("tools", "projections").
TOOLS_QUEUE = "bare_tools"
PROJECTIONS_QUEUE = "bare_projections"
QUEUES = (TOOLS_QUEUE, PROJECTIONS_QUEUE)
#: The same roles for the peer with our event spacing (``bench.peers.bare_spaced``), whose
#: worker runs beside the stock one on the same broker.
SPACED_QUEUES = ("bare_spaced_tools", "bare_spaced_projections")

EXECUTE = "bench_bare.execute"
PROJECT = "bench_bare.project"

#: The one-task peer (``bench.suite.sides.BareOne``): the whole call as one task on a queue of its
#: own, as ours runs it when it projects in line (the default).
ONE_QUEUE = "bare_one"
EXECUTE_ONE = "bench_bare.execute_one"


def queue_config(
    names: tuple[str, str] = (EXECUTE, PROJECT), queues: tuple[str, str] = QUEUES
) -> dict[str, Any]:
    """The Celery settings of a peer's two queues (direct exchanges of their own names) and
    of its two tasks' routes: the execute step to the first queue, the project step to the
    second, the first being the default."""
    routes = {
        name: {"queue": queue, "routing_key": queue}
        for name, queue in zip(names, queues, strict=True)
    }
    return {
        "task_queues": tuple(
            Queue(name, Exchange(name, type="direct"), routing_key=name) for name in queues
        ),
        "task_default_queue": queues[0],
        "task_routes": routes,
    }


def bare_config(settings: Settings) -> dict[str, Any]:
    """Our Celery configuration with the bare queues and routes."""
    config = celery_config(settings) | queue_config()
    config["task_queues"] += tuple(
        Queue(name, Exchange(name, type="direct"), routing_key=name)
        for name in (ONE_QUEUE, *SPACED_QUEUES)
    )
    config["task_routes"][EXECUTE_ONE] = {"queue": ONE_QUEUE, "routing_key": ONE_QUEUE}
    config.pop("beat_schedule", None)
    return config


def create_bare_app(settings: Settings) -> Celery:
    created = Celery("bench_bare")
    created.config_from_object(bare_config(settings))
    return created


#: The app bare workers run, configured from ``TOOL_BOUNDARY_*`` like ours.
app = create_bare_app(Settings())


#: Our execute task's options (``tasks.worker.calls.execute_tool``), shared by the peers' tasks that
#: run a tool.
EXECUTE_OPTIONS: dict[str, Any] = {
    "acks_late": True,
    "retry_on_worker_lost": True,
    "max_retries": 2,
    "default_retry_delay": 0,
}


@app.task(name=EXECUTE, ignore_result=True, **EXECUTE_OPTIONS)
def execute(run_id: str, tool_call_id: str) -> str:
    """Our execute task's options, none of its work."""
    return "STORED"


def outcome_shape(tool_call_id: str) -> dict[str, Any]:
    """An outcome of the same shape and size as ours."""
    return {
        "tool_call_id": tool_call_id,
        "status": "READY",
        "evidence_status": "EVIDENCE_FOUND",
        "result": {"ok": True},
        "scope": None,
        "error_code": None,
    }


@app.task(name=PROJECT, acks_late=True)
def project(run_id: str, tool_call_id: str) -> dict[str, Any]:
    """Returns an outcome of the same shape and size as ours."""
    return outcome_shape(tool_call_id)


@app.task(name=EXECUTE_ONE, **EXECUTE_OPTIONS)
def execute_one(run_id: str, tool_call_id: str) -> dict[str, Any]:
    """Our execute task's options, none of its work, and an outcome of our shape: a call
    run and projected by one task."""
    return outcome_shape(tool_call_id)


def send_one(celery_app: Celery, run_id: str, tool_call_id: str) -> str:
    """Sends the one-task call, under the id the waiter waits on (the project task's, as
    ours is waited on), with ids-only argsrepr."""
    ids = (run_id, tool_call_id)
    return str(
        celery_app.signature(
            EXECUTE_ONE,
            args=ids,
            task_id=f"{run_id}:{tool_call_id}:project",
            queue=ONE_QUEUE,
            argsrepr=repr(ids),
            kwargsrepr="{}",
        )
        .apply_async()
        .id
    )


def send_chain(
    celery_app: Celery,
    run_id: str,
    tool_call_id: str,
    names: tuple[str, str] = (EXECUTE, PROJECT),
    queues: tuple[str, str] = QUEUES,
) -> str:
    """Sends execute -> project as a Celery user writes it: a chain of two immutable
    signatures with deterministic ids and ids-only argsrepr (the message
    ``CeleryDispatcher`` sends). Returns the project task's id; the caller waits on that
    task alone, as ours does, not on the chain's parents."""
    ids = (run_id, tool_call_id)

    def step(name: str, suffix: str, queue: str) -> Any:
        return celery_app.signature(
            name,
            args=ids,
            immutable=True,
            task_id=f"{run_id}:{tool_call_id}:{suffix}",
            queue=queue,
            argsrepr=repr(ids),
            kwargsrepr="{}",
        )

    chain = step(names[0], "execute", queues[0]) | step(names[1], "project", queues[1])
    return str(chain.apply_async().id)
