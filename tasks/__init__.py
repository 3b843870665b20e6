"""``celery -A tasks worker``: the app with its tasks registered and its worker hooks
connected (``tasks.worker.signals``), and the dispatcher.

The rooms, by who runs them: ``settings``, ``runtime``, ``exits`` and ``views`` (shared by
everything below); ``wiring/`` (how a call travels through Celery, for callers and workers);
``worker/`` (only inside a worker); the programs ``cli/``, ``demo/``, ``web/`` and
``mcp_server/``. ``docs/explanation/architecture.md`` draws the tree."""

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
    # nothing. ``tasks.cli.main.main`` installs the commands' handler.
    signal.signal(signal.SIGINT, _interrupted_while_loading)

# Every worker hook, connected once (tasks.worker.signals); below, the tasks' modules.
import tasks.worker.signals  # noqa: E402, F401
from boundary import __version__ as __version__  # noqa: E402  (the release: boundary's)
from tasks.runtime import exit_on_invalid_settings  # noqa: E402
from tasks.wiring.app import app, configure  # noqa: E402
from tasks.wiring.dispatcher import CeleryDispatcher  # noqa: E402
from tasks.wiring.from_env import aboundary_from_env, boundary_from_env  # noqa: E402
from tasks.worker.calls import execute_tool, project_result, reap_stuck_calls  # noqa: E402
from tasks.worker.jobs import reproject_chunk  # noqa: E402
from tasks.worker.runs import project_run, project_runs  # noqa: E402

if "celery.bin.celery" in sys.modules:
    # Loaded by the ``celery`` command (worker, beat, flower): a bad setting ends it here, as
    # one line and exit 2, rather than as a traceback inside Celery's app loader.
    exit_on_invalid_settings()

__all__ = [
    # Calls: a caller's boundary from the settings the workers read, its dispatcher, the app.
    "CeleryDispatcher",
    "aboundary_from_env",
    "app",
    "boundary_from_env",
    "configure",
    # Worker steps: the Celery tasks ``celery -A tasks worker`` runs (sent by name; the
    # worker's other parts are reached through ``tasks.worker``).
    "execute_tool",
    "project_result",
    "project_run",
    "project_runs",
    "reap_stuck_calls",
    "reproject_chunk",
]
