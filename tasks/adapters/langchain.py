"""Deprecated: moved to ``boundary.adapters.langchain``; import it from there. This path keeps
working for one release (the same objects)."""

from boundary.adapters.langchain import BoundaryTool, langchain_tools, tool_node

__all__ = ["BoundaryTool", "langchain_tools", "tool_node"]
