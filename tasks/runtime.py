"""What tasks need at run time (store, registry, settings), built once per process."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from boundary import (
    ConfigurationError,
    RedisCanonicalStore,
    ToolBoundary,
    ToolRegistry,
    load_registry,
)
from boundary.dispatch import Dispatcher
from tasks.exits import EXIT_USAGE, exit_with
from tasks.settings import InvalidSettings, Settings, load_settings


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    store: RedisCanonicalStore
    registry: ToolRegistry

    def boundary(self, dispatcher: Dispatcher) -> ToolBoundary:
        """A boundary on this runtime's store and registry (``boundary_from_settings``)."""
        return boundary_from_settings(self.settings, self.registry, dispatcher, store=self.store)


def registry_or_empty(settings: Settings) -> ToolRegistry:
    """The tools of ``TOOL_BOUNDARY_TOOLS``, or none when they cannot be loaded: for the
    programs that only read their declared limits (the limits command, the web view) and work
    without them."""
    try:
        return load_registry(settings.tools)
    except ConfigurationError:
        return ToolRegistry()


def store_from_settings(settings: Settings) -> RedisCanonicalStore:
    """The canonical store ``settings`` name."""
    return RedisCanonicalStore.from_url(
        settings.store_url,
        ttl_s=settings.ttl_s,
        limits=settings.limits,
        cluster=settings.store_is_cluster(),
        memory_watermark=settings.memory_watermark,
        wait_replicas=settings.redis_wait_replicas,
    )


def boundary_from_settings(
    settings: Settings,
    registry: ToolRegistry,
    dispatcher: Dispatcher,
    *,
    store: RedisCanonicalStore | None = None,
) -> ToolBoundary:
    """The ``ToolBoundary`` ``settings`` name, as every process builds it: workers (through
    ``get_runtime``), the programs and ``tasks.boundary_from_env`` alike, so a caller and
    its workers agree on limits, TTL, Cluster mode, memory watermark, replicas and the
    pending and reap times. ``store``: one built from ``settings`` already
    (``store_from_settings``), else one is built."""
    return ToolBoundary(
        store=store if store is not None else store_from_settings(settings),
        registry=registry,
        dispatcher=dispatcher,
        max_pending_s=settings.max_pending_s,
        reap_grace_s=settings.reap_grace_s,
    )


_lock = threading.Lock()
_settings: Settings | None = None
_registry: ToolRegistry | None = None
_runtime: Runtime | None = None


def configure_runtime(settings: Settings, registry: ToolRegistry | None = None) -> None:
    """Replaces the process's settings (and optionally the registry object itself)."""
    global _settings, _registry, _runtime
    with _lock:
        _settings, _registry, _runtime = settings, registry, None


def get_settings() -> Settings:
    """The process's settings, from the environment on first use.

    Raises:
        InvalidSettings: a ``TOOL_BOUNDARY_*`` variable does not validate.
    """
    global _settings
    with _lock:
        if _settings is None:
            _settings = load_settings()
        return _settings


def exit_on_invalid_settings() -> None:
    """Ends the process with one line and ``EXIT_USAGE`` when the settings do not validate."""
    try:
        get_settings()
    except InvalidSettings as exc:
        exit_with(f"tool-boundary: {exc.problem}", EXIT_USAGE)


def get_runtime() -> Runtime:
    """The process's runtime; the registry is imported on first use.

    Raises:
        ConfigurationError: ``TOOL_BOUNDARY_TOOLS`` names no importable registry.
    """
    global _runtime
    settings = get_settings()
    with _lock:
        if _runtime is None:
            registry = _registry if _registry is not None else load_registry(settings.tools)
            store = store_from_settings(settings)
            _runtime = Runtime(settings=settings, store=store, registry=registry)
        return _runtime
