"""Deprecated: moved to ``boundary.adapters.anthropic``; import it from there. This path keeps
working for one release (the same objects)."""

from boundary.adapters.anthropic import anthropic_tools, atool_results, tool_results

__all__ = ["anthropic_tools", "atool_results", "tool_results"]
