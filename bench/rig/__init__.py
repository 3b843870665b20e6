"""The rig the bench and the tests share: redis-servers, a Sentinel set, a Redis Cluster,
worker subprocesses and the settings they read from their environment, an MCP server process.

It imports ``tasks``, ``boundary`` and ``projectors`` only, never the rest of ``bench`` or the
tests, so both can import it.
"""
