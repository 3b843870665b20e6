"""The machine and software a run measured, for the report."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis

from bench.suite.config import Sizes

ROOT = Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    # A run from an exported copy of the tree (git archive) has no .git: the copy says.
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def commit() -> str | None:
    """The tree measured: ``git describe --always --dirty`` (or ``BENCH_COMMIT``)."""
    return _git_commit()


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def persistence(client: redis.Redis) -> dict[str, str] | None:
    """What the server keeps across a crash: ``appendonly``, ``appendfsync`` and ``save`` as
    ``CONFIG GET`` reads them (``None`` where ``CONFIG`` is refused)."""
    found: dict[str, str] = {}
    try:
        for name in ("appendonly", "appendfsync", "save"):
            found.update(
                {
                    (k.decode() if isinstance(k, bytes) else k): (
                        v.decode() if isinstance(v, bytes) else v
                    )
                    for k, v in client.config_get(name).items()
                }
            )
    except redis.RedisError:
        return None
    return found


def machine(redis_url: str, command: str, *, quick: bool, sizes: Sizes) -> dict[str, Any]:
    with redis.Redis.from_url(redis_url, socket_connect_timeout=2) as client:
        server: dict[str, Any] = client.info("server")
        kept = persistence(client)
    return {
        "command": command,
        "quick": quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": _git_commit(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "celery": version("celery"),
        "kombu": version("kombu"),
        "redis_py": version("redis"),
        "hiredis": version("hiredis") if _installed("hiredis") else None,
        "redis_server": server.get("redis_version"),
        # Store, broker and backend are DBs of this one server: every side ran with it.
        "persistence": kept,
        "load_before": load(),
        "sizes": asdict(sizes),
    }


def _installed(name: str) -> bool:
    try:
        version(name)
    except Exception:
        return False
    return True
