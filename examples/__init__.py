"""Read-only example tools over bundled Orbit API data: documents, a log file, a database.

``examples.tools:registry`` is a ready ``ToolRegistry`` (``TOOL_BOUNDARY_TOOLS``).
"""
