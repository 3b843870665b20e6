"""The fleet-wide cap of re-projection chunks (``tool_boundary.reproject``, flow control's
reserved entry), with real worker processes: two jobs of several lanes on two workers never
run two chunks at once under a cap of 1; ``limits set`` of the cap takes effect (a lane waits,
then starts when the cap is raised); and a worker killed (SIGKILL) while its chunk holds the
slot gives the slot back when its lease runs out, and its job resumes to the same totals.

No timing is asserted: the chunks' projector keeps a gauge of projections at once in Redis
(``tests.support.reprojection_tools``, in the order Redis saw them), and the rest is read from the
cap's own keys."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from typer.testing import CliRunner, Result

from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
)
from boundary.flow import Flow
from boundary.reaper import sweep_reserved
from boundary.store.redis_jobs import RedisJobs
from tasks.cli.main import EXIT_OK, cli
from tasks.settings import Settings
from tasks.wiring.app import REPROJECT_CHUNK, REPROJECTIONS_QUEUE
from tasks.worker import chunk_slots
from tests.celery.workers import celery_process, worker_args
from tests.conftest import celery_test_settings
from tests.support import reprojection_tools as rt
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.slow]

CAP = chunk_slots.REPROJECT_SLOTS
#: A job's states while it runs (``jobs show``).
ACTIVE = ("running", "cancelling")
#: Longest the test waits for any one stage, seconds (a give-up, never an assertion on time).
GIVE_UP_S = 120.0


@pytest.fixture
def v1(redis_client: redis.Redis) -> ToolBoundary:
    """Writes runs with version 1 of the projector, steps in-process."""
    tools = rt.make_registry("1")
    store = RedisCanonicalStore(client=redis_client, ttl_s=600)
    return ToolBoundary(
        store=store, registry=tools, dispatcher=InProcessDispatcher(store, tools, inline=True)
    )


def write_runs(boundary: ToolBoundary, runs: dict[str, list[tuple[str, str]]]) -> None:
    for run_id, calls in runs.items():
        run = RunContext(run_id=run_id, authorized_tools=frozenset({rt.TOOL}))
        for call_id, query in calls:
            envelope = ToolCallEnvelope(
                run_id=run_id,
                tool_call_id=call_id,
                tool_name=rt.TOOL,
                arguments={"query": query, "score": 0.9},
            )
            boundary.invoke(envelope, run, timeout=10)


def capped_settings(**overrides: Any) -> Settings:
    """The workers' (and this process's) settings: a short lease."""
    values: dict[str, Any] = {"reproject_lease_s": 5.0}
    return celery_test_settings(**(values | overrides))


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, celery_session_app: Celery) -> None:
    """The CLI's settings: the same DBs as the workers'."""
    settings = capped_settings()
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", settings.store_url)
    monkeypatch.setenv("TOOL_BOUNDARY_BROKER_URL", settings.broker)
    monkeypatch.setenv("TOOL_BOUNDARY_RESULT_BACKEND", settings.backend)
    monkeypatch.setenv("TOOL_BOUNDARY_TTL_S", str(settings.ttl_s))
    monkeypatch.setenv("TOOL_BOUNDARY_TOOLS", "tests.support.reprojection_tools:registry")


def worker_env(tmp_path: Path, settings: Settings) -> dict[str, str]:
    return {
        "TOOL_BOUNDARY_TOOLS": "tests.support.reprojection_tools:registry",
        rt.VERSION_ENV: "2",
        rt.HOLD_ENV: str(tmp_path / "hold"),
        rt.DIE_ENV: str(tmp_path / "died"),
        rt.GAUGE_ENV: settings.store_url,
    }


def reprojection_worker(name: str, concurrency: int = 2) -> tuple[str, ...]:
    args = list(worker_args(name, concurrency=concurrency))
    args[args.index("-Q") + 1] = REPROJECTIONS_QUEUE
    return tuple(args)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def wait_for(what: str, done: Any) -> Any:
    return wait_until(done, what, GIVE_UP_S, every=0.1)


def job_state(job_id: str) -> dict[str, Any]:
    shown = invoke("jobs", "show", job_id, "--json")
    assert shown.exit_code == EXIT_OK, shown.output
    return json.loads(shown.output)  # type: ignore[no-any-return]


def cap_row() -> dict[str, Any]:
    listed = invoke("limits", "--json")
    assert listed.exit_code == EXIT_OK, listed.output
    rows = {row["tool"]: row for row in json.loads(listed.output)}
    return rows[CAP]  # type: ignore[no-any-return]


def start_job(job_id: str, runs: dict[str, Any], *args: str) -> None:
    run_args = [arg for run_id in runs for arg in ("--run", run_id)]
    started = invoke(
        "reproject", "--projectors", "current", *run_args, "--job", job_id, "--detach", *args
    )
    assert started.exit_code == EXIT_OK, started.output


def test_two_jobs_on_two_workers_never_run_two_chunks_at_once_under_a_cap_of_1(
    cli_env: None,
    v1: ToolBoundary,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # Given two jobs of three lanes over six runs each, and two workers of two threads, the
    # fleet's cap of chunks declared 1
    settings = capped_settings(reproject_concurrency=1)
    monkeypatch.setenv("TOOL_BOUNDARY_REPROJECT_CONCURRENCY", "1")
    jobs = {
        name: {f"{name}{n}": [("c1", f"q{n}"), ("c2", f"p{n}")] for n in range(6)}
        for name in ("ja", "jb")
    }
    for runs in jobs.values():
        write_runs(v1, runs)
    env = worker_env(tmp_path, settings)
    with ExitStack() as stack:
        for name in ("cap-a", "cap-b"):
            log = tmp_path / f"{name}.log"
            worker = celery_process(settings, *reprojection_worker(name), log=log, extra_env=env)
            stack.enter_context(worker)
        # When both jobs run at once
        for job_id, runs in jobs.items():
            start_job(job_id, runs, "--lanes", "3", "--chunk-size", "1")
        ended = {
            job_id: wait_for(
                f"{job_id} ends", lambda j=job_id: (s := job_state(j))["state"] != "running" and s
            )
            for job_id in jobs
        }

    # Then both end with every record counted once
    for state in ended.values():
        assert state["state"] == "done", state
        assert (state["totals"]["runs"], state["totals"]["records"]) == (6, 12), state
    # And no two chunks ever ran at once (24 projections, never two in the gauge together)
    assert int(redis_client.get(rt.GAUGE_SEEN) or 0) == 24
    assert int(redis_client.get(rt.GAUGE_MAX) or 0) == 1
    # And the cap shows in limits: its limit, nothing held or waiting, nobody stale
    row = cap_row()
    assert (row["concurrency"], row["running"], row["waiting"]) == (1, 0, 0), row
    assert row["stale_holders"] == 0


@contextmanager
def held_worker_at_cap_one(
    settings: Settings, tmp_path: Path, name: str
) -> Iterator[tuple[dict[str, Any], Path]]:
    """The cap set to 1 by an operator (``limits set``; reset at the end) and a reprojection
    worker of four threads whose projector holds every ``hold`` record until the file it
    yields exists (touched at the end too). Yields ``limits set``'s answer and that file."""
    set_ = invoke("limits", "set", CAP, "--concurrency", "1", "--json")
    assert set_.exit_code == EXIT_OK, set_.output
    env = worker_env(tmp_path, settings)
    hold = Path(env[rt.HOLD_ENV])
    try:
        with celery_process(
            settings, *reprojection_worker(name, 4), log=tmp_path / "w.log", extra_env=env
        ):
            yield json.loads(set_.output), hold
    finally:
        hold.touch()
        reset = invoke("limits", "reset", CAP)
        assert reset.exit_code == EXIT_OK, reset.output


