"""Examples run from a checkout (not installed with the package): the PostgreSQL report tool
(``examples.pgreport:registry``), the agent framework examples (``examples/frameworks/``) and MCP
client configurations (``examples/mcp/``). The demo's tools travel with the package:
``tasks.demo.tools:registry``.
"""
