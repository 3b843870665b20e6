"""Every Redis key name, in one place. All keys of a run share the ``{run_id}`` hash tag so
each Lua script of a run touches one Redis Cluster slot."""

from __future__ import annotations

import hashlib
import re

from boundary.models import CanonicalKey

#: Prefix of every key this project writes.
PREFIX = "tb"


def record_key(key: CanonicalKey) -> str:
    """The canonical record (a hash)."""
    return record_key_of(key.run_id, key.tool_call_id)


def record_key_of(run_id: str, tool_call_id: str) -> str:
    """``record_key`` of the ids themselves (a batch read that builds no key model)."""
    return f"{PREFIX}:{{{run_id}}}:call:{tool_call_id}"


def budget_key(run_id: str) -> str:
    """Run counters (a hash): ``calls`` (accepted, also the sequence), ``tool:<name>``,
    ``sealed:READY`` and ``sealed:ERROR``."""
    return f"{PREFIX}:{{{run_id}}}:budget"


def progress_key(run_id: str) -> str:
    """Completed identities (a sorted set scored by acceptance sequence)."""
    return f"{PREFIX}:{{{run_id}}}:progress"


def pending_key(run_id: str) -> str:
    """Identities still PROJECTING (a sorted set scored by the time the reaper may seal them).
    Redis deletes an empty sorted set, so only runs with pending calls have this key."""
    return f"{PREFIX}:{{{run_id}}}:pending"


def run_key(run_id: str) -> str:
    """An opened run's policy (a hash): ``policy`` (the RunContext as JSON), ``state``
    (``open`` or ``closed``) and ``opened_at``, so a server can look the run up by id; and
    ``owner`` once a requester of an authorized MCP door used it (``redis_run_owners``)."""
    return f"{PREFIX}:{{{run_id}}}:run"


def sealed_channel(run_id: str) -> str:
    """The Pub/Sub channel ``seal.lua`` publishes a call's tool_call_id on when it seals it,
    so waiters wake on the seal instead of polling. A channel, not a key: it goes to the
    script as an ARGV, and it shares the run's hash tag only by name."""
    return f"{PREFIX}:{{{run_id}}}:sealed"


#: Runs that have (or recently had) calls PROJECTING: a sorted set, run id -> touch count.
#: The one global key the boundary writes; every command on it names it alone, so it lives in
#: one Cluster slot. The reaper reads it instead of scanning the keyspace.
PENDING_RUNS = f"{PREFIX}:pending-runs"

#: Every live run, scored by the expiry (epoch ms) of its newest record: written by the create
#: script on a single Redis only (on Redis Cluster it is in another slot than the run's keys,
#: and runs are found by SCAN instead). ``tool-boundary runs`` reads it instead of scanning.
RUNS = f"{PREFIX}:runs"

#: SCAN patterns.
BUDGET_PATTERN = f"{PREFIX}:{{*}}:budget"
PENDING_PATTERN = f"{PREFIX}:{{*}}:pending"


def run_id_of(key: str) -> str:
    """The run id inside a run key's hash tag."""
    start = key.index("{") + 1
    return key[start : key.index("}", start)]


def mcp_task_key(task_id: str) -> str:
    """An MCP task id's entry (a hash: the call's identity, its owner, created and ttl ms),
    expiring with the task. Touched alone, so it needs no hash tag."""
    return f"{PREFIX}:mcp-task:{task_id}"


def mcp_tasks_key(owner: str) -> str:
    """One owner's MCP task ids, newest last (a sorted set, all scores 0, members
    ``<created_ms:013d>:<task_id>`` so lexical order is creation order)."""
    return f"{PREFIX}:mcp-tasks:{owner}"


#: The parts of one tool's flow control (``lua/flow/_prelude.lua`` says what each holds), in
#: the order every flow script takes them as KEYS.
FLOW_PARTS = (
    "running",
    "leases",
    "tenants",
    "starts",
    "waiting",
    "queue",
    "ready",
    "unconfirmed",
    "deadlines",
    "conf",
    "meta",
    "unsent",
)

#: A tool name used as its hash tag as it is; any other is hashed (a brace would move the tag).
_PLAIN_TOOL = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def flow_tag(tool: str) -> str:
    """The hash tag of a tool's flow-control keys: its name, or ``~`` and a digest of it
    when the name holds other characters (``~`` keeps the two kinds apart)."""
    if _PLAIN_TOOL.fullmatch(tool):
        return tool
    return "~" + hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def flow_keys(tool: str) -> list[str]:
    """One tool's flow-control keys, all in the tool's hash slot."""
    tag = flow_tag(tool)
    return [f"{PREFIX}:flow:{{{tag}}}:{part}" for part in FLOW_PARTS]


#: Run-time overrides of tools' limits (a hash: tool name -> the override as JSON), written by
#: ``tool-boundary limits set``: how every process learns which tools have one. The tool's own
#: ``conf`` key holds the same override for its scripts. Touched alone (one Cluster slot).
FLOW_OVERRIDES = f"{PREFIX}:flow-overrides"

#: The limited tools seen in use (a hash: tool name -> its declared limits and when a process
#: last said so, as JSON): written by a process the first time it admits a call of a limited
#: tool (then once a minute at most) and by ``limits set``, so ``tool-boundary limits`` and the
#: web view list every limited tool of the fleet, whatever their own registry, without a scan.
#: The hash expires with the records (the store's TTL from its last write); an entry older
#: than that is dropped when read. Touched alone (one Cluster slot).
FLOW_TOOLS = f"{PREFIX}:flow-tools"


def side_key(key: CanonicalKey, version: str) -> str:
    """A re-projection's side projection of one call by projector ``version`` (a hash: the
    new projection's status, evidence, result, scope, code and version), beside its record and
    expiring no later than it (``tool-boundary reproject --projectors current --write``)."""
    return f"{PREFIX}:{{{key.run_id}}}:side:{key.tool_call_id}:{version}"


def side_versions_key(run_id: str) -> str:
    """The projector versions of a run's side projections (a set), expiring with the last of
    them: what ``observe --projector-version`` names when the version asked has none."""
    return f"{PREFIX}:{{{run_id}}}:side-versions"


#: Re-projection jobs share one hash tag, so a job's scripts touch one Cluster slot.
_JOBS_TAG = f"{PREFIX}:{{jobs}}"
#: Every job by id, scored by its creation time (epoch ms): what ``tool-boundary jobs`` lists.
JOBS = f"{_JOBS_TAG}:index"


def job_key(job_id: str) -> str:
    """A re-projection job (a hash: its selection, state, each lane's cursor and totals)."""
    return f"{_JOBS_TAG}:job:{job_id}"


def job_lines_key(job_id: str) -> str:
    """A job's report lines (a stream, capped), in the order its chunks were checkpointed."""
    return f"{_JOBS_TAG}:lines:{job_id}"
