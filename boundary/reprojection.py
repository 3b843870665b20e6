"""Re-projection: a run's sealed records projected again from their stored raw responses by
their tools' current projectors, the diff of the run's observed facts (sealed against new),
and side projections kept by projector version. No Celery here (``tasks.worker.jobs`` runs it).

The canonical record never changes: the new projection is compared, and with ``write`` kept
beside the record (``keys.side_key``), expiring with it. A selection of runs is read in pages
of the runs index (``keys.RUNS``) or of a given list, never by SCAN and never whole.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from boundary.limits import Limits
from boundary.models import (
    CanonicalRecord,
    EvidenceStatus,
    InvocationStatus,
    ObservedFact,
    ObservedFacts,
    is_safe_id,
)
from boundary.progress import RunProgressProjector
from boundary.registry import ToolRegistry
from boundary.steps import DEFAULT_PROJECTION_TIMEOUT_S, project_raw
from boundary.store.base import CanonicalStore, ProgressEntry, WriteStatus
from boundary.store.codec import ms
from boundary.store.redis import RedisClient
from boundary.store.redis_side import RedisSideProjections, run_counters, runs_count, runs_page

#: The statuses a selection may name (``--status``): the sealed ones.
SELECTABLE_STATUSES = (InvocationStatus.READY.value, InvocationStatus.ERROR.value)
#: The fields of a fact the diff compares (its version differs whenever the projector's does).
DIFF_FIELDS = ("evidence_status", "result", "scope")
#: Runs' budget counters read per pipeline by ``count``.
COUNT_BATCH = 2000
#: The kinds of change the totals count (besides runs and records).
TOTALS = (
    "runs",
    "runs_changed",
    "records",
    "records_changed",
    "added",
    "removed",
    "changed",
    "evidence_flips",
    "failed",
    "unreadable_runs",
    "written",
    "not_written",
)


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


# --- pages of a selection's runs ------------------------------------------------------------


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


# --- one record projected again -------------------------------------------------------------


def projected_again(
    registry: ToolRegistry,
    record: CanonicalRecord,
    raw: str,
    limits: Limits,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
) -> dict[str, str]:
    """The record's raw response projected by its tool's current projector, with the checks
    of a seal (evidence status, bounds): the side projection's fields (``redis_side``). A
    projector that raises or returns something invalid gives ``status`` ERROR and its code;
    ``projector_version`` is "" when the tool is not in ``registry``."""
    spec = registry.get(record.tool_name)
    version = spec.projector_version if spec is not None else ""
    result = project_raw(registry, record.model_copy(update={"raw": raw}), limits, timeout_s)
    if isinstance(result, tuple):
        outcome, agent_result, scope = result
        assert outcome.evidence_status is not None
        return {
            "status": InvocationStatus.READY.value,
            "evidence_status": outcome.evidence_status.value,
            "agent_result": agent_result,
            "scope": scope or "",
            "error_code": "",
            "projector_version": version,
        }
    # The diagnostic (exception type and frame) is not kept: the code says what failed.
    return {
        "status": InvocationStatus.ERROR.value,
        "evidence_status": EvidenceStatus.ERROR.value,
        "agent_result": "",
        "scope": "",
        "error_code": result.error_code.value,
        "projector_version": version,
    }


def with_side(record: CanonicalRecord, side: Mapping[str, str]) -> CanonicalRecord:
    """The record as the side projection ``side`` would have sealed it (a copy)."""
    return record.model_copy(
        update={
            "status": InvocationStatus(side["status"]),
            "evidence_status": EvidenceStatus(side["evidence_status"]),
            "agent_result": side.get("agent_result") or None,
            "scope": side.get("scope") or None,
            "error_code": side.get("error_code") or None,
            "projector_version": side.get("projector_version") or None,
        }
    )


# --- facts, old against new -----------------------------------------------------------------


def _fact_json(fact: ObservedFact) -> dict[str, Any]:
    return fact.model_dump(mode="json")


def facts_diff(
    old: ObservedFacts, new: ObservedFacts, failed: Mapping[str, str], max_failed: int
) -> dict[str, Any]:
    """What changed in a run's facts: facts added and removed (whole, as bounded as the facts
    are), fields changed (``DIFF_FIELDS``: an evidence flip is a change of
    ``evidence_status``), and the records whose new projection failed, with their codes (at
    most ``max_failed``; the rest counted in ``failed_omitted``)."""
    before = {f.tool_call_id: f for f in old.facts}
    after = {f.tool_call_id: f for f in new.facts}
    changed = []
    for call_id, fact in after.items():
        was = before.get(call_id)
        if was is None:
            continue
        was_json, now_json = _fact_json(was), _fact_json(fact)
        for name in DIFF_FIELDS:
            if was_json[name] != now_json[name]:
                changed.append(
                    {
                        "tool_call_id": call_id,
                        "field": name,
                        "before": was_json[name],
                        "after": now_json[name],
                    }
                )
    shown_failed = dict(list(failed.items())[:max_failed])
    diff: dict[str, Any] = {
        "added": [_fact_json(f) for f in new.facts if f.tool_call_id not in before],
        "removed": [_fact_json(f) for f in old.facts if f.tool_call_id not in after],
        "changed": changed,
        "failed": shown_failed,
    }
    if len(failed) > len(shown_failed):
        diff["failed_omitted"] = len(failed) - len(shown_failed)
    return diff


#: The evidence statuses a flip goes between (either way).
_FLIP = {EvidenceStatus.EVIDENCE_FOUND.value, EvidenceStatus.NO_EVIDENCE.value}


def _flip(change: Mapping[str, Any]) -> bool:
    if change["field"] != "evidence_status":
        return False
    return {change["before"], change["after"]} == _FLIP


@dataclass
class ChunkReport:
    """A chunk of runs re-projected: one report line per run, and the chunk's totals."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    totals: Counter[str] = field(default_factory=Counter)


