"""Tools for the Celery integration tests: imported by workers through
``TOOL_BOUNDARY_TOOLS=tests.support.celery_tools:registry`` and by the tests themselves."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from boundary import (
    EvidenceStatus,
    Projection,
    RetryPolicy,
    ToolRegistry,
    ToolSpec,
    current_call,
    heartbeat,
)
from tests.support import flow_tools

#: Text that must never reach an agent, a task result or Flower.
SECRET = "sk-live-SECRET-7f3a9c"
SECRET_URL = "redis://:hunter2-pass@10.9.8.7:6379/0"
STACK = 'Traceback (most recent call last):\n  File "/srv/app/secrets.py", line 1'


class HitsProjector:
    """EVIDENCE_FOUND when there are hits, else a scoped NO_EVIDENCE."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        hits = raw["hits"]
        if not hits:
            return Projection(
                evidence_status=EvidenceStatus.NO_EVIDENCE, scope={"query": request.get("query")}
            )
        return Projection(
            evidence_status=EvidenceStatus.EVIDENCE_FOUND,
            result={"count": len(hits), "first": hits[0]["id"]},
            scope={"query": request.get("query")},
        )


class HangingProjector(HitsProjector):
    """Hangs for ``request["hang"]`` seconds before projecting: a projector stuck on I/O."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        time.sleep(float(request.get("hang", 0)))
        return super().project(raw, request)


class DiesOnceProjector(HitsProjector):
    """Kills its process the first time it runs for a marker path (``request["marker"]``):
    a worker lost between keeping the raw response and sealing the record."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        marker = request.get("marker")
        if marker and not os.path.exists(marker):
            open(marker, "w").close()
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return super().project(raw, request)


class RaisingProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        raise RuntimeError(f"projector broke: {SECRET} {SECRET_URL} {STACK}")


class InvalidEvidenceProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> dict[str, Any]:
        return {"evidence_status": "MAYBE", "result": {"x": 1}}


class HugeResultProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result="x" * 100_000)


