"""Celery wiring: the app, its tasks and the dispatcher (``celery -A tasks worker``)."""

import os
import signal
import sys
from types import FrameType

from tasks.exits import EXIT_INTERRUPTED


def _interrupted_while_loading(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"\ninterrupted\n")
    os._exit(EXIT_INTERRUPTED)


if os.path.basename(sys.argv[0]) == "tool-boundary":
    # The console script: Ctrl-C while its modules load (over a second on a loaded machine;
    # 22 of 40 Ctrl-C 0.8-2.5 s after start came then) ends with the same one line as later,
    # not a KeyboardInterrupt traceback. Nothing is started yet: leaving at once loses
    # nothing. ``tasks.cli.main`` installs the commands' handler.
    signal.signal(signal.SIGINT, _interrupted_while_loading)

from tasks.app import app, configure  # noqa: E402
from tasks.calls import execute_tool, project_result, reap_stuck_calls  # noqa: E402
from tasks.dispatcher import CeleryDispatcher  # noqa: E402
from tasks.jobs import reproject_chunk as reproject_chunk  # noqa: E402
from tasks.metrics_endpoint import MetricsEndpoint as MetricsEndpoint  # noqa: E402
from tasks.runs import project_run as project_run  # noqa: E402
from tasks.runs import project_runs as project_runs  # noqa: E402
from tasks.runtime import exit_on_invalid_settings  # noqa: E402
from tasks.trace_logs import TraceIds as TraceIds  # noqa: E402

if "celery.bin.celery" in sys.modules:
    # Loaded by the ``celery`` command (worker, beat, flower): a bad setting ends it here, as
    # one line and exit 2, rather than as a traceback inside Celery's app loader.
    exit_on_invalid_settings()

__all__ = [
    "CeleryDispatcher",
    "app",
    "configure",
    "execute_tool",
    "project_result",
    "reap_stuck_calls",
]
