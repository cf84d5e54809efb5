"""Charging wall clock to buckets, instant by instant, and the naive span-seconds sum beside it.

Each frame (an iteration window, a stretch outside every window) is swept over the boundaries of the bucketed
spans that overlap it, clipped to it. Between two boundaries the active set of buckets is constant, and the whole
segment goes to the first active bucket in precedence order, or to `unaccounted` when none is active. Nested and
concurrent spans therefore count once, and the buckets plus unaccounted add up to the frame's wall clock exactly
(integer nanoseconds all the way).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .attempts import ATTEMPT_SQL
from .errors import GoodputError
from .overlaps import clip_to_stretches
from .schema import BUCKETS

if TYPE_CHECKING:
    import duckdb

@dataclass(frozen=True, slots=True)
class Frame:
    """A stretch of time to charge: an iteration window or a stretch outside them all."""

    frame_id: int
    start_ns: int
    end_ns: int
    process: str | None = None  # with a process, only that process's spans are charged


@dataclass(slots=True)
class Charge:
    """Nanoseconds of one frame per bucket (keys: the four buckets) and unaccounted."""

    wall_ns: int
    bucket_ns: dict[str, int]
    unaccounted_ns: int


def parse_precedence(text: str | None) -> list[str]:
    """`idle,productive,overhead,wasted` -> that list; None -> the declared order. Each bucket exactly once."""
    if text is None:
        return list(BUCKETS)
    order = [token.strip() for token in text.split(",") if token.strip()]
    if sorted(order) != sorted(BUCKETS):
        raise GoodputError(f"--precedence must name each of {', '.join(BUCKETS)} once, got {text!r}")
    return order


def charge_wall_clock(
    connection: duckdb.DuckDBPyConnection, frames: Sequence[Frame], precedence: Sequence[str]
) -> dict[int, Charge]:
    """Charge every frame's wall clock to the highest-precedence active bucket, else unaccounted.

    Needs the `spans_ex` table of `lineage.build_lineage`. Frames may overlap each other; each is charged on its
    own. Frames either all name a process (then only that process's spans count in each) or none does.
    """
    if not frames:
        return {}
    if not any(f.process is not None for f in frames):
        charged = _charged_ns(connection, [(f.start_ns, f.end_ns) for f in frames], precedence, by_process=False)
        return {f.frame_id: frame_charge(f, charged.get(i), precedence) for i, f in enumerate(frames)}
    stretches = sorted({(f.start_ns, f.end_ns) for f in frames})
    stretch_of = {stretch: index for index, stretch in enumerate(stretches)}
    charged = _charged_ns(connection, stretches, precedence, by_process=True)
    return {
        f.frame_id: frame_charge(f, charged.get((stretch_of[(f.start_ns, f.end_ns)], f.process)), precedence)
        for f in frames
    }


def charge_each_process(
    connection: duckdb.DuckDBPyConnection, frames: Sequence[Frame], precedence: Sequence[str]
) -> dict[int, dict[str, Charge]]:
    """For `--by process`: per frame, each process that has a bucketed span overlapping it, charged with that
    process's spans alone. One pass for every process (a process with nothing in a frame is not listed)."""
    if not frames:
        return {}
    stretches = sorted({(f.start_ns, f.end_ns) for f in frames})
    stretch_of = {stretch: index for index, stretch in enumerate(stretches)}
    by_stretch: dict[int, dict[str, list[int]]] = {}
    for (stretch, process), by_rank in _charged_ns(connection, stretches, precedence, by_process=True).items():
        by_stretch.setdefault(stretch, {})[process] = by_rank
    out = {}
    for frame in frames:
        found = by_stretch.get(stretch_of[(frame.start_ns, frame.end_ns)], {})
        out[frame.frame_id] = {process: frame_charge(frame, by_rank, precedence) for process, by_rank in found.items()}
    return out


def frame_charge(frame: Frame, by_rank: list[int] | None, precedence: Sequence[str]) -> Charge:
    """A frame's charge from its nanoseconds by bucket in `precedence` order (None: nothing charged)."""
    by_rank = by_rank or [0] * len(BUCKETS)
    wall = frame.end_ns - frame.start_ns
    return Charge(wall, dict(zip(precedence, by_rank, strict=True)), wall - sum(by_rank))


def _charged_ns(
    connection: duckdb.DuckDBPyConnection,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    *,
    by_process: bool,
) -> dict[Any, list[int]]:
    """Nanoseconds charged to each bucket (in `precedence` order) in each stretch (by position), or in each
    (stretch, process) for the processes with bucketed spans there.

    The spans cut to each stretch (`overlaps`) are swept in time order within it: between two events the active
    buckets are constant and the segment goes to the first of them. The four active counts travel packed in one
    128-bit integer, 32 bits a bucket, so one running sum carries the whole state; events at the same instant give
    zero-length segments, which charge nothing.
    """
    rank_sql = "CASE bucket " + " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(precedence)) + " END"
    shift = 32

    def first_active(i: int) -> str:
        earlier = "".join(f"(active >> {shift * j}) & {0xFFFFFFFF} = 0 AND " for j in range(i))
        charged = f"CASE WHEN {earlier}(active >> {shift * i}) & {0xFFFFFFFF} > 0 THEN t_next - t ELSE 0 END"
        return f"sum({charged})::BIGINT AS r{i}"

    keys = "stretch, process" if by_process else "stretch"
    try:
        clip_to_stretches(
            connection,
            stretches,
            f"SELECT start_ns, end_ns, {'process, ' if by_process else ''}{rank_sql} AS rank FROM spans_ex "
            "WHERE bucketed AND end_ns > start_ns",
            ["process", "rank"] if by_process else ["rank"],
            "charge_clipped",
        )
        rows = connection.execute(
            f"""
            WITH events AS (
                SELECT {keys}, s AS t, (1::HUGEINT << ({shift} * rank)) AS delta FROM charge_clipped
                UNION ALL
                SELECT {keys}, e AS t, -(1::HUGEINT << ({shift} * rank)) AS delta FROM charge_clipped
            ),
            running AS (
                SELECT {keys}, t,
                       lead(t) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS t_next,
                       sum(delta) OVER (PARTITION BY {keys} ORDER BY t ROWS UNBOUNDED PRECEDING) AS active
                FROM events
            )
            SELECT {keys}, {", ".join(first_active(i) for i in range(len(BUCKETS)))}
            FROM running WHERE t_next IS NOT NULL GROUP BY {keys}
            """
        ).fetchall()
    finally:
        connection.execute("DROP TABLE IF EXISTS charge_clipped")
    if by_process:
        return {(row[0], row[1]): [int(v or 0) for v in row[2:]] for row in rows}
    return {row[0]: [int(v or 0) for v in row[1:]] for row in rows}


def span_seconds_ns(connection: duckdb.DuckDBPyConnection, by_process: bool = False) -> dict[Any, dict[str, int]]:
    """Per (attempt, effective iteration[, process]), per bucket: the summed full durations of its bucketed spans.

    The naive view a monitor computes: it exceeds the wall clock wherever spans nest or run concurrently. Keyed by
    attempt (its run id, `""` when unnamed) because a row counts the spans of its own attempt only.
    """
    keys = f"{ATTEMPT_SQL}, eff_iteration" + (", process" if by_process else "")
    rows = connection.execute(
        f"""
        SELECT {keys}, bucket, sum(end_ns - start_ns)::BIGINT FROM spans_ex
        WHERE bucketed AND eff_iteration IS NOT NULL GROUP BY ALL
        """
    ).fetchall()
    out: dict[Any, dict[str, int]] = {}
    for row in rows:
        key = (row[0], int(row[1]), row[2]) if by_process else (row[0], int(row[1]))
        out.setdefault(key, dict.fromkeys(BUCKETS, 0))[row[-2]] = int(row[-1])
    return out
