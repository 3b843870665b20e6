"""``tool-boundary mcp --transport http`` as an OAuth 2.1 resource server (the MCP
authorization profile): tokens from trusted issuers, checked on every request, decide which
tools a requester may call and whose runs and tasks it sees.

Needs the ``mcp-auth`` extra (PyJWT with ``cryptography``); imported only when an issuer is
configured (``TOOL_BOUNDARY_MCP_AUTH_ISSUERS`` or ``TOOL_BOUNDARY_MCP_AUTH_KEYS``).
"""