class SecretFreeProjector:
    """Projects only a count: the raw response's secret stays Harness-only."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result={"n": len(raw)})


def lookup(arguments: dict[str, Any]) -> dict[str, Any]:
    query = arguments["query"]
    if query == "nothing":
        return {"hits": []}
    return {"hits": [{"id": f"doc-{i}", "text": f"{query} {i}"} for i in range(3)]}


def boom(arguments: dict[str, Any]) -> Any:
    raise RuntimeError(f"tool broke: {SECRET} {SECRET_URL} {STACK}")


def sleepy(arguments: dict[str, Any]) -> dict[str, Any]:
    """Sleeps ``seconds``; first creates the file ``started`` names, if any (a test waits for
    it to know the tool runs, rather than sleeping and hoping it does)."""
    if arguments.get("started"):
        open(arguments["started"], "w").close()
    time.sleep(float(arguments.get("seconds", 1.0)))
    return {"hits": [{"id": f"slept-{arguments.get('n', 0)}", "pid": os.getpid()}]}


#: Opened by a test's event loop while ``gate`` waits on it: an adapter's async path that
#: blocked the loop would leave it shut (the worker thread shares this process).
GATE = threading.Event()
#: Set by ``gate`` once it runs: the loop opens the gate only then.
GATE_REACHED = threading.Event()


def gate(arguments: dict[str, Any]) -> dict[str, Any]:
    GATE_REACHED.set()
    opened = GATE.wait(timeout=4.0)
    return {"hits": [{"id": "opened" if opened else "shut"}]}


#: Three ``together`` calls pass it only when they run at the same time (a call that runs
#: alone breaks it after its timeout and fails).
TOGETHER = threading.Barrier(3, timeout=5.0)


def together(arguments: dict[str, Any]) -> dict[str, Any]:
    TOGETHER.wait()
    return {"hits": [{"id": "together"}]}


#: Set by a test to let every ``held`` call return: until then the call cannot end READY
#: (only at its 9 s time limit), so "still running" does not depend on how fast the test is.
HELD = threading.Event()


def held(arguments: dict[str, Any]) -> dict[str, Any]:
    released = HELD.wait(timeout=30.0)
    return {"hits": [{"id": "released" if released else "held"}]}


#: ``crowd`` calls wait (at most 8 s) until this many of them are in flight at once: a call
#: ends ``"crowd"`` only if the worker really ran that many side by side.
CROWD_SIZE = 4
_crowd = threading.Condition()
_crowd_state = {"in_flight": 0, "peak": 0}


def reset_crowd() -> None:
    with _crowd:
        _crowd_state.update(in_flight=0, peak=0)


def crowd(arguments: dict[str, Any]) -> dict[str, Any]:
    with _crowd:
        _crowd_state["in_flight"] += 1
        _crowd_state["peak"] = max(_crowd_state["peak"], _crowd_state["in_flight"])
        _crowd.notify_all()
        met = _crowd.wait_for(lambda: _crowd_state["peak"] >= CROWD_SIZE, timeout=8.0)
        _crowd_state["in_flight"] -= 1
    return {"hits": [{"id": f"crowd-{arguments.get('n', 0)}" if met else "alone"}]}


def counted(arguments: dict[str, Any]) -> dict[str, Any]:
    """Appends a line (its process id) to the file ``log`` names, so a test counts how often
    it ran across processes; with ``hold`` it then waits for ``HELD`` (at most 8 s), with
    ``until`` for the file it names to exist (at most 8 s: a test in another process)."""
    with open(arguments["log"], "a", encoding="utf-8") as log:
        log.write(f"{os.getpid()}\n")
    if arguments.get("hold"):
        HELD.wait(timeout=8.0)
    if arguments.get("until"):
        give_up = time.monotonic() + 8.0
        # Not wait_until: a tool's body in the worker, which returns after 8 s whatever
        while not os.path.exists(arguments["until"]) and time.monotonic() < give_up:
            time.sleep(0.02)
    return {"hits": [{"id": f"counted-{arguments.get('n', 0)}"}]}


def runs_of(log: str) -> int:
    """How often ``counted`` ran for the file ``log``."""
    try:
        with open(log, encoding="utf-8") as lines:
            return sum(1 for _ in lines)
    except FileNotFoundError:
        return 0


def huge_raw(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"blob": "y" * (int(arguments.get("bytes", 2_000_000)))}


def leaky(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"token": SECRET, "dsn": SECRET_URL, "echo": arguments}


def suicide(arguments: dict[str, Any]) -> Any:
    """Kills the process running it: every attempt loses its worker."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def beating(arguments: dict[str, Any]) -> dict[str, Any]:
    """A long tool that heartbeats: ``steps`` (``retry_steps`` on a retry) steps of ``step_s``
    seconds, a heartbeat with its progress before each. Each step leaves a file
    ``<dir>/<call>-<attempt>-<i>`` (a side effect a test can count after a cancel); on its way
    out it leaves ``...-<attempt>-exit`` naming why it left (``done``, ``cancelled``)."""
    call = current_call()
    assert call is not None
    folder = arguments.get("dir")
    steps = int(arguments.get("steps", 10))
    if call.attempt > 1:  # a retry may be told to be quicker
        steps = int(arguments.get("retry_steps", steps))
    stem = f"{folder}/{call.tool_call_id}-{call.attempt}" if folder else None
    why = "cancelled"
    try:
        for i in range(steps):
            heartbeat(progress=i / steps, message=f"step {i} of {steps}")
            if stem:
                open(f"{stem}-{i}", "w").close()
            time.sleep(float(arguments.get("step_s", 0.1)))
        why = "done"
    finally:
        if folder:
            # Written aside, then renamed: a test that sees the exit file reads its reason
            # whole (it could see an empty file between the open and the write). The dot
            # keeps the aside file out of the tests' globs of the steps.
            aside = f"{folder}/.{call.tool_call_id}-{call.attempt}-exit"
            with open(aside, "w") as out:
                out.write(why)
            os.replace(aside, f"{stem}-exit")
    return {"hits": [{"id": f"beat-{call.attempt}", "attempt": call.attempt, "pid": os.getpid()}]}


#: Set by a test to let ``beat_until_set`` return; it heartbeats until then.
BEAT_GATE = threading.Event()


def beat_until_set(arguments: dict[str, Any]) -> dict[str, Any]:
    """Reports half done with a message, then heartbeats until ``BEAT_GATE`` is set."""
    while not BEAT_GATE.wait(0.05):
        heartbeat(progress=0.5, message="half way: 5 of 10 pages")
    return {"hits": [{"id": "beat-released"}]}


