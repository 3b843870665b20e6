"""The runs index: on a single Redis the create script keeps every run scored by the expiry of
its newest record, so ``tool-boundary runs`` lists runs without scanning the keyspace."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import redis

from boundary import RedisCanonicalStore
from boundary.store import keys
from boundary.store import redis as redis_store
from boundary.store.codec import ms
from tests.support.helpers import TOOL, create_projecting, monitored


def test_runs_are_listed_from_the_index_without_a_scan(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given calls of three runs
    for run_id in ("r-a", "r-b", "r-c"):
        create_projecting(store, "c1", run_id=run_id)
    create_projecting(store, "c2", run_id="r-a")
    # When the runs are listed
    with monitored(redis_client) as commands:
        listed = sorted(store.run_ids())
    # Then each run is listed once, and nothing scanned the keyspace (counted on this DB only:
    # other suites share the server)
    assert listed == ["r-a", "r-b", "r-c"]
    assert not [c for c in commands if c.startswith("scan")]


def test_a_run_is_scored_by_its_newest_records_expiry_which_never_moves_back(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given a run's call
    first = create_projecting(store, "c1", run_id="r-1")
    record = store.get(first)
    assert record is not None
    # Then the run's score is the record's expiry (created_at + TTL, Redis time)
    ttl_ms = int(store.ttl_s * 1000)
    assert redis_client.zscore(keys.RUNS, "r-1") == ms(record.created_at) + ttl_ms
    assert 0 < redis_client.pttl(keys.RUNS) <= ttl_ms
    # When a store with a shorter TTL creates another call of the run
    short = RedisCanonicalStore(client=store.client, ttl_s=1, limits=store.limits)
    create_projecting(short, "c2", run_id="r-1")
    # Then the run stays scored by the longer-lived record
    assert redis_client.zscore(keys.RUNS, "r-1") == ms(record.created_at) + ttl_ms


def test_expired_runs_are_not_listed_and_creates_trim_them(
    store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given 15 runs in the index whose records expired long ago, and a live one
    redis_client.zadd(keys.RUNS, {f"old-{n}": 1_000 + n for n in range(15)})
    create_projecting(store, "c1", run_id="live")
    # When the runs are listed
    # Then only the live run is
    assert list(store.run_ids()) == ["live"]
    # And the first create of each run trims up to ten expired runs from the index
    assert redis_client.zcard(keys.RUNS) == 1 + 15 - 10
    create_projecting(store, "c2", run_id="live")
    assert redis_client.zcard(keys.RUNS) == 1 + 15 - 10
    create_projecting(store, "c1", run_id="live-2")
    assert sorted(redis_client.zrange(keys.RUNS, 0, -1)) == ["live", "live-2"]


def test_the_index_is_read_a_page_at_a_time_in_its_order_ties_included(
    store: RedisCanonicalStore, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given live runs in the index, five and three sharing a score, and an expired one
    later = ms(store.now()) + 10**8
    scores = {f"t-{n}": later for n in (4, 0, 3, 1, 2)} | {f"u-{n}": later + 1 for n in (2, 0, 1)}
    redis_client.zadd(keys.RUNS, scores | {"gone": 1_000})
    expected = sorted(scores, key=lambda r: (scores[r], r))
    # (MONITOR's list is complete only when its block ends: the reads made before the first
    # run came are counted on the client instead)
    ranges_sent: list[int] = []
    zrange = store.client.zrange

    def counted(*args: Any, **kwargs: Any) -> Any:
        ranges_sent.append(1)
        return zrange(*args, **kwargs)

    monkeypatch.setattr(store.client, "zrange", counted)
    # When the index is listed two runs at a time
    with monitored(redis_client, round_trips=True) as commands:
        first = store.run_ids(page=2)
        assert next(first) == expected[0]
        read_at_first = len(ranges_sent)
        rest = list(first)
    # Then every live run is listed once, in the index's order (score, then id)
    assert [expected[0], *rest] == expected
    # And each read asked for two members; the first run came after one read, not all
    ranges = [c for c in commands if c.startswith("zrange")]
    assert ranges and all(" limit " in c for c in ranges), ranges
    assert all(c.split(" limit ")[1].split()[1] == "2" for c in ranges), ranges
    assert read_at_first == 1 and len(ranges) == 5  # 8 runs: 4 full pages and an empty one


def _recorded_batches(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Sizes of the lists of runs the store's ``name`` is asked about, call by call."""
    sizes: list[int] = []
    method = getattr(RedisCanonicalStore, name)

    def recorded(self: RedisCanonicalStore, run_ids: Sequence[str]) -> Any:
        sizes.append(len(run_ids))
        return method(self, run_ids)

    monkeypatch.setattr(RedisCanonicalStore, name, recorded)
    return sizes


def test_the_web_runs_page_reads_the_index_in_pages_and_only_the_runs_it_shows(
    store: RedisCanonicalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks.web import pages

    # Given five runs of one call each (PROJECTING), one of them of another tool
    for n in range(5):
        create_projecting(store, "c1", run_id=f"w-{n}", tool_name="other" if n == 3 else TOOL)
    newest_first = list(store.run_ids())[::-1]
    # And pages of two runs: read, shown, and searched by tool (three)
    monkeypatch.setattr(redis_store, "RUN_IDS_PAGE", 2)
    monkeypatch.setattr(pages, "SUMMARY_PAGE", 2)
    monkeypatch.setattr(pages, "RUNS_PAGE", 2)
    monkeypatch.setattr(pages, "TOOL_FILTER_RUNS", 3)
    summarised = _recorded_batches(monkeypatch, "run_summaries")
    read_calls = _recorded_batches(monkeypatch, "progress_many")
    # When the runs page is read
    page = pages.runs_page(store, pages.RunsQuery())
    # Then it shows the two newest runs and counts every run, as before
    assert [row["summary"].run_id for row in page["runs"]] == newest_first[:2]
    assert page["matching"] == 5
    assert page["totals"] == {"runs": 5, "calls": 5, "ready": 0, "error": 0, "projecting": 5}
    # And it read the counts two runs at a time, and the calls of the runs shown only
    assert summarised == [2, 2, 1] and read_calls == [2]
    # When it is filtered by tool: the newest three runs are searched
    summarised.clear()
    read_calls.clear()
    page = pages.runs_page(store, pages.RunsQuery(tool=TOOL))
    searched = [r for r in newest_first[:3] if r != "w-3"]
    assert [row["summary"].run_id for row in page["runs"]] == searched[:2]
    assert page["matching"] == len(searched)
    assert read_calls == [3] and max(summarised) <= 2
