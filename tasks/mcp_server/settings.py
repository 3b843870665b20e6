"""The MCP server's settings (``TOOL_BOUNDARY_MCP_*``), apart from the workers' ones."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Where ``--transport http`` listens by default.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class MCPSettings(BaseSettings):
    """``TOOL_BOUNDARY_MCP_TOKEN`` is the HTTP bearer token: required to bind anywhere but
    loopback, enforced on loopback too when set. It is never logged or echoed."""

    model_config = SettingsConfigDict(env_prefix="TOOL_BOUNDARY_MCP_", extra="ignore")

    token: SecretStr | None = None
    #: ``pollIntervalMs`` suggested to task pollers.
    poll_interval_ms: int = Field(default=500, gt=0)
    #: How long a plain (not task-augmented) ``tools/call`` waits before cancelling the call.
    call_wait_s: float = Field(default=600.0, gt=0)
    #: Longest gap between two ``notifications/progress`` of a plain call that asked for them.
    progress_s: float = Field(default=5.0, gt=0)
    #: Every tool's ``execution.taskSupport`` on 2025-11-25 connections...
    task_support: Literal["forbidden", "optional", "required"] = "optional"
    #: ...unless named here, as JSON: ``{"slow_report": "required"}``.
    tool_task_support: dict[str, Literal["forbidden", "optional", "required"]] = {}
    #: Refuse calls whose ``_meta`` names no tool_call_id (``INVALID_TOOL_CALL_ID``).
    require_call_id: bool = False


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
