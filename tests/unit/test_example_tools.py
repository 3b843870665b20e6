"""The example tools over bundled data, their registry, and the read-only SQL guarantee."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from boundary import (
    EvidenceStatus,
    Limits,
    Projector,
    ToolTimeout,
    canonical_json,
    load_registry,
    utf8_size,
)
from tasks.demo import sqlread
from tasks.demo.bundled import DATA_DIR, DB_PATH, DOCS_DIR, LOG_PATH
from tasks.demo.docsearch import split_markdown, tokens
from tasks.demo.tools import (
    DUMP_TIME_LIMIT_S,
    SQL_TIME_LIMIT_S,
    delete_rows,
    dump_table,
    registry,
    search_docs,
    search_logs,
    sql_read,
)

LIMITS = Limits()


def project(tool: str, arguments: dict[str, Any]) -> Any:
    """Runs a tool and its registered projector, as the worker would (minus the store)."""
    spec = registry.get(tool)
    assert spec is not None
    raw = spec.executor(arguments)
    projection = spec.projector.project(raw, arguments)
    size = utf8_size(canonical_json(projection.result)) + utf8_size(
        canonical_json(projection.scope)
    )
    assert size <= LIMITS.max_agent_result_bytes
    return projection


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TestBundledData:
    def test_the_data_is_small_and_where_the_tools_read_it(self) -> None:
        assert len(list(DOCS_DIR.glob("*.md"))) >= 8
        assert 300 <= len(LOG_PATH.read_text(encoding="utf-8").splitlines()) <= 500
        assert DB_PATH.stat().st_size < 200 * 1024

    def test_the_database_uses_a_rollback_journal(self) -> None:
        # A WAL database would need -wal/-shm files next to it even for a read-only reader.
        # Header bytes 18-19 are the file format versions: 1 = rollback journal, 2 = WAL.
        assert DB_PATH.read_bytes()[18:20] == b"\x01\x01"


class TestSearchDocs:
    def test_a_runbook_question_finds_its_sections_best_first(self) -> None:
        raw = search_docs({"query": "upstream timeout"})

        scores = [hit["score"] for hit in raw["hits"]]
        assert raw["hits"][0]["doc_id"].startswith("timeouts")
        assert scores == sorted(scores, reverse=True)
        assert all(score > 0 for score in scores)

    def test_the_projection_cites_sources_with_scores(self) -> None:
        projection = project("search_docs", {"query": "how to fail over the database"})

        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        first = projection.result["hits"][0]
        assert first["doc_id"].startswith("database-failover")
        assert first["title"] == "Runbook: database failover"
        assert projection.scope == {
            "corpus": "docs",
            "query": "how to fail over the database",
            "min_score": 1.0,
        }

    def test_a_query_about_nothing_in_the_corpus_is_no_evidence(self) -> None:
        projection = project("search_docs", {"query": "quantum entanglement"})

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.scope["query"] == "quantum entanglement"

    def test_a_query_matching_everything_weakly_is_no_evidence(self) -> None:
        # "api" is in nearly every section: it ranks them, but proves nothing.
        projection = project("search_docs", {"query": "api"})

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result["below_min_score"] > 0

    def test_the_limit_caps_the_hits(self) -> None:
        assert len(search_docs({"query": "cache", "limit": 2})["hits"]) == 2

    def test_search_is_deterministic(self) -> None:
        assert search_docs({"query": "rate limits"}) == search_docs({"query": "rate limits"})

    def test_sections_get_their_own_ids(self) -> None:
        passages = split_markdown("guide", "# Guide\nintro\n## First Step\nbody\n## Empty\n")

        assert [(p.doc_id, p.section, p.text) for p in passages] == [
            ("guide", None, "intro"),
            ("guide#first-step", "First Step", "body"),
        ]

    def test_query_and_documents_meet_on_the_same_word_forms(self) -> None:
        assert tokens("The Timeouts of a cache") == ["timeout", "cache"]

    @pytest.mark.parametrize(
        "arguments",
        [
            {},
            {"query": ""},
            {"query": "   "},
            {"query": 42},
            {"query": "x" * 201},
            {"query": "ok", "limit": 0},
            {"query": "ok", "limit": True},
            {"query": "ok", "limit": 51},
            {"query": "ok", "filter": "drop"},
        ],
    )
    def test_bad_arguments_are_refused(self, arguments: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            search_docs(arguments)


class TestSearchLogs:
    def test_matching_lines_are_returned_in_file_order(self) -> None:
        raw = search_logs({"query": "timeout", "service": "api"})

        expected = [
            line
            for line in LOG_PATH.read_text(encoding="utf-8").splitlines()
            if "timeout" in line and line.split(" ")[2] == "api"
        ]
        assert len(raw["lines"]) == len(expected) > 10
        assert [line["ts"] for line in raw["lines"]] == [line.split(" ")[0] for line in expected]

    def test_the_projection_counts_levels_and_gives_the_time_range(self) -> None:
        projection = project("search_logs", {"query": "timeout"})

        result = projection.result
        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert sum(result["by_level"].values()) == result["matches"]
        assert result["first_ts"] < result["last_ts"]
        assert len(result["lines"]) + result["omitted"] == result["matches"]

    def test_the_level_filter_ignores_case_in_the_argument(self) -> None:
        lines = search_logs({"query": "db", "level": "error"})["lines"]

        assert lines
        assert {line["level"] for line in lines} == {"ERROR"}

    def test_no_match_is_no_evidence_scoped_by_the_search(self) -> None:
        arguments = {"query": "disk full", "service": "cache"}
        projection = project("search_logs", arguments)

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.scope == {"corpus": "logs", **arguments}

    @pytest.mark.parametrize(
        "arguments",
        [{}, {"query": ""}, {"query": "x", "level": "DEBUG"}, {"query": "x", "regex": ".*"}],
    )
    def test_bad_arguments_are_refused(self, arguments: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            search_logs(arguments)


class TestSqlRead:
    def test_a_select_returns_columns_and_rows(self) -> None:
        raw = sql_read(
            {"sql": "SELECT name, tier FROM services WHERE tier = ? ORDER BY id", "params": [1]}
        )

        assert raw == {
            "columns": ["name", "tier"],
            "rows": [["api", 1], ["db", 1], ["cache", 1]],
            "more_rows": False,
        }

    def test_the_projection_gives_columns_first_rows_and_count(self) -> None:
        projection = project("sql_read", {"sql": "SELECT id, version FROM deploys"})

        assert projection.evidence_status is EvidenceStatus.EVIDENCE_FOUND
        assert projection.result["columns"] == ["id", "version"]
        assert projection.result["row_count"] == 61
        assert len(projection.result["rows"]) + projection.result["omitted"] == 61
        assert projection.scope["corpus"] == "orbit.db"

    def test_zero_rows_are_no_evidence(self) -> None:
        projection = project("sql_read", {"sql": "SELECT * FROM incidents WHERE severity > 3"})

        assert projection.evidence_status is EvidenceStatus.NO_EVIDENCE
        assert projection.result["row_count"] == 0

    def test_a_large_result_is_capped_and_says_so(self) -> None:
        raw = sql_read({"sql": "SELECT * FROM request_metrics"})

        assert len(raw["rows"]) == sqlread.MAX_ROWS
        assert raw["more_rows"] is True
        assert utf8_size(canonical_json(raw)) <= LIMITS.max_raw_bytes

    def test_blobs_and_infinities_become_json(self) -> None:
        raw = sql_read({"sql": "SELECT X'00FF', 9e999, -9e999"})

        assert raw["rows"] == [["X'00FF'", "inf", "-inf"]]
        canonical_json(raw)

    @pytest.mark.parametrize(
        "arguments",
        [
            {},
            {"sql": ""},
            {"sql": "SELECT 1", "params": "1"},
            {"sql": "SELECT ?", "params": [[1]]},
            {"sql": "SELECT 1", "timeout": 5},
        ],
    )
    def test_bad_arguments_are_refused(self, arguments: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            sql_read(arguments)

    @pytest.mark.parametrize(
        "sql", ["SELEKT 1", "SELECT * FROM no_such_table", "SELECT 1; SELECT 2"]
    )
    def test_bad_sql_raises_so_the_call_becomes_error(self, sql: str) -> None:
        with pytest.raises(sqlite3.Error):
            sql_read({"sql": sql})

    def test_a_runaway_query_stops_at_its_time_limit(self) -> None:
        endless = (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
        )

        # The query never ends by itself: ToolTimeout is the proof that the limit stopped it
        with pytest.raises(ToolTimeout):
            sqlread.run_query(DB_PATH, endless, time_limit_s=0.2)


#: Every way a statement could try to change the database or reach another file.
WRITE_ATTEMPTS = [
    "INSERT INTO services VALUES (9, 'evil', 1, 'x', 1, 'x')",
    "UPDATE incidents SET severity = 3",
    "DELETE FROM deploys",
    "REPLACE INTO services VALUES (1, 'api', 1, 'x', 1, 'x')",
    "DROP TABLE incidents",
    "DROP VIEW request_metrics",
    "ALTER TABLE services ADD COLUMN pwned TEXT",
    "CREATE TABLE pwned (x)",
    "CREATE TEMP TABLE scratch (x)",
    "CREATE INDEX pwned ON services (name)",
    "ATTACH DATABASE '{attached}' AS other",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = WAL",
    "VACUUM",
    "VACUUM INTO '{attached}'",
    "BEGIN IMMEDIATE",
    "WITH x AS (SELECT 1) DELETE FROM services",
    "SELECT 1; DELETE FROM services",
]


class TestReadOnly:
    @pytest.mark.parametrize("statement", WRITE_ATTEMPTS)
    def test_a_write_through_the_tool_fails_and_leaves_the_file_unchanged(
        self, statement: str, tmp_path: Path
    ) -> None:
        # Given the bundled database and its checksum
        attached = tmp_path / "attached.db"
        before = sha256(DB_PATH)
        files_before = sorted(DATA_DIR.iterdir())

        # When a writing statement goes through the tool
        with pytest.raises(sqlite3.Error):
            sql_read({"sql": statement.format(attached=attached)})

        # Then it failed (the call becomes ERROR) and nothing changed or appeared
        assert sha256(DB_PATH) == before
        assert sorted(DATA_DIR.iterdir()) == files_before
        assert not attached.exists()
        assert sql_read({"sql": "SELECT count(*) FROM services"})["rows"] == [[5]]

    @pytest.mark.parametrize("statement", WRITE_ATTEMPTS)
    def test_the_file_level_guards_alone_keep_the_file_unchanged(
        self, statement: str, tmp_path: Path
    ) -> None:
        # Given a copy of the database, opened with mode=ro and query_only but no authorizer
        copy = tmp_path / "orbit.db"
        shutil.copyfile(DB_PATH, copy)
        before = sha256(copy)
        conn = sqlread.connect_read_only(copy)

        # When a writing statement runs on it (some, like ATTACH, are allowed to run)
        try:
            conn.execute(statement.format(attached=tmp_path / "attached.db"))
        except sqlite3.Error:
            pass
        finally:
            conn.close()

        # Then the database file is unchanged and no journal was left beside it
        assert sha256(copy) == before
        assert not (tmp_path / "orbit.db-journal").exists()

    def test_only_the_authorizer_stops_attach_from_creating_a_file(self, tmp_path: Path) -> None:
        # SQLite creates an empty file for ATTACH even on a read-only connection: this is
        # why the tool also denies every non-reading action when statements are prepared.
        copy = tmp_path / "orbit.db"
        shutil.copyfile(DB_PATH, copy)
        attach = "ATTACH DATABASE '{}' AS other"

        conn = sqlread.connect_read_only(copy)
        try:
            conn.execute(attach.format(tmp_path / "by_connection.db"))
        finally:
            conn.close()
        with pytest.raises(sqlite3.DatabaseError):
            sqlread.run_query(copy, attach.format(tmp_path / "by_tool.db"))

        assert (tmp_path / "by_connection.db").exists()
        assert not (tmp_path / "by_tool.db").exists()

    def test_a_missing_database_is_not_created(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError):
            sqlread.run_query(tmp_path / "absent.db", "SELECT 1")
        assert not (tmp_path / "absent.db").exists()


class TestDumpTable:
    def test_a_small_table_dumps_whole(self) -> None:
        raw = dump_table({"table": "incidents"})

        assert raw["table"] == "incidents"
        assert len(raw["rows"]) == 12
        assert raw["more_rows"] is False

    def test_the_metrics_view_dumps_more_than_the_default_raw_limit(self) -> None:
        raw = dump_table({"table": "request_metrics"})

        assert utf8_size(canonical_json(raw)) > LIMITS.max_raw_bytes

    @pytest.mark.parametrize(
        "table", ["no_such_table", 'services"; DROP TABLE services; --', "sqlite_master", ""]
    )
    def test_only_the_databases_own_tables_can_be_named(self, table: str) -> None:
        with pytest.raises(ValueError):
            dump_table({"table": table})


class TestRegistry:
    def test_the_registry_holds_the_five_tools_with_their_flags(self) -> None:
        summary = {spec.name: (spec.read_only, spec.timeout_s) for spec in registry}

        assert summary == {
            "search_docs": (True, 10.0),
            "search_logs": (True, 10.0),
            "sql_read": (True, 15.0),
            "dump_table": (True, 30.0),
            "delete_rows": (False, 5.0),
            "scan_metrics": (True, 720.0),
            "audit_metrics": (True, 720.0),
        }
        assert all(isinstance(spec.projector, Projector) for spec in registry)
        # audit_metrics is scan_metrics under fleet flow control: one call at a time
        assert [(s.name, s.concurrency) for s in registry if s.limited] == [("audit_metrics", 1)]

    def test_the_registry_loads_by_its_import_path(self) -> None:
        loaded = load_registry("tasks.demo.tools:registry")

        assert {spec.name for spec in loaded} == {spec.name for spec in registry}

    def test_the_write_tool_refuses_to_run_even_if_called(self) -> None:
        before = sha256(DB_PATH)

        with pytest.raises(PermissionError):
            delete_rows({"table": "incidents", "where": "1 = 1"})

        assert sha256(DB_PATH) == before

    def test_tools_stop_before_their_timeout(self) -> None:
        # The tools' own limits end a statement before the boundary gives up on it.
        for name, limit in (("sql_read", SQL_TIME_LIMIT_S), ("dump_table", DUMP_TIME_LIMIT_S)):
            spec = registry.get(name)
            assert spec is not None
            assert limit < spec.timeout_s
