"""Deprecated: moved to ``boundary.adapters.agents``; import it from there. This path keeps
working for one release (the same objects)."""

from boundary.adapters.agents import agent_tools

__all__ = ["agent_tools"]
