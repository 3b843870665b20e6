"""Studies beside the suite, each its own ``python -m bench.studies.X``: the ceiling of one
Redis, scaling, one hop, flow control, long tools, kill soaks, MCP clients, telemetry cost,
the steps' own cost, schema validation, the reaper's first pass, the report tool, chaos."""
