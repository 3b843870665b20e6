"""CPU seconds used by this process and by a worker's process group (Linux ``/proc``).

On a shared, noisy machine the CPU a call costs varies far less than its wall-clock time, so
B1 reports it beside throughput. Where ``/proc`` is missing, the figures are ``None``.
"""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid_dir: Path) -> list[str] | None:
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after its closing one.
    return text[text.rindex(")") + 2 :].split()


def group_cpu_s(pgid: int) -> float | None:
    """User + system CPU seconds of every live process in process group ``pgid``."""
    if not _PROC.is_dir():
        return None
    total = 0
    for pid_dir in _PROC.iterdir():
        if not pid_dir.name.isdigit():
            continue
        fields = _stat_fields(pid_dir)
        # fields[2] is the process group; fields[11], fields[12] are utime and stime.
        if fields is not None and int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def own_cpu_s() -> float:
    """CPU seconds of this process, all threads."""
    times = os.times()
    return times.user + times.system
