"""Records projected again: each selected record's raw response by its tool's current
projector, with the checks of a seal; a run's diff (``diff.facts_diff``) and a chunk's totals;
with ``write``, each new projection kept as a side projection by version (never a failed
one, never one of the version the record was sealed with)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from boundary.diagnostics import Diagnostic
from boundary.limits import Limits
from boundary.models import CanonicalRecord, EvidenceStatus, InvocationStatus, is_safe_id
from boundary.progress import RunProgressProjector
from boundary.registry import ToolRegistry
from boundary.reprojection.diff import facts_diff, flip_of, tool_total, why_total
from boundary.reprojection.selection import Selection
from boundary.steps import DEFAULT_PROJECTION_TIMEOUT_S, project_raw
from boundary.store.base import CanonicalStore, ProgressEntry, WriteStatus
from boundary.store.redis_side import RedisSideProjections


def projected_again(
    registry: ToolRegistry,
    record: CanonicalRecord,
    raw: str,
    limits: Limits,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
) -> dict[str, str]:
    """The side projection's fields (``redis_side``) of ``reprojected`` (without why it
    failed)."""
    return reprojected(registry, record, raw, limits, timeout_s)[0]


def reprojected(
    registry: ToolRegistry,
    record: CanonicalRecord,
    raw: str,
    limits: Limits,
    timeout_s: float = DEFAULT_PROJECTION_TIMEOUT_S,
) -> tuple[dict[str, str], Diagnostic | None]:
    """The record's raw response projected by its tool's current projector, with the checks
    of a seal (evidence status, bounds): the side projection's fields, and why it failed. A
    projector that raises or returns something invalid gives ``status`` ERROR, its code and
    the live path's diagnostic (code, exception type, frame; never the message);
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
        }, None
    return {
        "status": InvocationStatus.ERROR.value,
        "evidence_status": EvidenceStatus.ERROR.value,
        "agent_result": "",
        "scope": "",
        "error_code": result.error_code.value,
        "projector_version": version,
    }, result


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


def failure_type(diagnostic: Diagnostic) -> str:
    """What a failure counts under: its exception's type, or its code (no exception)."""
    return diagnostic.exception_type or diagnostic.error_code.value


