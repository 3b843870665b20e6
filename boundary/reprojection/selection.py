"""Which records a re-projection takes (``Selection``), and its runs read in pages of the
runs index (``keys.RUNS``) or of a given list, never by SCAN and never whole; ``count``
answers ``reproject --count`` from the runs' budget counters."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from boundary.models import CanonicalRecord, InvocationStatus
from boundary.store.codec import ms
from boundary.store.redis import RedisClient
from boundary.store.redis_side import run_counters, runs_count, runs_page

#: The statuses a selection may name (``--status``): the sealed ones.
SELECTABLE_STATUSES = (InvocationStatus.READY.value, InvocationStatus.ERROR.value)
#: Runs' budget counters read per pipeline by ``count``.
COUNT_BATCH = 2000


@dataclass(frozen=True)
class Selection:
    """Which records a re-projection takes: runs named (``runs``), or every run of the runs
    index (``all``, or any filter alone); within them, records of these tools, accepted in
    ``[since_ms, until_ms]``, in these statuses. Empty: a caller's error (select nothing by
    default)."""

    runs: tuple[str, ...] = ()
    all: bool = False
    tools: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None
    statuses: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.runs
            or self.all
            or self.tools
            or self.statuses
            or self.since_ms is not None
            or self.until_ms is not None
        )

    @property
    def filtered(self) -> bool:
        """True when tools or statuses narrow the records: a run then counts as selected
        only when it holds a matching record (as ``count`` counts it)."""
        return bool(self.tools or self.statuses)

    @property
    def by_index(self) -> bool:
        """True when the runs come from the runs index (not a list)."""
        return not self.runs

    def matches(self, record: CanonicalRecord) -> bool:
        if self.tools and record.tool_name not in self.tools:
            return False
        if self.statuses and record.status.value not in self.statuses:
            return False
        accepted = ms(record.created_at)
        if self.since_ms is not None and accepted < self.since_ms:
            return False
        return self.until_ms is None or accepted <= self.until_ms

    def as_json(self) -> dict[str, Any]:
        return {
            "runs": list(self.runs),
            "all": self.all,
            "tools": list(self.tools),
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
            "statuses": list(self.statuses),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Selection:
        return cls(
            runs=tuple(value.get("runs") or ()),
            all=bool(value.get("all")),
            tools=tuple(value.get("tools") or ()),
            since_ms=value.get("since_ms"),
            until_ms=value.get("until_ms"),
            statuses=tuple(value.get("statuses") or ()),
        )


def lane_of(run_id: str, lanes: int) -> int:
    """The lane (of ``lanes``) that takes the run: a stable hash of its id."""
    return zlib.crc32(run_id.encode("utf-8")) % lanes


def first_cursor(selection: Selection, *, now_ms: int, ttl_ms: int) -> str:
    """Where every lane starts: the list's first run, or the runs index from the first live
    run (scored after now; with ``since``, after its first possible expiry)."""
    if not selection.by_index:
        return "0"
    low = now_ms
    if selection.since_ms is not None:
        low = max(low, selection.since_ms + ttl_ms)
    return f"{low}:0"


def page_runs(
    client: RedisClient,
    selection: Selection,
    cursor: str,
    *,
    size: int,
    lane: int,
    lanes: int,
    high_ms: int,
) -> tuple[list[str], str]:
    """The lane's runs of the next page after ``cursor`` and the cursor after it ("" at the
    end). A page reads ``size * lanes`` runs of the selection (one ZRANGE of the runs index,
    by score then id, up to ``high_ms``: runs that took a call after the job started are left
    to a later job), of which about ``size`` are the lane's."""
    span = size * lanes
    if not selection.by_index:
        start = int(cursor)
        chunk = selection.runs[start : start + span]
        after = start + len(chunk)
        mine = [r for r in chunk if lane_of(r, lanes) == lane]
        return mine, (str(after) if after < len(selection.runs) else "")
    score_text, _, skip_text = cursor.partition(":")
    score, skip = int(score_text), int(skip_text or 0)
    members = runs_page(client, score, skip, high_ms, span)
    mine = [run_id for run_id, _ in members if lane_of(run_id, lanes) == lane]
    if len(members) < span:
        return mine, ""
    last = int(members[-1][1])
    same = sum(1 for _, s in members if int(s) == last)
    return mine, f"{last}:{same + skip if last == score else same}"


def indexed_runs(
    client: RedisClient, *, now_ms: int, ttl_ms: int, page: int = COUNT_BATCH
) -> tuple[int, Iterator[str]]:
    """Every live run of the runs index (``--all``), in its order (by the expiry of the run's
    newest record, then id), read a page (one ZRANGE) at a time as it is iterated, so the
    list is never held whole; and how many there are (one ZCOUNT, for a progress bar).
    Runs that take their first call afterwards are left out, as a job leaves them."""
    selection = Selection(all=True)
    high = now_ms + ttl_ms
    low = first_cursor(selection, now_ms=now_ms, ttl_ms=ttl_ms)

    def pages() -> Iterator[str]:
        cursor = low
        while cursor:
            runs, cursor = page_runs(
                client, selection, cursor, size=page, lane=0, lanes=1, high_ms=high
            )
            yield from runs

    return runs_count(client, now_ms, high), pages()


def count(client: RedisClient, selection: Selection, *, now_ms: int, ttl_ms: int) -> dict[str, Any]:
    """Runs and records of a selection from the runs index and each run's budget counters
    (pages of the index and pipelines of HMGET, never a SCAN). ``exact`` is false when the
    counters can only bound the records (a time window, or tools and statuses together)."""
    wanted = [f"tool:{t}" for t in selection.tools] or [
        f"sealed:{s}" for s in (selection.statuses or SELECTABLE_STATUSES)
    ]
    exact = selection.since_ms is None and selection.until_ms is None
    exact = exact and not (selection.tools and selection.statuses)
    runs = records = 0
    cursor = first_cursor(selection, now_ms=now_ms, ttl_ms=ttl_ms)
    high = now_ms + ttl_ms
    while cursor:
        page, cursor = page_runs(
            client, selection, cursor, size=COUNT_BATCH, lane=0, lanes=1, high_ms=high
        )
        for calls, *values in run_counters(client, page, ["calls", *wanted]):
            if calls is None:
                continue  # the run expired
            found = sum(int(v or 0) for v in values)
            if found or not (selection.tools or selection.statuses):
                runs += 1
            records += found
    return {"runs": runs, "records": records, "exact": exact}
