"""CPU seconds used by this process and by a worker's process group (Linux ``/proc``).

On a shared, noisy machine the CPU a call costs varies far less than its wall-clock time, so
B1 reports it beside throughput. Where ``/proc`` is missing, the figures are ``None``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid_dir: Path) -> list[str] | None:
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after its closing one.
    return text[text.rindex(")") + 2 :].split()


def _group(pgid: int) -> Iterator[tuple[Path, list[str]]]:
    """Each live process of process group ``pgid``: its ``/proc`` directory and stat fields."""
    for pid_dir in _PROC.iterdir():
        if not pid_dir.name.isdigit():
            continue
        fields = _stat_fields(pid_dir)
        # fields[2] is the process group.
        if fields is not None and int(fields[2]) == pgid:
            yield pid_dir, fields


def group_cpu_s(pgid: int) -> float | None:
    """User + system CPU seconds of every live process in process group ``pgid``."""
    if not _PROC.is_dir():
        return None
    # fields[11], fields[12] are utime and stime.
    total = sum(int(fields[11]) + int(fields[12]) for _, fields in _group(pgid))
    return total / _TICKS


def workers_cpu_s(pgids: tuple[int, ...]) -> float | None:
    """``group_cpu_s`` summed over the process groups ``pgids`` (``None``: none given, or
    ``/proc`` is not there)."""
    found = [group_cpu_s(pgid) for pgid in pgids]
    if not found or any(cpu is None for cpu in found):
        return None
    return sum(cpu for cpu in found if cpu is not None)


def group_switches(pgid: int) -> int | None:
    """Context switches (voluntary and not) of every thread of every live process in process
    group ``pgid``: each time a thread slept on a socket, a lock or the GIL and was woken,
    or was preempted."""
    if not _PROC.is_dir():
        return None
    total = 0
    for pid_dir, _ in _group(pgid):
        try:
            threads = list((pid_dir / "task").iterdir())
        except OSError:
            continue  # ended meanwhile
        for thread in threads:
            try:
                status = (thread / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def server_cpu_s(client: Any) -> float | None:
    """User + system CPU seconds of the Redis server behind ``client`` (``INFO cpu``):
    the broker, result backend and store of every side share it. A ``PgBackends`` instead
    gives the CPU of a PostgreSQL database's server processes."""
    if isinstance(client, PgBackends):
        return client.cpu_s()
    try:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except Exception:
        return None


def machine_cpu_s() -> float | None:
    """CPU seconds the whole machine spent busy (every core, ``/proc/stat``: user, nice,
    system, irq, softirq and steal), to tell how much of a measurement's time others took."""
    try:
        fields = (_PROC / "stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def own_cpu_s() -> float:
    """CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system


class PgBackends:
    """The PostgreSQL server processes serving database ``dbname`` (their command lines
    name it): their CPU is what the database costs the DBOS peer, as ``INFO cpu`` is for
    the Redis sides. A connection closed meanwhile takes its CPU with it, so pooled
    connections (DBOS's) are counted whole and short ones not at all."""

    def __init__(self, dbname: str) -> None:
        self.marker = f" {dbname} ".encode()

    def cpu_s(self) -> float | None:
        if not _PROC.is_dir():
            return None
        total = 0
        for pid_dir in _PROC.iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                if self.marker not in (pid_dir / "cmdline").read_bytes():
                    continue
            except OSError:
                continue
            fields = _stat_fields(pid_dir)
            if fields is not None:
                total += int(fields[11]) + int(fields[12])
        return total / _TICKS
