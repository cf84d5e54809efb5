"""When this process started: the resource attribute `process.creation.time` that `configure()` writes (SPEC 2, 7).

The report reaches an attempt's extent back to its processes' start, so the start-up before the first span (imports,
Ray's worker start, model loading) belongs to the attempt. The operating system knows the start; psutil is not a
dependency, so on Linux it is read from `/proc/self/stat` (the start in clock ticks since boot) against
`CLOCK_BOOTTIME`, the clock those ticks count on (both shifted alike inside a time namespace): the process's age,
taken from the wall clock now, in the wall clock the spans use. That is exact to a clock tick (10 ms), where
`/proc/stat`'s boot time, whole seconds, would not be. Elsewhere, or when that cannot be read, the time of the
first `configure()` in the process stands in: still before every span it records.
"""

from __future__ import annotations

import datetime
import os
import time

from ._log import logger

# The first answer in this process, by pid: a forked child is a process of its own, with its own start.
_answer: tuple[int, str] | None = None


def process_creation_time() -> str:
    """This process's start as ISO 8601 in UTC with milliseconds (`2026-05-09T07:35:25.120Z`), the form the
    OpenTelemetry semantic conventions give for `process.creation.time`."""
    global _answer
    pid = os.getpid()
    if _answer is None or _answer[0] != pid:
        started_s = _started_from_proc()
        if started_s is None:
            started_s = time.time()
        stamp = datetime.datetime.fromtimestamp(started_s, datetime.UTC).isoformat(timespec="milliseconds")
        _answer = (pid, stamp.replace("+00:00", "Z"))
    return _answer[1]


def _started_from_proc() -> float | None:
    """The start in seconds since the epoch from `/proc/self/stat`, or None where there is no such file (not Linux)
    or it does not read as Linux writes it."""
    try:
        with open("/proc/self/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
        # `pid (comm) state ...`: comm may hold spaces and parentheses, so the fields start after the last ")".
        fields = text[text.rindex(")") + 2 :].split()
        started_ticks = int(fields[22 - 3])  # field 22, counting from 1, of which `state` is the third
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        boot_now_s = time.clock_gettime(time.CLOCK_BOOTTIME)
        wall_now_s = time.time()
    except (OSError, ValueError, IndexError, AttributeError):
        logger.debug("goodput: /proc/self/stat gave no start time; using the time of configure()", exc_info=True)
        return None
    if ticks_per_s <= 0:
        return None
    age_s = boot_now_s - started_ticks / ticks_per_s
    if not 0 <= age_s <= boot_now_s:  # a start after now or before boot: not a clock this formula can trust
        return None
    return wall_now_s - age_s
