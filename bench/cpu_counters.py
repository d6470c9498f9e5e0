"""CPU counters read from ``/proc``, for benchmarks that say what a drain costs.

Standard library only: the peers harness's Python imports it too.
"""

from __future__ import annotations

import os


def machine_cpu_seconds() -> float | None:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq and
    softirq of every core; idle, iowait and steal are not ours), if readable."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(value) for value in stat.readline().split()[1:8]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def server_cpu_seconds() -> float | None:
    """CPU seconds of every process named ``postgres`` on this machine, if readable,
    with those of the postmaster's children that have ended (a drain's backends end
    with its connections, and their time moves to their parent's count)."""
    total, found = 0, False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                name, rest = stat.read().split(") ", 1)
        except OSError:
            continue
        if name.endswith("(postgres"):
            fields = rest.split()
            total += sum(int(value) for value in fields[11:15])
            found = True
    return total / os.sysconf("SC_CLK_TCK") if found else None


def per_run(before: float | None, after: float | None, runs: int) -> float | None:
    """Microseconds per run between two readings of a counter above (``None`` if either
    could not be read)."""
    return None if before is None or after is None else (after - before) / runs * 1e6