@dataclass
class ChunkReport:
    """A chunk of runs re-projected: one report line per run, the chunk's totals, and its
    failures by ``(tool, code, diagnostic summary)`` (counted in the totals too, by
    ``why_total``: the job's one worker WARNING each, when it ends)."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    totals: Counter[str] = field(default_factory=Counter)
    failures: Counter[tuple[str, str, str]] = field(default_factory=Counter)


@dataclass
class _Run:
    """What a chunk learnt of its records, by identity."""

    sides: dict[str, dict[str, str]] = field(default_factory=dict)
    why: dict[str, Diagnostic] = field(default_factory=dict)
    written: dict[str, WriteStatus | None] = field(default_factory=dict)


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
        found = _Run()
        kept: list[tuple[CanonicalRecord, dict[str, str]]] = []
        for record, raw in zip(chosen, raws, strict=True):
            if raw is None:
                continue  # an ERROR record whose raw response was never kept
            if self.registry.get(record.tool_name) is None:
                # No projector to compare with: counted apart, never a projection failure.
                tool = record.tool_name
                report.totals["not_registered"] += 1
                report.totals[tool_total(tool, "not_registered")] += 1
                report.totals[tool_total(tool, f"version:{record.projector_version or ''}>")] += 1
                continue
            side, why = reprojected(self.registry, record, raw, self.limits, self.timeout_s)
            identity = record.key.identity
            found.sides[identity] = side
            if why is not None:
                found.why[identity] = why
                summary = why.summary()
                report.failures[(record.tool_name, why.error_code.value, summary)] += 1
                report.totals[why_total(record.tool_name, why.error_code.value, summary)] += 1
            elif side["projector_version"] == (record.projector_version or ""):
                found.written[identity] = None  # the sealed version: nothing to keep
            elif side["projector_version"]:
                kept.append((record, side))
        if self.write:
            statuses = self.side.write(kept)
            for (record, _), status in zip(kept, statuses, strict=True):
                found.written[record.key.identity] = status
        for run_id in run_ids:
            if run_id not in progress:
                report.lines.append({"run_id": None, "error": "INVALID_RUN_ID"})
                report.totals["unreadable_runs"] += 1
                continue
            line = self._run_line(run_id, progress[run_id], found, report.totals, selection)
            report.lines.append(line)
        return report

    def _run_line(
        self,
        run_id: str,
        entries: list[ProgressEntry],
        found: _Run,
        totals: Counter[str],
        selection: Selection,
    ) -> dict[str, Any]:
        new_entries = []
        failed: dict[str, str] = {}
        diagnostics: dict[str, dict[str, Any]] = {}
        failed_changed: set[str] = set()
        tool_of: dict[str, str] = {}
        for entry in entries:
            side = found.sides.get(entry.key.identity) if entry.key is not None else None
            if side is None or entry.record is None or entry.key is None:
                new_entries.append(entry)
                continue
            record = entry.record
            tool = record.tool_name
            tool_of[record.tool_call_id] = tool
            totals[tool_total(tool, "records")] += 1
            sealed_version = record.projector_version or ""
            version = f"version:{sealed_version}>{side['projector_version']}"
            totals[tool_total(tool, version)] += 1
            if side["error_code"]:
                failed[record.tool_call_id] = side["error_code"]
                totals["failed"] += 1
                totals[f"failed:{side['error_code']}"] += 1
                why = found.why.get(entry.key.identity)
                if why is not None:
                    diagnostics[record.tool_call_id] = why.model_dump(
                        mode="json", exclude_none=True
                    )
                    totals[tool_total(tool, f"failed:{failure_type(why)}")] += 1
                if record.error_code is None or record.error_code.value != side["error_code"]:
                    failed_changed.add(record.tool_call_id)
            new_entries.append(replace(entry, record=with_side(record, side)))
        records = len(tool_of)
        old = self.facts.project(run_id, entries)
        new = self.facts.project(run_id, new_entries)
        diff = facts_diff(old, new, failed, self.limits.max_facts, diagnostics=diagnostics)
        touched = (
            {f["tool_call_id"] for f in diff["added"]}
            | {f["tool_call_id"] for f in diff["removed"]}
            | {c["tool_call_id"] for c in diff["changed"]}
            | failed_changed
        )
        for change in diff["changed"]:
            tool = tool_of.get(change["tool_call_id"], "")
            totals[tool_total(tool, "fields_changed")] += 1
            flip = flip_of(change)
            if flip is not None:
                totals["evidence_flips"] += 1
                totals[f"flip:{flip}"] += 1
                totals[tool_total(tool, f"flip:{flip}")] += 1
        for call_id in touched:
            totals[tool_total(tool_of.get(call_id, ""), "records_changed")] += 1
        # A run counts as selected as ``--count`` counts it.
        totals["runs"] += bool(records or not selection.filtered)
        totals["records"] += records
        totals["records_changed"] += len(touched)
        totals["runs_changed"] += bool(touched)
        totals["added"] += len(diff["added"])
        totals["removed"] += len(diff["removed"])
        totals["fields_changed"] += len(diff["changed"])
        line: dict[str, Any] = {
            "run_id": run_id,
            "changed": bool(touched),
            "records": records,
            "records_changed": len(touched),
            "fields_changed": len(diff["changed"]),
            "diff": diff,
        }
        if self.write:
            self._count_written(entries, found, line, totals)
        return line

    @staticmethod
    def _count_written(
        entries: list[ProgressEntry], found: _Run, line: dict[str, Any], totals: Counter[str]
    ) -> None:
        mine = [
            found.written[entry.key.identity]
            for entry in entries
            if entry.key is not None and entry.key.identity in found.written
        ]
        line["written"] = sum(1 for s in mine if s is WriteStatus.OK)
        line["same_version"] = sum(1 for s in mine if s is None)
        totals["written"] += line["written"]
        totals["same_version"] += line["same_version"]
        totals["not_written"] += len(mine) - line["written"] - line["same_version"]
