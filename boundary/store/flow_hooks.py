"""What a store tells the flow control of its process (``boundary.flow.Flow``), without
importing it: the store sits below the policy."""

from __future__ import annotations

from typing import Protocol

from boundary.models import CanonicalKey


class FlowHooks(Protocol):
    def sealed(self, key: CanonicalKey, tool: str, attempt: int | None = None) -> None:
        """The call was sealed (by any step, in this process): a limited tool's slot, or the
        call's place in line, is given up and the next call in line started. ``attempt``: the
        call's current attempt as the seal read it; a slot held by another attempt is left
        alone (fenced). Never raises: a slot it could not give up is found by the reaper."""

    def stale_holder(self, tool: str) -> None:
        """An attempt of ``tool`` was refused a step because another attempt has its call: for
        a limited tool, counted in its flow control (``limits`` shows it). Never raises."""
