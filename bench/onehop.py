"""A measured proposal, never a way to run tools: our worker with the project step run in
line right after the execute step kept the call's raw response, and the chained project
task dropped (one broker hop a call instead of two). ``python -m bench.onehop`` measures it
against our worker unchanged (``bench.onehop_compare``).

Everything else is ours unchanged (tasks, store, settings, Celery configuration): only
``tasks.calls.execute_step`` is wrapped. What it leaves out, and a real version would have
to keep: Flower sees no project task (an ERROR outcome is not listed among failed tasks),
a projector that overruns is sealed by the watchdog with no project task sent for it, and
the projections queue no longer takes the projection off the tools' workers. Workers run
``celery -A bench.onehop worker -Q onehop_tools,onehop_projections``.
"""

from __future__ import annotations

from typing import Any

import tasks.calls
from boundary import CanonicalKey, CanonicalStore, ToolRegistry
from boundary.steps import ExecuteResult, project_step
from tasks import app
from tasks.runtime import get_runtime

__all__ = ["QUEUES", "app"]

#: The one-hop worker's queues, in the roles of ours ("tools", "projections").
QUEUES = ("onehop_tools", "onehop_projections")

_execute_step = tasks.calls.execute_step


def execute_then_project(
    store: CanonicalStore, registry: ToolRegistry, key: CanonicalKey, **terms: Any
) -> ExecuteResult:
    """The execute step, then, when it kept the raw response, the project step here (its
    seal wakes the call's waiters); ``HANDED_ON`` makes the task drop its chained project
    task."""
    done = _execute_step(store, registry, key, **terms)
    if done is not ExecuteResult.STORED:
        return done
    timeout_s = get_runtime().settings.projection_timeout_s
    project_step(store, registry, key, timeout_s=timeout_s)
    return ExecuteResult.HANDED_ON


tasks.calls.execute_step = execute_then_project


if __name__ == "__main__":
    from bench.onehop_compare import main

    raise SystemExit(main())
