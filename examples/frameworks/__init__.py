"""One runnable, offline example per agent framework (``python -m examples.frameworks.NAME``).

Each plays a scripted model through the framework's own SDK (a mock HTTP transport with the
provider's JSON, or the framework's test model), against the demo's setup: an embedded
Redis-protocol server and a real Celery worker thread running the example tools (with
``TOOL_BOUNDARY_REDIS_URL`` set, that Redis instead). The lines that exist only to plug in
tool-boundary end with ``# glue``.
"""