class Reprojector:
    """Re-projects runs' records (``Selection.matches``) and reports each run's diff; with
    ``write``, keeps each new projection as a side projection by version.

    Args:
        store: the canonical store (a Redis one: raws and side projections are read by
            pipeline on its client).
        registry: the tools with their current projectors.
        write: keep side projections (else a dry run: nothing is written).
    """

    def __init__(
        self,
        store: CanonicalStore,
        registry: ToolRegistry,
        *,
        write: bool = False,
        timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
    ) -> None:
        side = RedisSideProjections.of(store)
        if side is None:
            raise TypeError("re-projection needs a Redis canonical store")
        self.store = store
        self.registry = registry
        self.write = write
        self.timeout_s = timeout_s
        self.side = side
        self.limits: Limits = store.limits
        self.facts = RunProgressProjector(
            max_facts=self.limits.max_facts, max_facts_bytes=self.limits.max_facts_bytes
        )

    def runs(self, run_ids: Sequence[str], selection: Selection) -> ChunkReport:
        """One line per run (in order) and the totals: three round trips for the records
        (progress, raws, and with ``write`` the side projections), whatever the runs."""
        report = ChunkReport()
        safe = [run_id for run_id in run_ids if is_safe_id(run_id)]
        progress = self.store.progress_many(safe) if safe else {}
        chosen: list[CanonicalRecord] = []
        for run_id in safe:
            for entry in progress[run_id]:
                record = entry.record
                if (
                    record is not None
                    and record.run_id == run_id
                    and record.status is not InvocationStatus.PROJECTING
                    and selection.matches(record)
                ):
                    chosen.append(record)
        raws = self.side.raws([r.key for r in chosen])
        sides: dict[str, dict[str, str]] = {}
        kept: list[tuple[CanonicalRecord, dict[str, str]]] = []
        for record, raw in zip(chosen, raws, strict=True):
            if raw is None:
                continue  # an ERROR record whose raw response was never kept
            side = projected_again(self.registry, record, raw, self.limits, self.timeout_s)
            sides[record.key.identity] = side
            if side["projector_version"]:
                kept.append((record, side))
        written: dict[str, WriteStatus] = {}
        if self.write:
            statuses = self.side.write(kept)
            written = {r.key.identity: s for (r, _), s in zip(kept, statuses, strict=True)}
        for run_id in run_ids:
            if run_id not in progress:
                report.lines.append({"run_id": None, "error": "INVALID_RUN_ID"})
                report.totals["unreadable_runs"] += 1
                continue
            report.lines.append(
                self._run_line(run_id, progress[run_id], sides, written, report.totals)
            )
        return report

    def _run_line(
        self,
        run_id: str,
        entries: list[ProgressEntry],
        sides: Mapping[str, dict[str, str]],
        written: Mapping[str, WriteStatus],
        totals: Counter[str],
    ) -> dict[str, Any]:
        new_entries = []
        failed: dict[str, str] = {}
        failed_changed: set[str] = set()
        records = 0
        for entry in entries:
            side = sides.get(entry.key.identity) if entry.key is not None else None
            if side is None or entry.record is None:
                new_entries.append(entry)
                continue
            records += 1
            record = entry.record
            if side["error_code"]:
                failed[record.tool_call_id] = side["error_code"]
                totals["failed"] += 1
                totals[f"failed:{side['error_code']}"] += 1
                if record.error_code is None or record.error_code.value != side["error_code"]:
                    failed_changed.add(record.tool_call_id)
            new_entries.append(replace(entry, record=with_side(record, side)))
        old = self.facts.project(run_id, entries)
        new = self.facts.project(run_id, new_entries)
        diff = facts_diff(old, new, failed, self.limits.max_facts)
        touched = (
            {f["tool_call_id"] for f in diff["added"]}
            | {f["tool_call_id"] for f in diff["removed"]}
            | {c["tool_call_id"] for c in diff["changed"]}
            | failed_changed
        )
        totals["runs"] += 1
        totals["records"] += records
        totals["records_changed"] += len(touched)
        totals["runs_changed"] += bool(touched)
        totals["added"] += len(diff["added"])
        totals["removed"] += len(diff["removed"])
        totals["changed"] += len(diff["changed"])
        totals["evidence_flips"] += sum(1 for c in diff["changed"] if _flip(c))
        line: dict[str, Any] = {
            "run_id": run_id,
            "changed": bool(touched),
            "records": records,
            "diff": diff,
        }
        if self.write:
            mine = [
                status
                for entry in entries
                if entry.key is not None and (status := written.get(entry.key.identity))
            ]
            line["written"] = sum(1 for s in mine if s is WriteStatus.OK)
            totals["written"] += line["written"]
            totals["not_written"] += len(mine) - line["written"]
        return line


