"""The demo's read-only tools and their registry, what workers load by default
(``TOOL_BOUNDARY_TOOLS=tasks.demo.tools:registry``).

Each tool is a plain function ``(arguments: dict) -> dict`` that checks its arguments and
returns a JSON-able raw response; a projector from ``projectors`` turns that into what the
agent sees. The data is bundled under ``tasks/demo/data`` and read in place, never written.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from boundary.registry import ToolRegistry, ToolSpec
from projectors.logs import LogSearchProjector
from projectors.rag import DocumentSearchProjector
from projectors.sql import SqlRowsProjector
from tasks.demo import logsearch, sqlread
from tasks.demo.arguments import check_keys, int_arg, text_arg
from tasks.demo.bundled import DB_PATH, DOCS_DIR, LOG_PATH
from tasks.demo.docsearch import DocumentIndex
from tasks.demo.long_scan import audit_metrics_spec, scan_metrics_spec

#: Names the database in scopes.
DB_CORPUS = "orbit.db"

#: Longest query accepted by the search tools.
MAX_QUERY_CHARS = 200
#: Longest SQL statement accepted, and most bound parameters.
MAX_SQL_CHARS = 10_000
MAX_SQL_PARAMS = 100
#: Hits a document search returns by default and at most.
DEFAULT_DOC_LIMIT = 10
MAX_DOC_LIMIT = 50
#: Time limits inside the tools, below their ``timeout_s`` so they stop on their own.
SQL_TIME_LIMIT_S = 10.0
DUMP_TIME_LIMIT_S = 20.0

_SCALARS = (str, int, float, type(None))


def _text(max_chars: int, description: str) -> dict[str, Any]:
    # A non-blank string: the tools strip it and refuse what is left empty.
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_chars,
        "pattern": r"\S",
        "description": description,
    }


def _object(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


#: The arguments each tool takes, as JSON Schema: what preflight checks and the frameworks
#: show the model. The tools check the same rules again (they are callable on their own).
SEARCH_DOCS_SCHEMA = _object(
    {
        "query": _text(MAX_QUERY_CHARS, "Words to look for in the runbooks."),
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_DOC_LIMIT,
            "default": DEFAULT_DOC_LIMIT,
            "description": "Most sections to return.",
        },
    },
    "query",
)
SEARCH_LOGS_SCHEMA = _object(
    {
        "query": _text(MAX_QUERY_CHARS, "Text a log line must contain."),
        "level": {
            "type": "string",
            "enum": [*logsearch.LEVELS, *(level.lower() for level in logsearch.LEVELS)],
            "description": "Only lines of this level.",
        },
        "service": _text(64, "Only lines of this service (e.g. api, billing)."),
    },
    "query",
)
SQL_READ_SCHEMA = _object(
    {
        "sql": _text(MAX_SQL_CHARS, "One read-only SQLite statement; ? marks a parameter."),
        "params": {
            "type": "array",
            "maxItems": MAX_SQL_PARAMS,
            "items": {"type": ["string", "number", "null"]},
            "description": "Values bound to the statement's ? marks, in order.",
        },
    },
    "sql",
)
DUMP_TABLE_SCHEMA = _object({"table": _text(64, "A table or view of the database.")}, "table")
DELETE_ROWS_SCHEMA = _object(
    {"table": _text(64, "The table."), "where": _text(1000, "An SQL condition.")}, "table"
)


@cache
def _document_index() -> DocumentIndex:
    # Built once per process: the bundled documents do not change while it runs.
    return DocumentIndex.from_directory(DOCS_DIR)


def search_docs(arguments: dict[str, Any]) -> dict[str, Any]:
    """Ranks the Orbit API runbooks' sections for ``query`` (BM25); ``limit`` hits at most."""
    args = check_keys(arguments, {"query", "limit"})
    query = text_arg(args, "query", max_chars=MAX_QUERY_CHARS)
    assert query is not None
    limit = int_arg(args, "limit", default=DEFAULT_DOC_LIMIT, low=1, high=MAX_DOC_LIMIT)
    return {"query": query, "hits": _document_index().search(query, limit)}


def search_logs(arguments: dict[str, Any]) -> dict[str, Any]:
    """Every line of the Orbit API log containing ``query``, optionally of one ``level``
    (INFO, WARN, ERROR) and one ``service``."""
    args = check_keys(arguments, {"query", "level", "service"})
    query = text_arg(args, "query", max_chars=MAX_QUERY_CHARS)
    assert query is not None
    level = text_arg(args, "level", max_chars=8, required=False)
    if level is not None and level.upper() not in logsearch.LEVELS:
        raise ValueError(f"level must be one of {logsearch.LEVELS}")
    service = text_arg(args, "service", max_chars=64, required=False)
    lines = logsearch.search(
        LOG_PATH, query, level=level.upper() if level else None, service=service
    )
    return {"query": query, "lines": lines}


