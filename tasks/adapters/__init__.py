"""Deprecated: the framework adapters moved to ``boundary.adapters`` (they import only
``boundary``, never Celery). ``tasks.adapters`` and its modules re-export the same objects for
one release; importing it warns (``DeprecationWarning``)."""

import warnings

from boundary.adapters import Call, outcome_text

warnings.warn(
    "tasks.adapters is deprecated: import boundary.adapters instead",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["Call", "outcome_text"]
