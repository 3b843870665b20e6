"""Deprecated: moved to ``boundary.adapters.pydantic_ai``; import it from there. This path keeps
working for one release (the same objects)."""

from boundary.adapters.pydantic_ai import DEFAULT_MAX_RETRIES, BoundaryToolset, answer

__all__ = ["DEFAULT_MAX_RETRIES", "BoundaryToolset", "answer"]