def slow_first_time(arguments: dict[str, Any]) -> dict[str, Any]:
    """Overruns its time limit on attempt 1 (heartbeating, so it stops once given up on),
    answers at once on attempt 2."""
    call = current_call()
    assert call is not None
    while call.attempt == 1:
        heartbeat(message="stuck")  # raises CallCancelled once the attempt was given up on
        time.sleep(0.05)
    return {"hits": [{"id": f"attempt-{call.attempt}"}]}


#: ``hang`` calls wait on it (a test sets it when done, so their threads come back).
HANG = threading.Event()


def hang(arguments: dict[str, Any]) -> dict[str, Any]:
    """Hangs (never heartbeats) until ``HANG`` is set or ``seconds`` pass; with ``stubborn``,
    it swallows every exception raised into it meanwhile (no interruption stops it)."""
    give_up = time.monotonic() + float(arguments.get("seconds", 600))
    # Not a wait of the test: the tool hangs on purpose
    while not HANG.is_set() and (left := give_up - time.monotonic()) > 0:
        try:
            HANG.wait(min(left, 0.05) if arguments.get("stubborn") else left)
        except BaseException:
            if not arguments.get("stubborn"):
                raise
    return {"hits": [{"id": "unhung", "pid": os.getpid()}]}


#: Every test tool's time limit unless it says otherwise: below the 10 s visibility timeout
#: the worker-loss tests use (a worker refuses to start otherwise).
TEST_TIMEOUT_S = 5.0

#: The declared arguments of ``find`` (``lookup`` with a description and a schema), the tool
#: the run-handle and adapter tests call.
FIND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 100}},
    "required": ["query"],
    "additionalProperties": False,
}


def build_registry() -> ToolRegistry:
    hits = HitsProjector()

    def spec(name: str, executor: Any, projector: Any = hits, **options: Any) -> ToolSpec:
        options = {"read_only": True, "timeout_s": TEST_TIMEOUT_S} | options
        return ToolSpec(name=name, executor=executor, projector=projector, **options)

    return ToolRegistry(
        [
            spec("lookup", lookup),
            spec(
                "find",
                lookup,
                description="Find documents about a query.",
                input_schema=FIND_SCHEMA,
            ),
            spec("boom", boom),
            spec("gate", gate),
            spec("together", together),
            spec("bad_projector", lookup, RaisingProjector()),
            spec("hung_projector", lookup, HangingProjector()),
            spec("dies_projecting", lookup, DiesOnceProjector()),
            spec("invalid_evidence", lookup, InvalidEvidenceProjector()),
            spec("huge_raw", huge_raw),
            spec("huge_result", lookup, HugeResultProjector()),
            spec("slow", sleepy, timeout_s=1.0),
            spec("sleepy", sleepy, timeout_s=8.0),
            spec("held", held, timeout_s=9.0),
            spec("crowd", crowd, timeout_s=9.0),
            spec("counted", counted, timeout_s=9.0),
            spec("leaky", leaky, SecretFreeProjector()),
            spec("writer", lookup, read_only=False),
            spec("suicide", suicide),
            # Long-running tools: heartbeats, retries, their own queue, bounded concurrency.
            spec(
                "beating",
                beating,
                timeout_s=8.0,
                heartbeat_timeout_s=2.0,
                retry=RetryPolicy(max_attempts=2, backoff_s=0),
            ),
            spec("beating_once", beating, timeout_s=8.0, heartbeat_timeout_s=2.0),
            # A call that runs long enough for a browser to watch it (the web view's tests).
            spec("beating_long", beating, timeout_s=9.0, heartbeat_timeout_s=5.0),
            spec("beat_until_set", beat_until_set, timeout_s=9.0, heartbeat_timeout_s=5.0),
            spec(
                "slow_first_time",
                slow_first_time,
                timeout_s=0.5,
                retry=RetryPolicy(max_attempts=2, backoff_s=0),
            ),
            spec("hang", hang, timeout_s=0.3, max_concurrency=2),
            spec("hang_unbounded", hang, timeout_s=0.3),
            spec("long_lookup", lookup, queue="long"),
            # Fleet flow control: one at once; ``held`` calls hold the one slot.
            spec("held_slot", held, timeout_s=9.0, concurrency=1),
            *flow_tools.build_specs(),
        ]
    )


registry = build_registry()
