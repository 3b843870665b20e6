"""Projectors: pure functions of (raw, request) that turn a tool's raw response into a small,
safe ``Projection`` for the agent, reusable by any tool of the same kind.

- ``DocumentSearchProjector``: ranked document hits (RAG) -> top-k snippets within a bound.
- ``LogSearchProjector``: matching log lines -> counts by level, time range, first lines.
- ``SqlRowsProjector``: columns and rows -> columns, first rows, total row count.
- ``RunProgressProjector``: a run's READY records -> bounded observed facts (re-exported from
  ``boundary.progress``, since ``ToolBoundary.observe`` uses it and imports point
  ``tasks -> projectors -> boundary``).
"""

from boundary.progress import EXCLUSION_REASONS, RunProgressProjector
from projectors._fit import MalformedRawError, ProjectionError, ProjectionTooLargeError
from projectors.logs import LogSearchProjector
from projectors.rag import DocumentSearchProjector
from projectors.sql import SqlRowsProjector

__all__ = [
    "EXCLUSION_REASONS",
    "DocumentSearchProjector",
    "LogSearchProjector",
    "MalformedRawError",
    "ProjectionError",
    "ProjectionTooLargeError",
    "RunProgressProjector",
    "SqlRowsProjector",
]
