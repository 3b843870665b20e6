"""A run's facts by projector version: each sealed record replaced by its side projection of
that version where one is kept (``reproject --write``), and which versions the run holds."""

from __future__ import annotations

from dataclasses import replace

from boundary.models import InvocationStatus, ObservedFacts, is_safe_id
from boundary.progress import RunProgressProjector
from boundary.reprojection.runner import with_side
from boundary.store.base import CanonicalStore, ProgressEntry
from boundary.store.redis_side import RedisSideProjections


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


def versions_present(store: CanonicalStore, run_id: str) -> list[str]:
    """The projector versions the run's calls have a projection of: the sealed records'
    and the side projections' (the run's set of versions written, one read), sorted."""
    if not is_safe_id(run_id):
        return []
    found = {
        e.record.projector_version
        for e in store.progress(run_id)
        if e.record is not None and e.record.projector_version
    }
    side = RedisSideProjections.of(store)
    if side is not None:
        found |= set(side.versions(run_id))
    return sorted(found)
