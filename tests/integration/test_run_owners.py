"""Run owners on real Redis (``own_run.lua``): the first requester of an open run owns it,
atomically, for the run's lifetime; a closed, unknown or expired run has no owner to take."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import redis

from boundary import RedisCanonicalStore, ToolBoundary
from boundary.store import keys
from boundary.store.redis_run_owners import RedisRunOwners, RunOwnership
from tests.support.helpers import RUN_ID, make_run


def owners_of(store: RedisCanonicalStore) -> RedisRunOwners:
    owners = RedisRunOwners.of(store)
    assert owners is not None
    return owners


def test_the_first_requester_owns_an_open_run_and_keeps_it(
    boundary: ToolBoundary, store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    # Given an open run
    boundary.open_run(make_run())
    ttl_before = redis_client.pttl(keys.run_key(RUN_ID))
    owners = owners_of(store)
    # When alice uses it, then bob, then alice again
    first = owners.own(RUN_ID, "oauth-alice")
    other = owners.own(RUN_ID, "oauth-bob")
    again = owners.own(RUN_ID, "oauth-alice")
    # Then it is alice's, bob is refused, and the run's TTL and policy are untouched
    assert (first, other, again) == (
        RunOwnership.OWNED_NOW,
        RunOwnership.OTHER_OWNER,
        RunOwnership.ALREADY_OWNED,
    )
    assert first.allowed and again.allowed and not other.allowed
    assert 0 < redis_client.pttl(keys.run_key(RUN_ID)) <= ttl_before
    assert boundary.get_run(RUN_ID) == make_run()


def test_a_run_that_is_not_open_has_no_owner_to_take(
    boundary: ToolBoundary, store: RedisCanonicalStore, redis_client: redis.Redis
) -> None:
    owners = owners_of(store)
    # An unknown run, and an id that is not safe, are not created by asking
    assert owners.own("run-unknown", "oauth-alice") is RunOwnership.NOT_OPEN
    assert owners.own("bad id:{x}", "oauth-alice") is RunOwnership.NOT_OPEN
    assert not redis_client.exists(keys.run_key("run-unknown"))
    # A closed run cannot be taken either
    boundary.open_run(make_run())
    assert boundary.close_run(RUN_ID)
    assert owners.own(RUN_ID, "oauth-alice") is RunOwnership.NOT_OPEN


def test_of_many_first_uses_at_once_exactly_one_wins(
    boundary: ToolBoundary, store: RedisCanonicalStore
) -> None:
    boundary.open_run(make_run())
    owners = owners_of(store)
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda n: owners.own(RUN_ID, f"oauth-{n}"), range(16)))
    assert answers.count(RunOwnership.OWNED_NOW) == 1
    assert answers.count(RunOwnership.OTHER_OWNER) == 15
