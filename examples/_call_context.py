"""The call context the example tools use: ``boundary``'s own, or a stand-in until it lands.

The stand-in behaves as the real functions do outside a tool: ``heartbeat`` does nothing,
``current_call`` answers ``None``, and ``CallCancelled`` is never raised.
"""

from __future__ import annotations

try:
    from boundary import CallCancelled, current_call, heartbeat
except ImportError:  # pragma: no cover - removed once boundary has the call context

    class CallCancelled(Exception):  # type: ignore[no-redef]
        """Raised by ``heartbeat()`` once the running call is no longer the tool's."""

    def heartbeat(progress: float | None = None, message: str | None = None) -> None:  # type: ignore[misc]
        """Does nothing: no call context here."""

    def current_call() -> None:  # type: ignore[misc]
        """``None``: no call context here."""


__all__ = ["CallCancelled", "current_call", "heartbeat"]
