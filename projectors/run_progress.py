"""The run progress projector, where the layout puts projectors.

It lives in ``boundary.progress`` because ``ToolBoundary.observe`` uses it and imports point
``tasks -> projectors -> boundary``; this module only re-exports it.
"""

from boundary.progress import EXCLUSION_REASONS, RunProgressProjector

__all__ = ["EXCLUSION_REASONS", "RunProgressProjector"]
