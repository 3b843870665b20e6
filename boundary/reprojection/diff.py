"""A run's observed facts, sealed against new: the diff of one run (facts added and removed,
fields changed, a changed ``result`` as an RFC 6902 JSON Patch, records whose new projection
failed and why), and a job's totals (``Counter`` names, added up by the job's checkpoints in
its Redis hash) read back as its summary: overall, by tool, by version."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

import jsonpatch

from boundary.models import EvidenceStatus, ObservedFact, ObservedFacts

#: The fields of a fact the diff compares (its version differs whenever the projector's does).
DIFF_FIELDS = ("evidence_status", "result", "scope")
#: The plain counts of a job's totals, in the summary's order. ``runs`` are the runs selected
#: (what ``--count`` counts); ``records_changed`` the records whose facts changed,
#: ``fields_changed`` the fields (``DIFF_FIELDS``) that did; ``not_registered`` the records
#: of tools the workers' registry lacks (left as sealed: no projector to run).
TOTALS = (
    "runs",
    "runs_changed",
    "records",
    "records_changed",
    "added",
    "removed",
    "fields_changed",
    "evidence_flips",
    "failed",
    "not_registered",
    "unreadable_runs",
    "written",
    "same_version",
    "not_written",
)
#: The evidence statuses a flip goes between (either way).
_FLIP = {EvidenceStatus.EVIDENCE_FOUND.value, EvidenceStatus.NO_EVIDENCE.value}
#: Totals' names of counts by tool: ``tool:["search_docs","records"]``.
_TOOL = "tool:"


@functools.lru_cache(maxsize=4096)
def tool_total(tool: str, kind: str) -> str:
    """The totals' name of a count of ``kind`` for ``tool``."""
    return _TOOL + json.dumps([tool, kind], separators=(",", ":"))


#: A tool's kind of count of failures by code and diagnostic summary (exception type and
#: frame, never the message): ``why:PROJECTION_FAILED:KeyError raised at tools.py:12 in f``.
_WHY = "why:"


def why_total(tool: str, code: str, summary: str) -> str:
    """The totals' name of a count of ``tool``'s failures with ``code`` and ``summary``."""
    return tool_total(tool, f"{_WHY}{code}:{summary}")


def failures_why(totals: Mapping[str, int]) -> list[tuple[str, str, str, int]]:
    """A job's failures by ``(tool, code, summary)`` with their count, sorted: what its one
    WARNING per tool, code and frame says."""
    out = []
    for tool, kind, value in _tool_totals(totals):
        if isinstance(kind, str) and kind.startswith(_WHY):
            code, _, why = kind[len(_WHY) :].partition(":")
            out.append((str(tool), code, why, int(value)))
    return sorted(out)


def flip_name(before: str, after: str) -> str:
    """``EVIDENCE_FOUND -> NO_EVIDENCE``: an evidence flip by its direction."""
    return f"{before} -> {after}"


def _fact_json(fact: ObservedFact) -> dict[str, Any]:
    return fact.model_dump(mode="json")


def result_patch(before: Any, after: Any) -> list[dict[str, Any]]:
    """The RFC 6902 JSON Patch from ``before`` to ``after`` (``jsonpatch``; add, remove and
    replace operations only: a person reads them)."""
    patch: list[dict[str, Any]] = jsonpatch.JsonPatch.from_diff(
        before, after, optimization=False
    ).patch
    return patch


def readable_changes(line: dict[str, Any], *, full: bool = False) -> dict[str, Any]:
    """A run's report line as a person gets it: each changed ``result`` as a JSON Patch
    (``patch``), without both whole objects unless ``full``. The workers keep both objects in
    the job's lines; the patch is made where the line is shown (it costs more than the
    record's projection), so a job's speed does not depend on it."""
    diff = line.get("diff")
    if not isinstance(diff, dict):
        return line
    for change in diff.get("changed", ()):
        if change.get("field") != "result" or "before" not in change:
            continue
        change["patch"] = result_patch(change["before"], change["after"])
        if not full:
            del change["before"], change["after"]
    return line


