"""Attempts (SPEC section 7): the runs of one job that a crash and restart, or a reused folder, put side by side.

A span's attempt is its resource's `goodput.run.id`, else `nemo.run.id` (the `run_id` column); spans with neither
form one unnamed attempt, `""`. Attempts are never merged: each has its own extent and its own windows, a later
attempt's window supersedes an earlier one's for the same iteration, and the time between attempts is downtime.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from rollup.base.errors import GoodputError
from rollup.base.schema import IS_JOB_SQL


def attempt_sql(run_id: str = "run_id") -> str:
    """SQL: the attempt of the span whose run id is the column `run_id` (`s.run_id` in a join)."""
    return f"coalesce({run_id}, '')"


# A span's attempt in SQL over the lineage (`SpanSet.lineage`).
ATTEMPT_SQL = attempt_sql()

# What `--attempt latest` asks for: the attempt that started last.
LATEST = "latest"


@dataclass(frozen=True)
class Attempt:
    """One attempt: its run id (`""` when unnamed), its extent `[start_ns, end_ns]`, and what ran in it.

    The extent is the envelope of the attempt's job spans, else of all its spans, reaching back to the earliest
    `process.creation.time` of its processes when that is earlier (the start-up before the first span, Ray's
    included, is the attempt's even when a crash lost its job span). `first_iteration` and
    `last_iteration` are its lowest and highest iteration with a window (superseded ones included), None when it
    has none; `superseded` the iterations whose window a later attempt's replaced.
    """

    run_id: str
    start_ns: int
    end_ns: int
    first_span_ns: int  # its first span's start: attempts are ordered by it
    processes: int  # distinct processes with spans in it
    first_iteration: int | None = None
    last_iteration: int | None = None
    superseded: tuple[int, ...] = ()

    @property
    def extent(self) -> tuple[int, int]:
        return self.start_ns, self.end_ns


def attempt_label(run_id: str) -> str:
    """A run id as messages show it: quoted, so the unnamed attempt reads as `"" (unnamed)`."""
    return f'"{run_id}"' if run_id else '"" (unnamed)'


class Queried(Protocol):
    """What `find_attempts` reads of a set of spans (`spanset.SpanSet`, whose `attempts` asks it): the relation of
    the spans' own columns, and its connection's answer to a query."""

    @property
    def own(self) -> str: ...

    def rows(self, sql: str) -> list[tuple[Any, ...]]: ...


# SQL: the `process.creation.time` a span's `holding` carries (SPEC section 7), as epoch nanoseconds; NULL without one
# or when it is not an ISO 8601 time.
CREATED_NS_SQL = "epoch_ns(try_cast(json_extract_string(holding, '$.\"process.creation.time\"') AS TIMESTAMPTZ))"


def created_ns(holding: str | None) -> int | None:
    """`CREATED_NS_SQL` of one `holding` text, in Python."""
    if not holding:
        return None
    text = json.loads(holding).get("process.creation.time")
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # DuckDB reads a time without a zone as UTC
    delta = when - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000


def find_attempts(spans: Queried) -> list[Attempt]:
    """Every attempt of `spans`, ordered by its first span's start (then run id), windows not yet known."""
    rows = spans.rows(
        f"""
        SELECT {ATTEMPT_SQL} AS attempt,
               least(coalesce(min(start_ns) FILTER (WHERE {IS_JOB_SQL}), min(start_ns)), min({CREATED_NS_SQL})),
               coalesce(max(end_ns) FILTER (WHERE {IS_JOB_SQL}), max(end_ns)),
               min(start_ns) AS first_span_ns, count(DISTINCT process)
        FROM {spans.own} GROUP BY ALL ORDER BY first_span_ns, attempt
        """
    )
    return [Attempt(run_id, int(s), int(e), int(first), int(n)) for run_id, s, e, first, n in rows]


def attempts_of_folded(
    run_ids: Sequence[str | None],
    processes: Sequence[str | None],
    starts: Sequence[int],
    ends: Sequence[int],
    is_job: Sequence[bool],
    holdings: Sequence[str | None],
) -> list[Attempt]:
    """`find_attempts` worked out in Python from spans folded to a few rows (a watcher's summary, where a query of
    them costs milliseconds at each refresh): each row spans of one run id and process, job spans or not, from their
    earliest start to their latest end (a span alone is such a row too), and their process's `holding`. An attempt's
    extent is the envelope of its job spans, else of all its spans, reaching back to its processes' earliest
    creation time; ordered by the first span's start, then run id."""
    # attempt -> [start, end, job start, job end, first start, processes, earliest creation]
    found: dict[str, list[Any]] = {}
    for run_id, process, start, end, job, holding in zip(run_ids, processes, starts, ends, is_job, holdings,
                                                         strict=True):  # fmt: skip
        held = found.setdefault(run_id or "", [start, end, None, None, start, set(), None])
        held[0], held[1], held[4] = min(held[0], start), max(held[1], end), min(held[4], start)
        if job:
            held[2] = start if held[2] is None else min(held[2], start)
            held[3] = end if held[3] is None else max(held[3], end)
        if process is not None:
            held[5].add(process)
        created = created_ns(holding)
        if created is not None:
            held[6] = created if held[6] is None else min(held[6], created)
    made = [
        Attempt(run_id, min(s if js is None else js, c if c is not None else s if js is None else js),
                e if je is None else je, first, len(held_by))
        for run_id, (s, e, js, je, first, held_by, c) in found.items()
    ]  # fmt: skip
    return sorted(made, key=lambda a: (a.first_span_ns, a.run_id))


def downtime_stretches(attempts: Sequence[Attempt]) -> list[tuple[int, int]]:
    """The parts of `[first extent start, last extent end]` that no attempt's extent covers, sorted and disjoint."""
    stretches = []
    reach: int | None = None
    for start, end in sorted(a.extent for a in attempts):
        if reach is not None and start > reach:
            stretches.append((reach, start))
        reach = end if reach is None else max(reach, end)
    return stretches


def overlapping_attempts(attempts: Sequence[Attempt]) -> list[tuple[Attempt, Attempt, int]]:
    """(later, earlier, overlap in ns) for every two attempts whose extents share time, in attempt order."""
    pairs = []
    for j, later in enumerate(attempts):
        for earlier in attempts[:j]:
            overlap = min(earlier.end_ns, later.end_ns) - max(earlier.start_ns, later.start_ns)
            if overlap > 0:
                pairs.append((later, earlier, overlap))
    return pairs


def choose_attempt(run_ids: Sequence[str], wanted: str) -> str:
    """The run id `wanted` names among `run_ids` (the attempts in order): a run id (`""` for the unnamed attempt), or
    `latest`, the attempt that started last. An id the files do not hold is a GoodputError naming the ones they do."""
    if wanted == LATEST and run_ids:
        return run_ids[-1]
    if wanted in run_ids:
        return wanted
    held = ", ".join(attempt_label(n) for n in run_ids) or "none"
    raise GoodputError(f"no attempt {attempt_label(wanted)} in these traces; attempts: {held}")
