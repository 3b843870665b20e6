"""``tool-boundary mcp``: the registry's tools over MCP (stdio and streamable HTTP), with the
Tasks extension answered from the canonical records.

Needs the ``mcp`` extra (``pip install 'tool-boundary[mcp]'``). Nothing is imported here, so
the CLI loads without it; import ``tasks.mcp_server.server`` for ``build_server``.
"""
