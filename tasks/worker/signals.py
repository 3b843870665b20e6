"""Every hook of a worker, connected here once, in the order each signal runs them.

Imported once, by ``tasks/__init__.py``, with the task modules (``celery -A tasks`` loads it;
so does every process that imports ``tasks``: the hooks only fire in a worker, and the
progress listener only sends events once a worker attached itself). Each hook's body lives
with what it is about; this module only says which signal runs it, and when.

Celery runs a signal's receivers in the order they were connected, and a ``SystemExit`` from
one (the start-up check's) stops the rest: the start-up check runs before anything is served.
"""

from __future__ import annotations

from celery import signals

from boundary.call_context import set_progress_listener
from tasks.wiring.app import app
from tasks.worker import drain
from tasks.worker.event_flush import SpacedEventFlush
from tasks.worker.execute import execute_tool, seal_when_retries_run_out
from tasks.worker.format_check import check_store_format
from tasks.worker.gc_tuning import freeze_start_up_heap
from tasks.worker.metrics_endpoint import serve_metrics, stop_metrics
from tasks.worker.pool_hooks import (
    limit_tool_threads_at_start,
    mark_pool_child,
    run_tools_in_line,
)
from tasks.worker.prefork_start import killed_children_do_not_fail_the_start
from tasks.worker.process import progress_events
from tasks.worker.startup import check_runtime
from tasks.worker.trace_logs import add_trace_ids

# The worker's task events leave at most once per ``worker_events_flush_ms``, together.
app.steps["consumer"].add(SpacedEventFlush)

# A call's heartbeats become ``task-progress`` events of the task that runs it (Flower).
set_progress_listener(progress_events.on_progress)

# The worker is made: which worker sends the progress events; a threads pool becomes
# ``InlineThreadPool`` (before the worker resolves its pool class); the start-up check
# (exit 2 or 3); the bound on overdue runs; the Prometheus endpoint when configured; the
# start-up heap frozen for the garbage collector (before a prefork pool forks).
signals.worker_init.connect(progress_events.on_worker_init, weak=False)
signals.worker_init.connect(run_tools_in_line)
signals.worker_init.connect(check_runtime)
# Exit 2 when the store holds a newer incompatible format (``boundary.formats``).
signals.worker_init.connect(check_store_format)
# The drain on SIGTERM (``tasks.worker.drain``): the worker kept, the timer, the children's
# handler.
signals.worker_init.connect(drain.remember_worker)
signals.worker_shutting_down.connect(drain.on_shutting_down)
signals.worker_process_init.connect(drain.on_child_start)
signals.worker_init.connect(limit_tool_threads_at_start)
signals.worker_init.connect(serve_metrics)
signals.worker_init.connect(freeze_start_up_heap)

# The worker's log handlers carry the current span's trace and span ids.
signals.after_setup_logger.connect(add_trace_ids)
signals.after_setup_task_logger.connect(add_trace_ids)

# A prefork child: it runs its tools in line on its main thread.
signals.worker_process_init.connect(mark_pool_child)

# The consumer is ready: a prefork child killed by a signal meanwhile does not stop the start.
signals.worker_ready.connect(killed_children_do_not_fail_the_start)

# The execute task failed: a worker process died under the tool more often than allowed.
signals.task_failure.connect(seal_when_retries_run_out, sender=execute_tool)

# The worker shuts down: the Prometheus endpoint stops.
signals.worker_shutdown.connect(stop_metrics)

# Connected later, not here: ``tasks.worker.pool_hooks.stop_taking_work`` connects a
# ``task_postrun`` hook in a prefork child whose every tool thread a hung tool holds.
