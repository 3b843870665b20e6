"""``--profile``: where the time goes, written beside the report.

- ``submit`` in this process, by pyinstrument (``profile_submit.txt``/``.html``).
- Each worker (ours and bare, pool children included) during one B1 measurement, by py-spy
  when it is installed (``pip install py-spy``): a speedscope file per side and a text summary
  with the share of samples in the boundary's steps and the frames that take the most time.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.b1_throughput import measure
from bench.sides import Ours, Side, call_ids

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
    """Share of samples in the boundary's steps, and the frames with most inclusive time."""
    document = json.loads(path.read_text())
    frames = document["shared"]["frames"]
    stacks = [stack for profile in document["profiles"] for stack in profile["samples"] if stack]
    inclusive: Counter[str] = Counter()
    steps = 0
    for stack in stacks:
        names = {_frame(frames[i]) for i in stack}
        inclusive.update(names)
        steps += any(frames[i]["name"] in BOUNDARY_STEPS for i in stack)
    total = len(stacks) or 1
    return {
        "samples": len(stacks),
        "boundary_steps_share": steps / total,
        "top_frames": [(name, count / total) for name, count in inclusive.most_common(top)],
    }


def _frame(frame: dict[str, Any]) -> str:
    where = str(frame.get("file", "")).split("site-packages/")[-1]
    return f"{frame['name']} ({where}:{frame.get('line')})"


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
    return "\n".join(lines) + "\n"
