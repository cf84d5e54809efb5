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

import pyarrow as pa

from .attempts import ATTEMPT_SQL
from .errors import GoodputError
from .overlaps import clip_to_stretches
from .schema import BUCKETS

if TYPE_CHECKING:
    import duckdb

FRAME_SCHEMA = pa.schema(
    [("frame_id", pa.int64()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("process", pa.string())]
)


@dataclass(frozen=True)
class Frame:
    """A stretch of time to charge: an iteration window or a stretch outside them all."""

    frame_id: int
    start_ns: int
    end_ns: int
    process: str | None = None  # with a process, only that process's spans are charged


@dataclass
class Charge:
    """Nanoseconds of one frame per bucket (keys: the four buckets) and unaccounted."""

    wall_ns: int
    bucket_ns: dict[str, int]
    unaccounted_ns: int


def _frame_table(frames: Sequence[Frame], stretch_of: dict[tuple[int, int], int] | None = None) -> pa.Table:
    """Frames as a table; with `stretch_of`, each frame's stretch (its (start, end)) as a column `stretch`."""
    columns = [
        [f.frame_id for f in frames], [f.start_ns for f in frames], [f.end_ns for f in frames],
        [f.process for f in frames],
    ]  # fmt: skip
    arrays = [pa.array(c, f.type) for c, f in zip(columns, FRAME_SCHEMA, strict=True)]
    table = pa.Table.from_arrays(arrays, schema=FRAME_SCHEMA)
    if stretch_of is not None:
        stretches = [stretch_of[(f.start_ns, f.end_ns)] for f in frames]
        table = table.append_column("stretch", pa.array(stretches, pa.int64()))
    return table


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
    by_process = any(f.process is not None for f in frames)
    # The spans are cut to distinct stretches of time, never with a process condition (a hash join on the process
    # would compare every frame of a process with every span of it: 21 s for --by process at 1M spans). The spans
    # cut to a stretch are then handed to its frames by (stretch, process).
    every = [(f.start_ns, f.end_ns) for f in frames]
    stretches = sorted(set(every)) if by_process else every
    stretch_of = {stretch: index for index, stretch in enumerate(stretches)}
    rank_sql = "CASE bucket " + " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(precedence)) + " END"
    # The four active counts travel packed in one 128-bit integer, 32 bits a bucket, so one running sum carries
    # the whole state; events at the same instant give zero-length segments, which charge nothing.
    shift = 32

    def first_active(i: int) -> str:
        earlier = "".join(f"(active >> {shift * j}) & {0xFFFFFFFF} = 0 AND " for j in range(i))
        charged = f"CASE WHEN {earlier}(active >> {shift * i}) & {0xFFFFFFFF} > 0 THEN t_next - t ELSE 0 END"
        return f"sum({charged})::BIGINT AS r{i}"

    charged_columns = ", ".join(first_active(i) for i in range(len(BUCKETS)))
    try:
        kept = ["process", "rank"] if by_process else ["rank"]
        clip_to_stretches(
            connection,
            stretches,
            f"SELECT start_ns, end_ns, {', '.join(kept[:-1] + [f'{rank_sql} AS rank'])} FROM spans_ex "
            "WHERE bucketed AND end_ns > start_ns",
            kept,
            "charge_clipped",
        )
        frame_key = "stretch"
        if by_process:  # stretch -> each of its frames, for that frame's process's spans
            connection.register("charge_frames", _frame_table(frames, stretch_of))
            connection.execute(
                """
                CREATE OR REPLACE TEMP TABLE charge_clipped AS
                SELECT f.frame_id, c.process, c.rank, c.s, c.e
                FROM charge_clipped c JOIN charge_frames f ON f.stretch = c.stretch AND f.process = c.process
                """
            )
            connection.unregister("charge_frames")
            frame_key = "frame_id"
        rows = connection.execute(
            f"""
            WITH events AS (
                SELECT {frame_key} AS frame, s AS t, (1::HUGEINT << ({shift} * rank)) AS delta FROM charge_clipped
                UNION ALL
                SELECT {frame_key} AS frame, e AS t, -(1::HUGEINT << ({shift} * rank)) AS delta FROM charge_clipped
            ),
            running AS (
                SELECT frame, t,
                       lead(t) OVER (PARTITION BY frame ORDER BY t ROWS UNBOUNDED PRECEDING) AS t_next,
                       sum(delta) OVER (PARTITION BY frame ORDER BY t ROWS UNBOUNDED PRECEDING) AS active
                FROM events
            )
            SELECT frame, {charged_columns} FROM running WHERE t_next IS NOT NULL GROUP BY frame
            """
        ).fetchall()
    finally:
        connection.execute("DROP TABLE IF EXISTS charge_clipped")
    if not by_process:  # rows are keyed by position
        rows = [(frames[row[0]].frame_id, *row[1:]) for row in rows]
    charged = {row[0]: [int(v or 0) for v in row[1:]] for row in rows}
    nothing = [0] * len(BUCKETS)
    result = {}
    for frame in frames:
        by_rank = charged.get(frame.frame_id, nothing)
        wall = frame.end_ns - frame.start_ns
        result[frame.frame_id] = Charge(wall, dict(zip(precedence, by_rank, strict=True)), wall - sum(by_rank))
    return result


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


def processes_in_frames(connection: duckdb.DuckDBPyConnection, frames: Sequence[Frame]) -> dict[int, list[str]]:
    """For `--by process`: per frame, the processes that have a bucketed span overlapping it (sorted)."""
    if not frames:
        return {}
    try:
        clip_to_stretches(
            connection,
            [(f.start_ns, f.end_ns) for f in frames],
            "SELECT start_ns, end_ns, process FROM spans_ex WHERE bucketed AND end_ns > start_ns",
            ["process"],
            "process_clipped",
        )
        rows = connection.execute("SELECT DISTINCT stretch, process FROM process_clipped ORDER BY 1, 2").fetchall()
    finally:
        connection.execute("DROP TABLE IF EXISTS process_clipped")
    out: dict[int, list[str]] = {}
    for position, process in rows:
        out.setdefault(frames[position].frame_id, []).append(process)
    return out
