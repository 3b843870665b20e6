"""The ``tool-boundary mcp`` command (registered by ``tasks.cli``); the SDK is imported only
when it runs, so the CLI works without the ``mcp`` extra."""

from __future__ import annotations

import sys
from typing import Annotated, Literal, NoReturn

import typer
from pydantic import ValidationError

from boundary import ConfigurationError
from boundary.models import is_safe_id
from tasks.exits import EXIT_USAGE
from tasks.mcp_server.options import ServerOptions
from tasks.mcp_server.settings import DEFAULT_HOST, DEFAULT_PORT


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def mcp_command(
    transport: Annotated[
        Literal["stdio", "http"], typer.Option("--transport", help="stdio or http.")
    ] = "stdio",
    host: Annotated[
        str,
        typer.Option("--host", help="HTTP bind address; off loopback needs a token or issuers."),
    ] = DEFAULT_HOST,
    port: Annotated[int, typer.Option("--port", help="HTTP port.")] = DEFAULT_PORT,
    run: Annotated[
        str | None,
        typer.Option("--run", help=ServerOptions.model_fields["run_id"].description),
    ] = None,
    require_call_id: Annotated[
        bool,
        typer.Option(
            "--require-call-id", help=ServerOptions.model_fields["require_call_id"].description
        ),
    ] = False,
) -> None:
    """Serve the registry's tools over MCP (stdio or streamable HTTP), with durable Tasks.

    A request names its run (opened with ToolBoundary.open_run) in _meta
    "tool-boundary/run_id", or --run names one for the whole server. HTTP binds 127.0.0.1;
    any other address needs TOOL_BOUNDARY_MCP_TOKEN, sent by clients as a bearer token, or
    OAuth issuers (TOOL_BOUNDARY_MCP_RESOURCE and TOOL_BOUNDARY_MCP_AUTH_ISSUERS:
    docs/how-to/mcp-oauth.md).
    MCP has no call id: without --require-call-id the server mints one for a request whose
    _meta names none (returned in the result's _meta).
    """
    if run is not None and not is_safe_id(run):
        _fail(f"run id {run!r} is not a safe identifier")
    try:
        from tasks.mcp_server.main import serve
    except ImportError:
        _fail("the MCP server needs the mcp extra: pip install 'tool-boundary[mcp]'")
    try:
        serve(transport, host=host, port=port, run_id=run, require_call_id=require_call_id)
    except ConfigurationError as exc:
        _fail(exc.problem)
    except ValidationError as exc:
        names = sorted({"TOOL_BOUNDARY_MCP_" + str(e["loc"][0]).upper() for e in exc.errors()})
        _fail(f"invalid settings: {', '.join(names)}")
    except KeyboardInterrupt:
        sys.exit(0)
