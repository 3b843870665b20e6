"""A model turn's calls created in one round trip: ``create_many.lua`` and its arguments.

``create_many.lua`` runs ``create.lua``'s body once per call, in the order given, wrapped
here as a local function: the duplicate, budget and indexing rules stay in ``create.lua``
alone, so a turn's calls are created exactly as one by one, in one script.
"""

from __future__ import annotations

from collections.abc import Sequence

from boundary.models import CanonicalKey
from boundary.store._redis_common import load_script
from boundary.store.base import CreateTerms
from boundary.store.codec import create_args


def _create_many_source() -> str:
    one = load_script("create")
    flags = ""
    if one.startswith("#!"):
        # A shebang (script flags) must stay the script's first line.
        flags, _, one = one.partition("\n")
        flags += "\n"
    many = load_script("create_many")
    # The record scripts' shared prelude (return codes, clock, status guard) once, first.
    prelude = load_script("_prelude")
    return f"{flags}{prelude}\nlocal function create_one(KEYS, ARGV)\n{one}\nend\n{many}"


#: The script's source, composed once with the package.
CREATE_MANY = _create_many_source()


def create_many_args(
    calls: Sequence[tuple[CanonicalKey, CreateTerms]], *, ttl_ms: int, index: bool
) -> tuple[list[str], list[str | int]]:
    """KEYS and ARGV of ``create_many.lua`` for calls of ONE run (``create_args`` of each:
    the run's shared keys once, then each call's record key and arguments).

    Raises:
        ValueError: no call, or calls of more than one run.
    """
    if not calls or len({key.run_id for key, _ in calls}) != 1:
        raise ValueError("create_many takes the calls of one run")
    shared: list[str] = []
    records: list[str] = []
    argv: list[str | int] = []
    per = 0
    for key, terms in calls:
        run_keys, call_argv = create_args(key, terms, ttl_ms=ttl_ms, index=index)
        shared = run_keys[1:]
        records.append(run_keys[0])
        argv.extend(call_argv)
        per = len(call_argv)
    return [*shared, *records], [len(calls), len(shared), per, *argv]