# --- facts by projector version ----------------------------------------------------------


def entries_by_version(
    store: CanonicalStore, run_id: str, version: str, entries: list[ProgressEntry]
) -> list[ProgressEntry]:
    """The run's progress entries with each sealed record replaced by its side projection of
    ``version`` where one is kept (one pipelined read)."""
    side = RedisSideProjections.of(store)
    if side is None or not is_safe_id(version):
        return entries
    sealed = [
        n
        for n, e in enumerate(entries)
        if e.key is not None
        and e.record is not None
        and e.record.run_id == run_id
        and e.record.status is not InvocationStatus.PROJECTING
    ]
    found = side.read([entries[n].key for n in sealed], version)  # type: ignore[misc]
    out = list(entries)
    for n, fields in zip(sealed, found, strict=True):
        record = entries[n].record
        if fields.get("status") and record is not None:
            out[n] = replace(entries[n], record=with_side(record, fields))
    return out


def observe_version(
    store: CanonicalStore,
    run_id: str,
    version: str,
    projector: RunProgressProjector,
    now: float | None = None,
) -> ObservedFacts:
    """The run's observed facts built from its side projections of ``version`` where present
    (its sealed projections elsewhere)."""
    if not is_safe_id(run_id):
        return projector.project(run_id, [], now=now)
    entries = entries_by_version(store, run_id, version, store.progress(run_id))
    return projector.project(run_id, entries, now=now)


def summary(totals: Mapping[str, int]) -> dict[str, Any]:
    """A job's totals as the report's summary: every kind, failures by code."""
    out: dict[str, Any] = {name: int(totals.get(name, 0)) for name in TOTALS}
    out["failed_by_code"] = {
        name.split(":", 1)[1]: int(value)
        for name, value in sorted(totals.items())
        if name.startswith("failed:")
    }
    return out


def dumps_lines(lines: Iterable[Mapping[str, Any]]) -> list[str]:
    return [json.dumps(line, ensure_ascii=False, sort_keys=True) for line in lines]
