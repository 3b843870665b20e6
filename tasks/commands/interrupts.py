"""Ctrl-C in ``tool-boundary``: one line, ``interrupted``, and ``EXIT_INTERRUPTED``."""

from __future__ import annotations

import logging
import os
from types import FrameType

from tasks.exits import EXIT_INTERRUPTED


class Interrupted(BaseException):
    """Ctrl-C, raised by our SIGINT handler: click would turn a ``KeyboardInterrupt`` into
    ``Aborted!`` and exit 1; this passes through it to ``main``."""


#: Set by the first Ctrl-C: whatever escapes after it is a consequence of the interruption
#: (code cut short mid-way, e.g. a queue emptied under the embedded worker), not a bug.
_interrupted = False


def was_interrupted() -> bool:
    return _interrupted


def on_sigint(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    if _interrupted:
        # A second Ctrl-C while the first one's clean-up runs: leave now.
        os._exit(EXIT_INTERRUPTED)
    # The process is ending: the embedded worker's complaints about calls cut short (its
    # store going away under them) would bury the one line that says what happened.
    logging.disable(logging.CRITICAL)
    _interrupted = True
    raise Interrupted()
