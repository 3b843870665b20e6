"""The run projection tasks: ``project_run`` resolves a run's progress set through the
canonical store and returns its bounded observed facts; it only reads, so a run can be
reprocessed any number of times. ``project_runs`` does the same for a chunk of runs in one
task, with pipelined reads (two round trips for the whole chunk) and one result for the chunk
(what ``tasks.wiring.reproject`` sends): its lines as one JSON text, which the result backend
carries as one string (a list of a thousand facts would be decoded dict by dict through the
serializer's object hook, on the client: most of its time). The text is built from the
records' fields as read (``tasks.views.observe_runs_text``): no model per record, and each
fact's canonical JSON (written once, to count its bytes) goes into the text as it is.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from boundary import StoreError
from boundary.models import is_safe_id
from tasks.runtime import get_runtime
from tasks.views import RunError, error_line, observe_run, observe_runs_text
from tasks.wiring.app import PROJECT_RUN, PROJECT_RUNS, app
from tasks.worker.step_store import retrying

logger = logging.getLogger(__name__)


def _failed(what: str, exc: Exception) -> RunError:
    # Only the type: the text may hold a URL.
    logger.error("%s failed: %s", what, type(exc).__name__)
    return RunError.STORE_UNAVAILABLE if isinstance(exc, StoreError) else RunError.PROJECTION_FAILED


@app.task(name=PROJECT_RUN, acks_late=True)
def project_run(run_id: str) -> dict[str, Any]:
    """The run's bounded observed facts as JSON (never raw data), or an error line.

    Reads only: no canonical record, progress set or TTL is changed.
    """
    if not is_safe_id(run_id):
        return error_line(None, RunError.INVALID_RUN_ID)
    try:
        store = get_runtime().store
        facts = retrying(lambda: observe_run(store, run_id))
    except Exception as exc:
        return error_line(run_id, _failed(f"project_run {run_id}", exc))
    return facts.model_dump(mode="json")


@app.task(name=PROJECT_RUNS, acks_late=True)
def project_runs(run_ids: list[str]) -> str:
    """``project_run`` for a chunk of runs: one line per run id, in order, as the JSON text of
    the list of lines (``[]`` for arguments that are not a list of ids).

    Reads only, in two round trips for the chunk; a store failure makes every line of the
    chunk an error line.
    """
    if not isinstance(run_ids, list) or not all(isinstance(r, str) for r in run_ids):
        return "[]"
    try:
        store = get_runtime().store
        return retrying(lambda: observe_runs_text(store, run_ids))
    except Exception as exc:
        error = _failed(f"project_runs of {len(run_ids)} runs", exc)
        lines = [error_line(run_id if is_safe_id(run_id) else None, error) for run_id in run_ids]
    return json.dumps(lines, ensure_ascii=False, separators=(",", ":"))
