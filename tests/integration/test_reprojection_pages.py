"""A re-projection's selection is read in pages of the runs index: every live run once, in
score then id order, across ties and lanes; never a SCAN."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from boundary.reprojection import Selection, first_cursor, indexed_runs, lane_of, page_runs
from boundary.store import keys

NOW = 1_000_000
TTL = 600_000


def index(client: redis.Redis) -> list[str]:
    runs = {f"run-{n:02d}": NOW + TTL - 50 for n in range(10)}  # ten tied scores
    runs |= {f"late-{n:02d}": NOW + TTL - 40 + n for n in range(15)}
    runs["expired"] = NOW - 1  # scored before now: not live
    runs["newer"] = NOW + TTL + 5  # took a call after the job started
    client.zadd(keys.RUNS, runs)
    return sorted(r for r in runs if r not in ("expired", "newer"))


def pages(client: redis.Redis, size: int, lane: int, lanes: int) -> list[list[str]]:
    selection = Selection(all=True)
    cursor = first_cursor(selection, now_ms=NOW, ttl_ms=TTL)
    seen = []
    while cursor:
        page, cursor = page_runs(
            client, selection, cursor, size=size, lane=lane, lanes=lanes, high_ms=NOW + TTL
        )
        seen.append(page)
    return seen


def test_pages_of_the_runs_index_take_every_live_run_once(redis_client: redis.Redis) -> None:
    live = index(redis_client)
    for size in (1, 3, 4, 10, 100):
        seen = [run for page in pages(redis_client, size, 0, 1) for run in page]
        assert sorted(seen) == live, size
        assert len(seen) == len(set(seen))


def test_lanes_split_the_runs_without_overlap(redis_client: redis.Redis) -> None:
    live = index(redis_client)
    by_lane = [[r for page in pages(redis_client, 2, lane, 3) for r in page] for lane in range(3)]
    assert sorted(r for runs in by_lane for r in runs) == live
    for lane, runs in enumerate(by_lane):
        assert all(lane_of(r, 3) == lane for r in runs)


def test_a_list_of_runs_is_paged_in_its_order() -> None:
    selection = Selection(runs=tuple(f"r{n}" for n in range(7)))
    cursor, seen = first_cursor(selection, now_ms=NOW, ttl_ms=TTL), []
    while cursor:
        page, cursor = page_runs(
            None,  # type: ignore[arg-type]  # a list needs no Redis
            selection,
            cursor,
            size=3,
            lane=0,
            lanes=1,
            high_ms=0,
        )
        seen += page
    assert seen == list(selection.runs)


def test_an_empty_selection_is_empty() -> None:
    assert Selection().empty
    assert not Selection(tools=("search",)).empty
    assert not Selection(since_ms=0).empty


def test_every_live_run_is_read_a_page_at_a_time_as_it_is_iterated(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the index of 25 live runs (ten of them tied), one expired and one newer
    live = index(redis_client)
    ranges: list[int] = []
    real_zrange = redis.Redis.zrange

    def counted(client: redis.Redis, *args: Any, **kwargs: Any) -> Any:
        ranges.append(kwargs.get("num") or 0)
        return real_zrange(client, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "zrange", counted)

    # When --all's runs are taken in pages of 4
    total, runs = indexed_runs(redis_client, now_ms=NOW, ttl_ms=TTL, page=4)
    assert ranges == []  # nothing is read before the first run is asked for
    first = next(iter(runs))
    read_at_first = len(ranges)
    rest = list(runs)

    # Then every live run once, in score then id order, read 4 at a time
    order = sorted(live, key=lambda r: (int(redis_client.zscore(keys.RUNS, r) or 0), r))
    assert (total, [first, *rest]) == (len(live), order)
    assert read_at_first == 1
    assert ranges == [4] * (len(live) // 4 + 1)
