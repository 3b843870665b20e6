"""The start-up check of the store's Redis: eviction and persistence, in one clear line.

Records, duplicate marks and budgets are keys: an evicting ``maxmemory-policy`` drops them
silently (measured: 338 of 400 records gone under ``allkeys-lru``), so a worker refuses to
start on one. A Redis without persistence forgets them on restart (a spent budget and a used
tool_call_id were accepted again): a warning, or a refusal with
``TOOL_BOUNDARY_REQUIRE_PERSISTENCE=true``.
"""

from __future__ import annotations

import logging

from boundary import ConfigurationError, StoreError
from boundary.store import CanonicalStore
from tasks.settings import Settings

logger = logging.getLogger(__name__)


def check_store_server(store: CanonicalStore, settings: Settings) -> list[str]:
    """Returns the warnings to log; raises ``ConfigurationError`` (one line) on what must stop
    a worker. An unreachable store is judged before, by ``tasks.worker.startup`` (exit 3); one that
    went away since then only gets a warning here."""
    try:
        facts = store.server_facts()
    except StoreError:
        return ["the store's Redis did not answer the start-up check"]
    if facts is None:
        return []
    if facts.evicts:
        raise ConfigurationError(
            f"the store's Redis has maxmemory-policy {facts.maxmemory_policy}: it may evict "
            "records, duplicate marks and budgets; set maxmemory-policy noeviction"
        )
    warnings = []
    if not facts.persistent:
        problem = (
            "the store's Redis has no persistence (appendonly no, and no RDB snapshot since it "
            "started): a restart forgets records, duplicate marks and budgets; set appendonly yes"
        )
        if settings.require_persistence:
            raise ConfigurationError(problem)
        warnings.append(problem)
    if facts.maxmemory and settings.broker == settings.store_url:
        warnings.append(
            "the broker shares the store's Redis, which has a maxmemory: new calls are refused "
            "past TOOL_BOUNDARY_MEMORY_WATERMARK, but a full Redis refuses the broker's "
            "messages too; give the broker its own Redis"
        )
    return warnings