def facts_diff(
    old: ObservedFacts,
    new: ObservedFacts,
    failed: Mapping[str, str],
    max_failed: int,
    *,
    diagnostics: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What changed in a run's facts: facts added and removed (whole, as bounded as the facts
    are), fields changed (``DIFF_FIELDS``, before and after: an evidence flip is a change of
    ``evidence_status``; ``readable_changes`` turns a changed ``result`` into a JSON Patch),
    and the records whose new projection failed, with their codes and ``diagnostics`` (at
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
    if diagnostics:
        diff["diagnostics"] = {c: diagnostics[c] for c in shown_failed if c in diagnostics}
    if len(failed) > len(shown_failed):
        diff["failed_omitted"] = len(failed) - len(shown_failed)
    return diff


def flip_of(change: Mapping[str, Any]) -> str | None:
    """The change's evidence flip (``flip_name``), or ``None``: not a flip."""
    if change["field"] != "evidence_status":
        return None
    if {change["before"], change["after"]} != _FLIP:
        return None
    return flip_name(change["before"], change["after"])


def version_text(sealed: Iterable[str], ran: Iterable[str]) -> str:
    """``v1 -> v2`` (``v1, v3 -> v4``); a tool the worker's registry lacks runs ``none``."""
    read = ", ".join(f"v{v}" if v else "none" for v in sorted(set(sealed))) or "none"
    run = ", ".join(f"v{v}" if v else "none" for v in sorted(set(ran))) or "none"
    return f"{read} -> {run}"


def _tool_totals(totals: Mapping[str, int]) -> Iterable[tuple[Any, Any, int]]:
    """``(tool, kind, count)`` of each non-zero per-tool total (``tool_total``), by name."""
    for name, value in sorted(totals.items()):
        if not name.startswith(_TOOL) or not value:
            continue
        try:
            tool, kind = json.loads(name[len(_TOOL) :])
        except (ValueError, TypeError):
            continue
        yield tool, kind, value


def _by_tool(totals: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    tools: dict[str, dict[str, Any]] = {}
    for tool, named, value in _tool_totals(totals):
        row = tools.setdefault(
            str(tool),
            {
                "records": 0,
                "not_registered": 0,
                "records_changed": 0,
                "fields_changed": 0,
                "evidence_flips": {},
                "failed": {},
                "versions": {"sealed": [], "ran": []},
            },
        )
        kind = str(named)
        head, _, rest = kind.partition(":")
        if head == "flip":
            row["evidence_flips"][rest] = int(value)
        elif head == "failed":
            row["failed"][rest] = int(value)
        elif head == "version":
            sealed, _, ran = rest.partition(">")
            for side, version in (("sealed", sealed), ("ran", ran)):
                if version not in row["versions"][side]:
                    row["versions"][side].append(version)
        elif kind in row:
            row[kind] = int(value)
    for row in tools.values():
        row["versions"]["text"] = version_text(row["versions"]["sealed"], row["versions"]["ran"])
    return tools


def summary(totals: Mapping[str, int]) -> dict[str, Any]:
    """A job's totals as the report's summary: every count (``TOTALS``), failures by code,
    evidence flips by direction, and by tool: records, changes, flips, failures by exception
    type and the versions compared (``versions``: ``{tool: "v1 -> v2"}``)."""
    out: dict[str, Any] = {name: int(totals.get(name, 0)) for name in TOTALS}
    if "changed" in totals and "fields_changed" not in totals:
        out["fields_changed"] = int(totals["changed"])  # a job of 0.5.0
    out["failed_by_code"] = {
        name.split(":", 1)[1]: int(value)
        for name, value in sorted(totals.items())
        if name.startswith("failed:")
    }
    out["evidence_flips_by_direction"] = {
        name.split(":", 1)[1]: int(value)
        for name, value in sorted(totals.items())
        if name.startswith("flip:")
    }
    tools = _by_tool(totals)
    out["tools"] = tools
    out["versions"] = {tool: row["versions"]["text"] for tool, row in tools.items()}
    return out


def dumps_lines(lines: Iterable[Mapping[str, Any]]) -> list[str]:
    return [json.dumps(line, ensure_ascii=False, sort_keys=True) for line in lines]
