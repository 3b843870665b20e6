"""Our worker with the tool and projector run on the task's own thread: the ablation that
measures what the time limits' thread hand-offs cost (``--ablate``).

Everything else is ours unchanged (tasks, store, settings, Celery configuration); only the
execute and project steps' ``run_bounded`` is replaced, so a tool or projector here has no
time limit.
Never a way to run tools: it exists to be measured beside the real worker. Workers run
``celery -A bench.peers.inline worker -Q inline_tools,inline_projections``.
"""

from __future__ import annotations

import boundary.steps.execute
import boundary.steps.project
from bench.peers.unbounded import run_on_this_thread
from tasks import app

__all__ = ["app"]

boundary.steps.execute.run_bounded = run_on_this_thread
boundary.steps.project.run_bounded = run_on_this_thread
