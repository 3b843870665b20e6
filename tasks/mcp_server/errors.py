"""The JSON-RPC errors the server answers with, on every revision: fixed codes and fixed
sentences, never an exception's text."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from boundary import ErrorCode
from tasks.mcp_server.results import TASKS_EXTENSION

logger = logging.getLogger(__name__)

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: The Tasks extension's code for a client that does not declare it.
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021


def method_not_found() -> MCPError:
    return MCPError(METHOD_NOT_FOUND, "Method not found")


def task_not_found() -> MCPError:
    return MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")


def store_unavailable() -> MCPError:
    return MCPError(INTERNAL_ERROR, ErrorCode.STORE_UNAVAILABLE.message)


def missing_tasks_capability() -> MCPError:
    """``tasks/*`` from a 2026-07-28 client that does not declare the Tasks extension."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def guarded(handler: Handler) -> Handler:
    """Any exception but a protocol error becomes one fixed ``-32603``: on a 2025-11-25
    connection the SDK would otherwise send the exception's text, which may hold a URL or a
    payload. Only the exception's type is logged."""

    @functools.wraps(handler)
    async def guarded(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except Exception as exc:
            logger.error("MCP %s failed: %s", ctx.method, type(exc).__name__)
            raise MCPError(INTERNAL_ERROR, "Internal error") from None

    return cast("Handler", guarded)
