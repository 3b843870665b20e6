"""Exit codes of every tool-boundary process: the CLI, the demo and the workers.

Each failure ends in one line on stderr and one of these codes, never a traceback.
"""

from __future__ import annotations

import sys
from typing import NoReturn

#: Success.
EXIT_OK = 0
#: The record or run does not exist (or has expired; ``reproject --run``: nothing is sent),
#: a ``reproject --tool`` that neither the registry nor any record knows, ``observe
#: --projector-version V`` of a version no call of the run has; the demo: a call did not end
#: as scripted.
EXIT_NOT_FOUND = 1
#: Bad usage: unknown command or option, a missing argument or unsafe id, ``--run`` and
#: ``--all`` together or neither, invalid ``TOOL_BOUNDARY_*`` settings, a tool registry that
#: cannot be loaded.
EXIT_USAGE = 2
#: The store, broker, result backend or workers are unreachable (no worker consumes the
#: call queues: ``demo --no-worker``), or some runs could not be reprocessed (their lines
#: carry the error).
EXIT_UNAVAILABLE = 3
#: An unexpected internal error (a bug): its type is printed, never its message.
EXIT_INTERNAL = 4
#: ``reproject``: the job ended with projection failures (a CI dry run fails on a projector
#: that raises); the summary names them by tool and exception type.
EXIT_PROJECTIONS_FAILED = 5
#: ``reproject``: the followed job was cancelled from elsewhere (``jobs cancel``, the web view).
EXIT_CANCELLED = 6
#: Interrupted (Ctrl-C): 128 + SIGINT, as shells report it.
EXIT_INTERRUPTED = 130


def exit_with(message: str, code: int) -> NoReturn:
    """Prints ``error: <message>`` as one line on stderr and exits with ``code``."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)
