"""Regenerates ``orbit.db``, the bundled operations database of Orbit API.

Run ``python tasks/demo/data/build_db.py``; the committed file is what the ``sql_read`` tool
reads. Every row is fixed here, so a rebuild holds the same data. ``request_metrics`` is a
view that computes one sample per service and minute: the file stays small while a full
dump of the view is larger than the boundary's default raw limit (the ``dump_table`` demo).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

#: Where the database is written: next to this script.
DB_PATH = Path(__file__).parent / "orbit.db"

SCHEMA = """
CREATE TABLE services (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    tier INTEGER NOT NULL,
    owner_team TEXT NOT NULL,
    p95_slo_ms INTEGER NOT NULL,
    description TEXT NOT NULL
);
CREATE TABLE deploys (
    id INTEGER PRIMARY KEY,
    service_id INTEGER NOT NULL REFERENCES services(id),
    version TEXT NOT NULL,
    deployed_at TEXT NOT NULL,
    deployed_by TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('succeeded', 'rolled_back', 'failed'))
);
CREATE TABLE incidents (
    id INTEGER PRIMARY KEY,
    service_id INTEGER NOT NULL REFERENCES services(id),
    severity INTEGER NOT NULL CHECK (severity BETWEEN 1 AND 3),
    opened_at TEXT NOT NULL,
    resolved_at TEXT,
    title TEXT NOT NULL,
    root_cause TEXT
);
CREATE INDEX deploys_by_service ON deploys (service_id, deployed_at);
CREATE INDEX incidents_by_service ON incidents (service_id, opened_at);
-- One sample per service and minute over 10 days (3 x 14,400 rows), computed on read.
CREATE VIEW request_metrics AS
WITH RECURSIVE minutes(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM minutes WHERE n < 14399)
SELECT
    strftime('%Y-%m-%dT%H:%M:00Z', '2025-03-05', '+' || n || ' minutes') AS minute,
    s.name AS service,
    200 + (n * 37 + s.id * 101) % 300 AS requests,
    40 + (n * 13 + s.id * 7) % 160 AS p95_ms,
    (n * 7 + s.id) % 11 / 5 AS errors
FROM minutes CROSS JOIN services AS s
WHERE s.id <= 3;
"""

SERVICES = [
    (1, "api", 1, "platform", 300, "Public HTTP API: auth, rate limits, pass queries, bookings"),
    (2, "db", 1, "data", 250, "PostgreSQL primary and two streaming replicas"),
    (3, "cache", 1, "platform", 20, "Redis cluster: predictions, token buckets, sessions"),
    (4, "predictor", 2, "data", 60000, "Nightly job recomputing pass predictions"),
    (5, "dashboard", 3, "web", 1200, "Customer dashboard and key management"),
]

INCIDENTS = [
    (
        1,
        1,
        2,
        "2025-01-09T14:02:00Z",
        "2025-01-09T14:41:00Z",
        "Upstream timeouts on /v1/passes",
        "Missing index after migration 0142",
    ),
    (
        2,
        3,
        3,
        "2025-01-17T08:15:00Z",
        "2025-01-17T08:29:00Z",
        "Cache evictions above 500/s",
        "Partner added 900 ground stations",
    ),
    (
        3,
        2,
        1,
        "2025-01-28T22:47:00Z",
        "2025-01-28T23:31:00Z",
        "Database primary disk full",
        "WAL archiving stalled; failover to db-3",
    ),
    (
        4,
        1,
        2,
        "2025-02-03T10:10:00Z",
        "2025-02-03T10:34:00Z",
        "HTTP 429 for enterprise keys",
        "Token bucket TTL set to 2 s instead of 2 min",
    ),
    (
        5,
        4,
        3,
        "2025-02-11T03:00:00Z",
        "2025-02-11T05:12:00Z",
        "Stale predictions",
        "Nightly job ran out of memory",
    ),
    (
        6,
        1,
        2,
        "2025-02-19T16:20:00Z",
        "2025-02-19T16:52:00Z",
        "Timeouts after cache flush",
        "Manual full cache flush in production",
    ),
    (
        7,
        5,
        3,
        "2025-02-24T09:05:00Z",
        "2025-02-24T09:40:00Z",
        "Dashboard login loop",
        "Session cookie domain changed in 5.2.0",
    ),
    (
        8,
        2,
        2,
        "2025-03-02T12:30:00Z",
        "2025-03-02T12:58:00Z",
        "Replication lag above 30 s",
        "Bulk booking import without batching",
    ),
    (
        9,
        1,
        3,
        "2025-03-07T18:44:00Z",
        "2025-03-07T18:51:00Z",
        "Elevated 401 errors",
        "Revoked leaked partner key; expected",
    ),
    (
        10,
        2,
        1,
        "2025-03-14T10:40:00Z",
        "2025-03-14T10:58:00Z",
        "Primary unreachable; upstream timeouts",
        "Network partition of db-1; failover to db-2",
    ),
    (
        11,
        3,
        3,
        "2025-03-14T11:20:00Z",
        "2025-03-14T11:35:00Z",
        "Cache evictions on shard 3",
        "Working set growth; shard 5 added",
    ),
    (12, 1, 2, "2025-03-16T07:12:00Z", None, "Intermittent 504 on /v1/bookings", None),
]

_AUTHORS = ("amara", "jonas", "li.wei", "sofia", "tomasz")
_STATUSES = ("succeeded",) * 8 + ("rolled_back", "failed")
#: Major version per service id; api's twelve deploys lead up to 2.13.0.
_MAJORS = {1: 2, 2: 1, 3: 1, 4: 3, 5: 5}


def deploys() -> list[tuple[int, int, str, str, str, str]]:
    """Sixty deploys over ten weeks; fixed arithmetic instead of randomness."""
    rows = []
    minor = {1: 1, 2: 0, 3: 0, 4: 0, 5: 0}
    for i in range(60):
        service_id = 1 + (i * 7) % 5
        minor[service_id] += 1
        day = 1 + i * 73 // 60
        month, dom = (1, day) if day <= 31 else ((2, day - 31) if day <= 59 else (3, day - 59))
        at = f"2025-{month:02d}-{dom:02d}T{9 + i % 8:02d}:{(i * 17) % 60:02d}:00Z"
        rows.append(
            (
                i + 1,
                service_id,
                f"{_MAJORS[service_id]}.{minor[service_id]}.0",
                at,
                _AUTHORS[i % 5],
                _STATUSES[(i * 3) % 10],
            )
        )
    # The deploy of the morning in orbit.log.
    rows.append((61, 1, "2.14.0", "2025-03-14T10:05:00Z", "sofia", "succeeded"))
    return rows


def build(path: Path = DB_PATH) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        # A rollback journal, not WAL: a read-only reader then needs no -shm/-wal files.
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.executescript(SCHEMA)
        conn.executemany("INSERT INTO services VALUES (?, ?, ?, ?, ?, ?)", SERVICES)
        conn.executemany("INSERT INTO deploys VALUES (?, ?, ?, ?, ?, ?)", deploys())
        conn.executemany("INSERT INTO incidents VALUES (?, ?, ?, ?, ?, ?, ?)", INCIDENTS)
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    tmp.replace(path)


if __name__ == "__main__":
    build()
