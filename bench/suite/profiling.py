"""``--profile``: where the time goes, written beside the report.

- ``submit`` in this process, by pyinstrument (``profile_submit.txt``/``.html``).
- Each worker (ours and every peer, pool children included) during one B1 measurement, by py-spy
  when it is installed (``pip install py-spy``): a speedscope file per side and a text summary
  with the share of samples in the boundary's steps and the frames that take the most time.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.suite.b1_throughput import measure
from bench.suite.sides import Ours, Side, call_ids

ROOT = Path(__file__).resolve().parents[2]

#: Frames that are the boundary's own work inside a worker.
BOUNDARY_STEPS = ("execute_step", "project_step")
#: Samples per second of py-spy.
PY_SPY_RATE = 250


def profile_submit(ours: Ours, calls: int, out: Path) -> dict[str, Any]:
    """Profiles ``calls`` submits (their outcomes awaited outside the profile)."""
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0002)
    for run_id, call_id in call_ids("b2prof", calls):
        profiler.start()
        handle = ours.send(run_id, call_id)
        profiler.stop()
        ours.wait(handle)
    out.mkdir(parents=True, exist_ok=True)
    text = out / "profile_submit.txt"
    text.write_text(profiler.output_text(unicode=True, show_all=False))
    html = out / "profile_submit.html"
    html.write_text(profiler.output_html())
    return {"text": str(text), "html": str(html)}


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_worker(side: Side, pgid: int, calls: int, out: Path) -> dict[str, Any] | None:
    """Records the worker of ``side`` while ``calls`` calls go through it."""
    binary = py_spy()
    if binary is None:
        return None
    target = out / f"py-spy-{side.name}.speedscope.json"
    # --gil: only the thread holding the GIL is sampled, so the profile shows where the
    # worker's CPU goes, not threads waiting on sockets (which a wall-clock profile counts).
    command = [binary, "record", "--pid", str(pgid), "--subprocesses", "--nonblocking", "--gil"]
    command += ["--rate", str(PY_SPY_RATE), "--format", "speedscope", "--output", str(target)]
    recorder = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # attached before the first call
        sample = measure(side, calls, pgid)
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=60)
    if not target.exists():
        return None
    summary = summarize_speedscope(target)
    summary["calls_per_s"] = sample.per_s
    (out / f"py-spy-{side.name}.txt").write_text(_summary_text(side.name, summary))
    return summary


def summarize_speedscope(path: Path, top: int = 30) -> dict[str, Any]:
    """Share of samples in the boundary's steps and under each of their callees, the frames
    with most inclusive time, and the frames with most samples of their own (leaves)."""
    document = json.loads(path.read_text())
    frames = document["shared"]["frames"]
    stacks = [stack for profile in document["profiles"] for stack in profile["samples"] if stack]
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    under_steps: Counter[str] = Counter()
    steps = 0
    for stack in stacks:
        names = {_frame(frames[i]) for i in stack}
        inclusive.update(names)
        leaves[_frame(frames[stack[-1]])] += 1
        at = [n for n, i in enumerate(stack) if frames[i]["name"] in BOUNDARY_STEPS]
        if at:
            steps += 1
            step = frames[stack[at[0]]]["name"]
            callee = _func(frames[stack[at[0] + 1]]) if at[0] + 1 < len(stack) else "(itself)"
            under_steps[f"{step} -> {callee}"] += 1
    total = len(stacks) or 1
    return {
        "samples": len(stacks),
        "boundary_steps_share": steps / total,
        "under_steps": [(name, count / total) for name, count in under_steps.most_common(top)],
        "top_frames": [(name, count / total) for name, count in inclusive.most_common(top)],
        "self_frames": [(name, count / total) for name, count in leaves.most_common(top)],
    }


def _where(frame: dict[str, Any]) -> str:
    """The frame's file, relative to site-packages, the repository or the stdlib."""
    where = str(frame.get("file", ""))
    for marker in ("site-packages/", f"{ROOT}/"):
        if marker in where:
            return where.rsplit(marker, maxsplit=1)[-1]
    return re.sub(r"^.*/lib/python3\.\d+/", "", where)


def _func(frame: dict[str, Any]) -> str:
    """The frame's function and file, without its line: callees add up per function."""
    return f"{frame['name']} ({_where(frame)})"


def _frame(frame: dict[str, Any]) -> str:
    return f"{frame['name']} ({_where(frame)}:{frame.get('line')})"


def _summary_text(name: str, summary: dict[str, Any]) -> str:
    lines = [
        f"py-spy, {name} worker: {summary['samples']} samples at {PY_SPY_RATE}/s, "
        f"{summary['calls_per_s']:.0f} calls/s",
        f"in the boundary's steps ({', '.join(BOUNDARY_STEPS)}): "
        f"{summary['boundary_steps_share']:.1%}",
        "",
        "inclusive share of samples:",
    ]
    lines += [f"{share:6.1%}  {frame}" for frame, share in summary["top_frames"]]
    lines += ["", "under the boundary's steps:"]
    lines += [f"{share:6.1%}  {frame}" for frame, share in summary["under_steps"]]
    lines += ["", "own samples (leaf frames):"]
    lines += [f"{share:6.1%}  {frame}" for frame, share in summary["self_frames"]]
    return "\n".join(lines) + "\n"
