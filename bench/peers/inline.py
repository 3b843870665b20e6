"""Our worker with the tool and projector run on the task's own thread: the ablation that
measures what the time limits' thread hand-offs cost (``--ablate``).

Everything else is ours unchanged (tasks, store, settings, Celery configuration); only
``boundary.steps.run_bounded`` is replaced, so a tool or projector here has no time limit.
Never a way to run tools: it exists to be measured beside the real worker. Workers run
``celery -A bench.peers.inline worker -Q inline_tools,inline_projections``.
"""

from __future__ import annotations

import boundary.steps
from bench.peers.unbounded import run_on_this_thread
from tasks import app

__all__ = ["app"]

boundary.steps.run_bounded = run_on_this_thread
