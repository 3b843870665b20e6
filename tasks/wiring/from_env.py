"""A caller's boundary from the ``TOOL_BOUNDARY_*`` settings the workers read.

``boundary_from_env`` (and ``aboundary_from_env`` for an event loop) build the caller's
``ToolBoundary`` through the same function the workers' runtime uses
(``tasks.runtime.boundary_from_settings``): one set of settings, one way to read them, so a
caller cannot disagree with its own workers on limits, TTL or Cluster mode.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

from boundary import ToolBoundary, ToolRegistry
from boundary.dispatch import Dispatcher
from tasks.runtime import boundary_from_settings, get_settings
from tasks.settings import InvalidSettings, Settings
from tasks.wiring.app import app, create_app
from tasks.wiring.dispatcher import CeleryDispatcher


def settings_with(overrides: dict[str, Any]) -> Settings:
    """The process's settings (``tasks.runtime.get_settings``) with ``overrides`` (settings
    fields by name) put over them and validated again.

    Raises:
        TypeError: an override names no setting.
        InvalidSettings: the environment's settings or an override do not validate (names
            only, never a value).
    """
    settings = get_settings()
    if not overrides:
        return settings
    unknown = sorted(set(overrides) - set(Settings.model_fields))
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(unknown)}")
    try:
        return Settings.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        names = sorted({"TOOL_BOUNDARY_" + str(err["loc"][0]).upper() for err in exc.errors()})
        raise InvalidSettings(names) from None


def boundary_from_env(
    registry: ToolRegistry, *, dispatcher: Dispatcher | None = None, **overrides: Any
) -> ToolBoundary:
    """The caller's ``ToolBoundary``, built from the ``TOOL_BOUNDARY_*`` settings exactly as
    the workers build theirs: the store at ``TOOL_BOUNDARY_REDIS_URL`` with the byte limits,
    the TTL, Cluster mode (``TOOL_BOUNDARY_REDIS_CLUSTER``, or asked of the server), the
    memory watermark and the replicas to wait for; the boundary with the pending and reap
    times. Calls go through ``CeleryDispatcher`` on the app workers run (``tasks.app``).

    ```python
    from tasks import boundary_from_env
    from mypkg.tools import registry

    boundary = boundary_from_env(registry)
    outcome = boundary.invoke(call, run, timeout=30)
    ```

    Args:
        registry: the tools callers may call (the workers load the same ones through
            ``TOOL_BOUNDARY_TOOLS``).
        dispatcher: how calls reach the workers; by default a ``CeleryDispatcher`` on
            ``tasks.app`` (on an app of their own settings when there are ``overrides``).
        **overrides: settings by field name (``ttl_s=600``, ``redis_url="redis://..."``,
            ``max_raw_bytes=...``) put over the environment's. Workers do not see them:
            give them the same values, or the two disagree.

    Raises:
        InvalidSettings: a ``TOOL_BOUNDARY_*`` variable or an override does not validate.
        TypeError: an override names no setting.
        StoreUnavailable: a Redis Cluster's nodes cannot be reached (its client reads the
            slot map at once; a plain Redis is only connected to on first use).
    """
    settings = settings_with(overrides)
    if dispatcher is None:
        dispatcher = CeleryDispatcher(create_app(settings) if overrides else app)
    return boundary_from_settings(settings, registry, dispatcher)


async def aboundary_from_env(
    registry: ToolRegistry, *, dispatcher: Dispatcher | None = None, **overrides: Any
) -> ToolBoundary:
    """``boundary_from_env`` for an event loop: the same boundary, built on a thread (asking
    the server whether it is a Cluster node, and a Cluster client's slot map, are network
    round trips that must not block the loop). Its async calls (``ainvoke``, ``aoutcome``,
    ``asubmit_many``...) then use the store's asyncio side.

    ```python
    boundary = await aboundary_from_env(registry)
    outcome = await boundary.ainvoke(call, run, timeout=30)
    await boundary.aclose()
    ```

    Arguments and errors as ``boundary_from_env``.
    """
    return await asyncio.to_thread(boundary_from_env, registry, dispatcher=dispatcher, **overrides)
