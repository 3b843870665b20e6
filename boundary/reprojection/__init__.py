"""Re-projection: a run's sealed records projected again from their stored raw responses by
their tools' current projectors, the diff of the run's observed facts (sealed against new),
and side projections kept by projector version. No Celery here (``tasks.worker.jobs`` runs it).

The canonical record never changes: the new projection is compared, and with ``write`` kept
beside the record (``keys.side_key``), expiring with it. A selection of runs is read in pages
of the runs index (``keys.RUNS``) or of a given list, never by SCAN and never whole.

By concern: ``selection`` (which records, pages of runs, ``count``), ``runner`` (records
projected again, a chunk's report), ``diff`` (a run's diff, a job's summary), ``versions``
(facts by projector version).
"""

from boundary.reprojection.diff import (
    DIFF_FIELDS,
    TOTALS,
    dumps_lines,
    facts_diff,
    failures_why,
    flip_name,
    readable_changes,
    result_patch,
    summary,
    version_text,
)
from boundary.reprojection.runner import (
    ChunkReport,
    Reprojector,
    projected_again,
    reprojected,
    with_side,
)
from boundary.reprojection.selection import (
    COUNT_BATCH,
    SELECTABLE_STATUSES,
    Selection,
    count,
    first_cursor,
    indexed_runs,
    lane_of,
    page_runs,
)
from boundary.reprojection.versions import entries_by_version, observe_version, versions_present

__all__ = [
    "COUNT_BATCH",
    "DIFF_FIELDS",
    "SELECTABLE_STATUSES",
    "TOTALS",
    "ChunkReport",
    "Reprojector",
    "Selection",
    "count",
    "dumps_lines",
    "entries_by_version",
    "facts_diff",
    "failures_why",
    "first_cursor",
    "flip_name",
    "indexed_runs",
    "lane_of",
    "observe_version",
    "page_runs",
    "projected_again",
    "readable_changes",
    "reprojected",
    "result_patch",
    "summary",
    "version_text",
    "versions_present",
    "with_side",
]