def test_limits_set_of_the_cap_takes_effect(
    cli_env: None,
    v1: ToolBoundary,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    # Given a worker of four threads whose declared cap is the default (2), set to 1 at run
    # time by an operator
    settings = capped_settings()
    assert settings.reproject_concurrency == 2
    runs = {f"h{n}": [("c1", "hold" if n == 0 else f"q{n}")] for n in range(8)}
    write_runs(v1, runs)
    with held_worker_at_cap_one(settings, tmp_path, "cap-set") as (view, hold):
        assert (view["concurrency"], view["override"]) == (1, {"concurrency": 1}), view
        # When a job of two lanes runs, one chunk of it held in its projector
        start_job("capped", runs, "--lanes", "2", "--chunk-size", "1")
        wait_for("the held chunk runs", lambda: redis_client.exists(rt.GAUGE_HOLDING))

        # Then its other lane waits for the slot: limits and jobs show say so
        wait_for("the other lane waits", lambda: cap_row()["waiting"] == 1)
        row = cap_row()
        assert (row["concurrency"], row["running"]) == (1, 1), row
        assert row["running_by_tenant"] == {"capped": 1}
        shown = job_state("capped")
        assert shown["state"] == "running"
        assert (shown["slots"]["holding"], shown["slots"]["waiting"]) == (1, 1)
        text = invoke("jobs", "show", "capped").output
        assert "waiting for a slot" in " ".join(text.split())

        # When the operator raises the cap to 2
        raised = invoke("limits", "set", CAP, "--concurrency", "2", "--json")
        assert raised.exit_code == EXIT_OK, raised.output
        assert json.loads(raised.output)["started_now"] == 1

        # Then the waiting lane runs to its end while the held chunk still holds its slot
        wait_for("the other lane ends", lambda: job_state("capped")["lanes_ended"] == 1)
        assert redis_client.exists(rt.GAUGE_HOLDING)
        hold.touch()
        state = wait_for(
            "the job ends", lambda: (s := job_state("capped"))["state"] != "running" and s
        )
    assert state["state"] == "done"
    assert (state["totals"]["runs"], state["totals"]["records"]) == (8, 8)
    assert int(redis_client.get(rt.GAUGE_MAX) or 0) <= 2
    assert cap_row()["concurrency"] == 2  # the declared one again


@pytest.fixture
def sweeper(celery_session_app: Celery) -> Iterator[threading.Thread]:
    """This process's sweep of the cap (a worker's reaper does the same every pass), every
    half second from when the test starts it until the test ends."""
    store = RedisCanonicalStore.from_url(capped_settings().store_url, ttl_s=600)
    flow = Flow(store, ToolRegistry(), None)
    chunk_slots.reserve(flow, capped_settings(reproject_concurrency=1))
    stop = threading.Event()

    def sweep() -> None:
        while not stop.wait(0.5):  # not a wait: the fleet's sweeper, every half second
            sweep_reserved(flow, flow.reserved[CAP])

    running = threading.Thread(target=sweep, daemon=True)
    yield running
    stop.set()
    if running.is_alive():
        running.join(timeout=10)


def test_a_worker_killed_holding_the_slot_gives_it_back_and_its_job_resumes(
    cli_env: None,
    v1: ToolBoundary,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    sweeper: threading.Thread,
    tmp_path: Path,
) -> None:
    # Given a cap of 1, a lease of 5 s, and six runs of two calls, one of which kills its
    # worker (SIGKILL) the first time, in the middle of its chunk
    settings = capped_settings(reproject_concurrency=1)
    monkeypatch.setenv("TOOL_BOUNDARY_REPROJECT_CONCURRENCY", "1")
    runs = {f"k{n}": [("c1", "die" if n == 3 else f"q{n}"), ("c2", f"p{n}")] for n in range(6)}
    write_runs(v1, runs)
    env = worker_env(tmp_path, settings)
    with celery_process(
        settings, *reprojection_worker("doomed"), log=tmp_path / "a.log", extra_env=env
    ) as doomed:
        start_job("killed", runs, "--lanes", "1", "--chunk-size", "2")
        wait_for("the worker dies", lambda: doomed.poll() is not None)
    # Then the dead chunk's slot is still held: nobody gave it up
    partial = job_state("killed")
    assert partial["state"] == "running" and partial["totals"].get("runs", 0) < 6
    row = cap_row()
    assert (row["running"], row["running_by_tenant"]) == (1, {"killed": 1}), row

    with celery_process(
        settings, *reprojection_worker("heir"), log=tmp_path / "b.log", extra_env=env
    ):
        # When another job asks for the slot, it waits in line behind the dead chunk
        start_job("other", runs, "--lanes", "1", "--chunk-size", "3")
        wait_for("the other job waits", lambda: cap_row()["waiting"] == 1)
        assert job_state("other")["slots"]["waiting"] == 1
        # And the sweep (a worker's reaper pass) frees the lease nobody renews: the other
        # job is handed the slot and ends
        sweeper.start()
        other = wait_for(
            "the other job ends", lambda: (s := job_state("other"))["state"] != "running" and s
        )
        assert other["state"] == "done" and other["totals"]["records"] == 12

        # When the killed job is followed again, and a fresh one run for comparison
        run_args = [arg for run_id in runs for arg in ("--run", run_id)]
        out = tmp_path / "resumed.jsonl"
        resumed = invoke(
            "reproject", "--projectors", "current", *run_args, "--lanes", "1",
            "--job", "killed", "--out", str(out), "--json",
        )  # fmt: skip
        fresh_out = tmp_path / "fresh.jsonl"
        fresh = invoke(
            "reproject", "--projectors", "current", *run_args, "--lanes", "1",
            "--job", "fresh", "--out", str(fresh_out), "--json",
        )  # fmt: skip

    # Then it ends with the totals of a job never interrupted: every record counted once
    assert resumed.exit_code == fresh.exit_code == EXIT_OK, resumed.output + fresh.output
    totals = json.loads(resumed.stdout.splitlines()[-1])
    fresh_totals = json.loads(fresh.stdout.splitlines()[-1])
    del totals["job_id"], fresh_totals["job_id"]
    assert totals == fresh_totals
    assert (totals["runs"], totals["records"]) == (6, 12)
    lines = sorted(out.read_text().splitlines())
    assert lines == sorted(fresh_out.read_text().splitlines())
    assert len(lines) == 6
    # And nothing is left held or waiting; the dead chunk never came back to be refused
    row = cap_row()
    assert (row["running"], row["waiting"], row["stale_holders"]) == (0, 0, 0), row


def test_a_cancelled_job_s_waiting_lanes_leave_the_cap_s_line_for_the_next_job(
    cli_env: None,
    celery_session_app: Celery,
    v1: ToolBoundary,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    # Given a cap of 1 (an operator's setting) and a worker of four threads
    settings = capped_settings()
    dead = {f"d{n}": [("c1", "hold")] for n in range(6)}
    later = {f"n{n}": [("c1", f"q{n}")] for n in range(2)}
    write_runs(v1, dead | later)
    with held_worker_at_cap_one(settings, tmp_path, "cap-cancel") as (_, hold):
        # And a job of three lanes whose first chunk holds the slot (its projector held),
        # its two other lanes waiting, and another job's lane waiting behind them
        start_job("dead", dead, "--lanes", "3", "--chunk-size", "1")
        wait_for("the held chunk runs", lambda: redis_client.exists(rt.GAUGE_HOLDING))
        wait_for("the other lanes wait", lambda: cap_row()["waiting"] == 2)
        start_job("next", later, "--lanes", "1", "--chunk-size", "1")
        wait_for("the next job waits", lambda: cap_row()["waiting"] == 3)

        # When the first job is cancelled
        cancelled = invoke("jobs", "cancel", "dead")
        assert cancelled.exit_code == EXIT_OK, cancelled.output

        # Then its waiting lanes have left the line at once: only the next job's waits
        row = cap_row()
        assert (row["running"], row["waiting"]) == (1, 1), row
        assert row["waiting_by_tenant"] == {"next": 1}, row
        assert job_state("dead")["lanes_ended"] == 2
        # And a late chunk of a cancelled lane (a duplicate message) asks for no slot: it
        # does not join the line behind which the next job waits
        jobs = RedisJobs.of(v1.store)
        assert jobs is not None
        job = jobs.get("dead")
        assert job is not None and len(job.ended) == 2
        stray = celery_session_app.send_task(
            REPROJECT_CHUNK, args=("dead", min(job.ended)), queue=REPROJECTIONS_QUEUE
        ).get(timeout=GIVE_UP_S)
        assert stray.get("state") != "waiting", stray
        assert cap_row()["waiting_by_tenant"] == {"next": 1}
        # And once the held chunk ends, the job ends cancelled and the next one runs
        hold.touch()
        ended = {
            job_id: wait_for(
                f"{job_id} ends",
                lambda j=job_id: (s := job_state(j))["state"] not in ACTIVE and s,
            )
            for job_id in ("dead", "next")
        }
    assert ended["dead"]["state"] == "cancelled", ended["dead"]
    assert ended["dead"]["totals"]["records"] == 1  # the held chunk's one record
    assert ended["next"]["state"] == "done", ended["next"]
    assert ended["next"]["totals"]["records"] == 2
    row = cap_row()
    assert (row["running"], row["waiting"]) == (0, 0), row