def sql_read(arguments: dict[str, Any]) -> dict[str, Any]:
    """Runs one read-only SQL statement (with optional ``params``) on the Orbit database."""
    args = check_keys(arguments, {"sql", "params"})
    sql = text_arg(args, "sql", max_chars=MAX_SQL_CHARS)
    assert sql is not None
    params = args.get("params", [])
    if (
        not isinstance(params, list)
        or len(params) > MAX_SQL_PARAMS
        or not all(isinstance(p, _SCALARS) for p in params)
    ):
        raise ValueError(f"params must be a list of at most {MAX_SQL_PARAMS} scalars")
    return sqlread.run_query(DB_PATH, sql, params, time_limit_s=SQL_TIME_LIMIT_S)


def dump_table(arguments: dict[str, Any]) -> dict[str, Any]:
    """Every row of one table or view, uncapped.

    Deliberately unbounded: dumping ``request_metrics`` gives about 1.7 MB, over the
    boundary's default raw limit, so the call shows ERROR/RESULT_TOO_LARGE (the raw response
    is neither stored nor truncated). The small tables dump fine.
    """
    args = check_keys(arguments, {"table"})
    table = text_arg(args, "table", max_chars=64)
    if table not in sqlread.readable_tables(DB_PATH):
        raise ValueError("table must name a table or view of the database")
    # The name is one of the database's own (checked above), quoted as an identifier.
    quoted = '"' + table.replace('"', '""') + '"'
    result = sqlread.run_query(
        DB_PATH,
        f"SELECT * FROM {quoted}",  # noqa: S608
        max_rows=None,
        time_limit_s=DUMP_TIME_LIMIT_S,
    )
    return {"table": table, **result}


def delete_rows(arguments: dict[str, Any]) -> dict[str, Any]:
    """A write tool, registered ``read_only=False`` to show that preflight refuses it.

    It never touches the data even if called: the example must stay harmless when the
    boundary is misused, so it fails instead of deleting.
    """
    check_keys(arguments, {"table", "where"})
    raise PermissionError("delete_rows is a write tool; the boundary never runs it")


def build_registry() -> ToolRegistry:
    """The six example tools with their projectors and time limits."""
    return ToolRegistry(
        [
            ToolSpec(
                name="search_docs",
                executor=search_docs,
                description=(
                    "Search the Orbit API runbooks; returns the best matching sections"
                    " with their sources."
                ),
                input_schema=SEARCH_DOCS_SCHEMA,
                projector=DocumentSearchProjector(),
                read_only=True,
                timeout_s=10,
            ),
            ToolSpec(
                name="search_logs",
                executor=search_logs,
                description=(
                    "Find lines of the Orbit API log that contain a text, optionally of"
                    " one level and one service."
                ),
                input_schema=SEARCH_LOGS_SCHEMA,
                projector=LogSearchProjector(),
                read_only=True,
                timeout_s=10,
            ),
            ToolSpec(
                name="sql_read",
                executor=sql_read,
                description=(
                    "Run one read-only SQL statement on the Orbit database (services,"
                    " incidents, deploys, request_metrics)."
                ),
                input_schema=SQL_READ_SCHEMA,
                projector=SqlRowsProjector(corpus=DB_CORPUS),
                read_only=True,
                timeout_s=SQL_TIME_LIMIT_S + 5,
            ),
            ToolSpec(
                name="dump_table",
                executor=dump_table,
                description="Every row of one table or view of the Orbit database, uncapped.",
                input_schema=DUMP_TABLE_SCHEMA,
                projector=SqlRowsProjector(corpus=DB_CORPUS, scope_keys=("table",)),
                read_only=True,
                timeout_s=DUMP_TIME_LIMIT_S + 10,
            ),
            ToolSpec(
                name="delete_rows",
                executor=delete_rows,
                description="Delete rows of a table (a write tool: preflight refuses it).",
                input_schema=DELETE_ROWS_SCHEMA,
                projector=SqlRowsProjector(corpus=DB_CORPUS, scope_keys=("table", "where")),
                read_only=False,
                timeout_s=5,
            ),
            scan_metrics_spec(DB_CORPUS),
            audit_metrics_spec(DB_CORPUS),
        ]
    )


#: The registry workers and the CLI load (``TOOL_BOUNDARY_TOOLS=tasks.demo.tools:registry``).
registry = build_registry()
