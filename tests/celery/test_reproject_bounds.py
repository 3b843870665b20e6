"""What a re-projection job costs, with a real worker process: the job's keys take no more of
the store's Redis than ``TOOL_BOUNDARY_JOB_REPORT_MAX_BYTES`` (as Redis's ``MEMORY USAGE``
counts them: the stream's own overhead too), and a projector that raises over several chunks
gives one worker WARNING per tool, type and frame for the whole job, with its count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from boundary import ToolBoundary
from boundary.store import keys
from tasks.settings import Settings
from tests.celery.test_reproject_jobs import (
    cli_env,  # noqa: F401 (a fixture)
    invoke,
    job_state,
    reprojection_worker,
    v1,  # noqa: F401 (a fixture)
    v2_env,
    wait_for,
    write_runs,
)
from tests.celery.workers import celery_process
from tests.support.helpers import wait_until
from tests.support.reprojection_tools import SECRET

#: The byte bound the worker runs with (the setting's floor is 16 KiB).
CAP = 16 * 1024
#: Runs, and every how many of them one call raises in version 2's projector.
RUNS, BOOM_EVERY = 60, 3


@pytest.fixture
def capped_worker(
    celery_settings: Settings, tmp_path: Path, redis_client: redis.Redis
) -> Iterator[Path]:
    """A ``reprojections`` worker with version 2 of the projector and a report of ``CAP``."""
    env = v2_env(tmp_path) | {"TOOL_BOUNDARY_JOB_REPORT_MAX_BYTES": str(CAP)}
    log = tmp_path / "worker.log"
    with celery_process(celery_settings, *reprojection_worker("rp-cap"), log=log, extra_env=env):
        yield log


def kept_in_redis(job_id: str, client: redis.Redis) -> dict[str, int]:
    """Bytes each key of a job takes in Redis, as ``MEMORY USAGE`` counts them (exactly, and
    as estimated from a stream's first nodes, whichever is more)."""
    kept = {}
    for key in (keys.job_key(job_id), keys.job_lines_key(job_id)):
        counted = [client.memory_usage(key, samples=0), client.memory_usage(key)]
        kept[key] = max(int(n or 0) for n in counted)
    return kept


def test_a_job_keeps_no_more_than_the_byte_bound_and_warns_once_per_failure_kind(
    cli_env: None,  # noqa: F811
    v1: ToolBoundary,  # noqa: F811
    capped_worker: Path,
    redis_client: redis.Redis,
) -> None:
    # Given runs whose report lines add up to far more than the bound, and a projector that
    # raises on one record of every third run (so in every chunk of 5 runs)
    write_runs(
        v1,
        {
            f"b{n:03d}": [("c1", f"q{n}-" + "x" * 200, 0.2)]
            + ([("c2", "boom", 0.9)] if n % BOOM_EVERY == 0 else [])
            for n in range(RUNS)
        },
    )
    # When a dry run of them ends, in chunks of 5 runs
    started = invoke(
        "reproject", "--projectors", "current", "--tool", "lookup", "--chunk-size", "5",
        "--job", "capped", "--detach",
    )  # fmt: skip
    assert started.exit_code == 0, started.output
    job = wait_for(lambda: (s := job_state("capped"))["state"] == "done" and s)
    # Then it went through every run in many chunks, and some of its lines went past the bound
    failed = RUNS // BOOM_EVERY
    assert job["totals"]["runs"] == RUNS and job["totals"]["failed"] == failed
    assert job["chunks"] >= RUNS // 5 and job["lines_trimmed"] > 0
    # And what it keeps in Redis, its hash and its lines, is within the bound
    kept = kept_in_redis("capped", redis_client)
    assert redis_client.xlen(keys.job_lines_key("capped")) > 0
    assert sum(kept.values()) <= CAP, kept
    assert 0 < job["report_bytes"] <= CAP

    # And the worker logged one WARNING for the job's one kind of failure, with its count
    # (logged by the worker just after its checkpoint marked the job done: waited for)
    def warned_lines() -> tuple[list[str], list[str]] | None:
        logged = capped_worker.read_text(errors="replace").splitlines()
        found = [line for line in logged if "job capped: projector of tool lookup failed" in line]
        return (logged, found) if found else None

    logged, warned = wait_until(warned_lines, "the job's failure warning", 30.0)
    assert len(warned) == 1, warned
    assert f"failed on {failed} record(s): PROJECTION_FAILED, RuntimeError raised at" in warned[0]
    assert "reprojection_tools.py" in warned[0] and "in _project" in warned[0]
    # (never the exception's message, which holds what only the raw response held)
    assert not [line for line in logged if SECRET in line or "projector v2 broke" in line]
