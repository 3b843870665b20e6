"""What the ablation puts in place of the steps' ``run_bounded`` (``boundary.steps.execute``,
``boundary.steps.project``): the tool or projector run on the calling thread, without its
tool thread and hence without a time limit (the ``bench.peers.inline`` worker, and the
``inline`` side of ``bench.studies.steps``)."""

from __future__ import annotations

from typing import Any


def run_on_this_thread(executor: Any, arguments: Any, timeout_s: float, **_: Any) -> Any:
    """``run_bounded`` without its tool thread, hence without a time limit."""
    return executor(arguments)
