"""Which phase the wall clock went to (SPEC section 8): each window's bucket seconds shared among span names or groups.

Within a window, an instant charged to bucket B (the first active bucket in precedence order, as in `attribution`)
is shared equally among the distinct names (or `rl.span_group`s) of the bucket-B spans active at that instant,
whatever their process. A phase that ran alone keeps all of its time; two phases overlapping split the overlap. So
every name's share is the part of its phase nobody else covered plus its fair part of the rest, and for every window
and bucket the names add up to the bucket's seconds exactly.

The sweep runs over the moments a name starts or stops being active (not every span edge): a packed running count
of active names per bucket gives, for each segment between two such moments, the charged bucket and how many names
share it; a running sum of each bucket's `segment / sharers` then prices any name's active stretch as the
difference of two prefix sums, with no join of names against segments. The shares, exact rationals in principle,
are floats to well under a nanosecond; they are turned into integer nanoseconds that add up to the bucket exactly by
largest remainder.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollup.base.errors import GoodputError
from rollup.base.memory import sweep_batch_spans
from rollup.base.schema import BUCKETS
from rollup.store.attempts import ATTEMPT_SQL
from rollup.store.derived import kept_columns, stretches_key

from .attribution import FrameCharges, swept_spans_sql
from .intervals import Stretches, clip_to_stretches, in_time_batches
from .rows import NameColumns, NameShare
from .span_seconds import SPAN_SECONDS_SPANS
from .windows import stretches_of, window_keys

if TYPE_CHECKING:
    from rollup.store.spanset import SpanSet

    from .windows import Window

# How a span is keyed: by its name, or by its `rl.span_group` (`""` when it has none).
BREAKDOWN_KEYS = {"name": "name", "group": "coalesce(span_group, '')"}


def shares_by_name(
    spans: SpanSet, windows: Sequence[Window], precedence: Sequence[str], *, by: str = "name"
) -> list[list[NameShare]]:
    """Per window (in the order given), the names' shares of its buckets, sorted by bucket order, then wall
    nanoseconds descending, then name: each bucket's charge (as `attribution.charge_stretches` gives it) shared
    among the names, rounded to add up to it, with the span-seconds of the spans whose effective iteration is the
    window's and whose attempt is the window's own."""
    _, walls = charged_name_walls(spans, windows, precedence, by=by)
    shares, _ = name_share_columns(spans, windows, walls, by=by)
    out: list[list[NameShare]] = [[] for _ in windows]
    for position, key, bucket, wall_ns, span_ns in zip(
        shares.positions, shares.key_ids, shares.buckets, shares.wall_ns, shares.span_ns, strict=True
    ):
        out[position].append(NameShare(shares.keys[key], BUCKETS[bucket], wall_ns, span_ns))
    return out


@dataclass(frozen=True)
class NameWalls:
    """Every window's wall nanoseconds per (name, bucket), rounded to add up to its buckets' charge, held as columns of
    64-bit integers: per share its window's position, its name (a position in `keys`), its bucket (a position in
    BUCKETS) and its nanoseconds. What `charged_name_walls` gives and `name_share_columns` reads: a long run has a
    million shares, which as a dict per window took ~0.5 KB each."""

    positions: array
    keys: list[str]
    key_ids: array
    buckets: array
    wall_ns: array


def charged_name_walls(
    spans: SpanSet,
    windows: Sequence[Window],
    precedence: Sequence[str],
    *,
    by: str = "name",
    batch_spans: int | None = None,
) -> tuple[FrameCharges, NameWalls]:
    """Per window (in the order given): its charge, as `attribution.charge_stretches` gives it (`FrameCharges`), and
    each (name, bucket)'s wall nanoseconds of it (`NameWalls`), from one sweep whose segments run between the moments
    a name turns on or off: the active buckets change only at such a moment, so each segment's whole integer length
    goes to the charged bucket exactly as in a sweep over every span edge. The windows are swept in batches
    consecutive in time, as the charge sweeps them (`intervals.in_time_batches`, each of at most `batch_spans` spans,
    default what the memory limit has room for), each batch's shares rounded and let go as it comes. A re-run on
    cached files reads both back (`derived.kept_columns`)."""
    stretches = stretches_of(windows)
    walls = array("q", (end - start for start, end in stretches))
    if not stretches:
        empty = NameWalls(array("q"), [], array("q"), array("q"), array("q"))
        return FrameCharges(walls, [array("q", bytes(8 * len(stretches))) for _ in precedence], precedence), empty

    def sweep() -> tuple[dict[str, array], dict[str, Any]]:
        by_rank, found = _swept_name_walls(spans, stretches, precedence, by, batch_spans)
        columns = {f"r{rank}": column for rank, column in enumerate(by_rank)}
        columns |= {"positions": found.positions, "key_ids": found.key_ids, "buckets": found.buckets}
        return columns | {"wall_ns": found.wall_ns}, {"keys": found.keys}

    of = Stretches.of(stretches)
    key: list[bytes | str] = [stretches_key(of.starts, of.ends), ",".join(precedence), by]
    columns, extras = kept_columns(spans, "names", key, sweep)
    by_rank = [columns[f"r{rank}"] for rank in range(len(precedence))]
    found = NameWalls(columns["positions"], list(extras["keys"]), columns["key_ids"], columns["buckets"],
                      columns["wall_ns"])  # fmt: skip
    return FrameCharges(walls, by_rank, precedence), found


def _swept_name_walls(
    spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str], by: str, batch_spans: int | None
) -> tuple[list[array], NameWalls]:
    """`charged_name_walls`' sweep: each stretch's charge per rank, and the (name, bucket) shares."""
    by_rank = [array("q", bytes(8 * len(stretches))) for _ in precedence]
    found = NameWalls(array("q"), [], array("q"), array("q"), array("q"))
    key_ids: dict[str, int] = {}
    most = batch_spans or sweep_batch_spans(spans.limit_bytes)
    for positions, batch, spans_sql in in_time_batches(spans, stretches, swept_spans_sql(spans), most):
        part, ranks = _swept_shares(spans, batch, precedence, BREAKDOWN_KEYS[by], spans_sql)
        for local, charged in ranks.items():
            for rank, ns in enumerate(charged):
                by_rank[rank][positions[local]] = ns
        for local, exact in part.items():
            position = positions[local]
            bucket_ns = {bucket: by_rank[rank][position] for rank, bucket in enumerate(precedence)}
            for (name, bucket), ns in _rounded(exact, bucket_ns).items():
                found.positions.append(position)
                found.key_ids.append(key_ids.setdefault(name, len(key_ids)))
                found.buckets.append(BUCKETS.index(bucket))
                found.wall_ns.append(ns)
    found.keys.extend(key_ids)
    return by_rank, found


def name_share_columns(
    spans: SpanSet, windows: Sequence[Window], walls: NameWalls, *, by: str = "name"
) -> tuple[NameColumns, list[NameShare]]:
    """`shares_by_name` from `charged_name_walls`' columns, and the shares of all the windows summed per (name,
    bucket) (the total's), sorted alike: the wall nanoseconds and the span-seconds joined and sorted in DuckDB, so
    no Python object is made per share."""
    import pyarrow as pa

    from rollup.base.arrays import int64_array, int64_column

    bucket_of = "CASE bucket " + " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(BUCKETS)) + " END"
    window_table = window_keys(windows)
    wall_table = pa.table(
        {"position": int64_array(walls.positions), "key_id": int64_array(walls.key_ids),
         "bucket": int64_array(walls.buckets), "ns": int64_array(walls.wall_ns)}
    )  # fmt: skip
    keys_table = pa.table(
        {"key_id": pa.array(range(len(walls.keys)), pa.int64()), "key": pa.array(walls.keys, pa.string())}
    )
    with (
        spans.registered("names_windows", window_table) as names_windows,
        spans.registered("names_wall", wall_table) as names_wall,
        spans.registered("names_wall_keys", keys_table) as names_wall_keys,
        spans.scratch("names_merged") as merged,
    ):
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {merged} AS
            WITH wall AS (
                SELECT w.position, k.key, w.bucket, w.ns FROM {names_wall} w JOIN {names_wall_keys} k USING (key_id)
            ),
            spans AS (
                SELECT w.position, s.key, s.bucket, s.ns
                FROM (
                    SELECT {ATTEMPT_SQL} AS attempt, eff_iteration, {BREAKDOWN_KEYS[by]} AS key, {bucket_of} AS bucket,
                           sum(end_ns - start_ns)::BIGINT AS ns
                    FROM {spans.lineage} WHERE {SPAN_SECONDS_SPANS} GROUP BY ALL
                ) s JOIN {names_windows} w ON w.attempt = s.attempt AND w.iteration = s.eff_iteration
            )
            SELECT coalesce(a.position, b.position) AS position, coalesce(a.key, b.key) AS key,
                   coalesce(a.bucket, b.bucket)::BIGINT AS bucket, coalesce(a.ns, 0)::BIGINT AS wall_ns,
                   coalesce(b.ns, 0)::BIGINT AS span_ns
            FROM wall a FULL OUTER JOIN spans b ON a.position = b.position AND a.key = b.key AND a.bucket = b.bucket
            WHERE coalesce(a.ns, 0) <> 0 OR coalesce(b.ns, 0) <> 0
            """
        )
        keys = [key for (key,) in spans.rows(f"SELECT DISTINCT key FROM {merged} ORDER BY key")]
        key_ids = pa.table({"key_id": pa.array(range(len(keys)), pa.int64()), "key": pa.array(keys, pa.string())})
        with spans.registered("names_keys", key_ids) as names_keys:
            table = spans.arrow(
                f"""
                SELECT m.position, k.key_id, m.bucket, m.wall_ns, m.span_ns
                FROM {merged} m JOIN {names_keys} k USING (key)
                ORDER BY m.position, m.bucket, m.wall_ns DESC, m.key
                """
            )
        total = [
            NameShare(key, BUCKETS[bucket], int(wall_ns), int(span_ns))
            for key, bucket, wall_ns, span_ns in spans.rows(
                f"""
                SELECT key, bucket, sum(wall_ns)::BIGINT AS wall_ns, sum(span_ns)::BIGINT FROM {merged}
                GROUP BY ALL ORDER BY bucket, wall_ns DESC, key
                """
            )
        ]
    columns = NameColumns(
        int64_column(table, "position"), keys, int64_column(table, "key_id"), int64_column(table, "bucket"),
        int64_column(table, "wall_ns"), int64_column(table, "span_ns"),
    )  # fmt: skip
    return columns, total


def _rounded(exact: dict[tuple[str, str], float], bucket_ns: dict[str, int]) -> dict[tuple[str, str], int]:
    """One window's float shares as integer nanoseconds adding up to each bucket's charge (`apportion`)."""
    of_bucket: dict[str, dict[str, float]] = {}
    for (bucket, name), value in exact.items():
        of_bucket.setdefault(bucket, {})[name] = value
    return {
        (name, bucket): ns
        for bucket in BUCKETS if bucket in of_bucket
        for name, ns in apportion(of_bucket[bucket], bucket_ns[bucket]).items() if ns
    }  # fmt: skip


def apportion(exact: dict[str, float], total: int) -> dict[str, int]:
    """Integer nanoseconds for float shares that add up to `total` exactly: each share's floor, and the nanoseconds
    left over to the shares with the largest remainders (ties to the earlier name). The floats are within a small
    fraction of a nanosecond of the exact shares, so at most one nanosecond moves per name."""
    if len(exact) <= 1:  # a name alone in its bucket has all of it (what the rounding below gives it too)
        return dict.fromkeys(exact, total)
    floors = {name: max(0, int(value)) for name, value in exact.items()}
    left = total - sum(floors.values())
    by_remainder = sorted(exact, key=lambda name: (-(exact[name] - floors[name]), name))
    while left > 0:  # one pass in practice; a loop keeps the sum exact whatever the floats did
        for name in by_remainder[:left]:
            floors[name] += 1
        left = total - sum(floors.values())
    for name in reversed(by_remainder):  # only if float error overshot: take back from the smallest remainders
        if left >= 0:
            break
        if floors[name] > 0:
            floors[name] -= 1
            left += 1
    return floors


def _swept_shares(
    spans: SpanSet,
    stretches: Sequence[tuple[int, int]],
    precedence: Sequence[str],
    key_sql: str,
    spans_sql: str,
) -> tuple[dict[int, dict[tuple[str, str], float]], dict[int, list[int]]]:
    """Per stretch of `stretches` (by position), per (bucket, name): the float nanoseconds of its share (see the
    module's docstring); and per stretch, the integer nanoseconds charged to each bucket in `precedence` order. One
    sweep over the spans of `spans_sql` (bucketed, of positive length): `charged_name_walls` gives it a batch."""
    rank_sql = "CASE bucket " + " ".join(f"WHEN '{b}' THEN {i}" for i, b in enumerate(precedence)) + " END"
    shift, mask = 32, 0xFFFFFFFF

    def count(rank: int) -> str:
        return f"((active >> {shift * rank}) & {mask})"

    # The charged rank of a segment is the first with an active name; its sharers, that rank's count.
    charged_rank = "CASE " + " ".join(f"WHEN {count(i)} > 0 THEN {i}" for i in range(len(BUCKETS))) + " END"
    sharers = "CASE " + " ".join(f"WHEN {count(i)} > 0 THEN {count(i)}" for i in range(len(BUCKETS))) + " END"
    prefix = ", ".join(
        f"coalesce(sum(CASE WHEN charged = {i} THEN portion END) OVER before, 0) AS p{i}" for i in range(len(BUCKETS))
    )
    priced = "CASE rank " + " ".join(f"WHEN {i} THEN p{i}" for i in range(len(BUCKETS))) + " END"
    with spans.scratch("breakdown_clipped") as clipped, spans.scratch("breakdown_keys") as key_ids:
        clip_to_stretches(
            spans,
            stretches,
            f"SELECT start_ns, end_ns, {rank_sql} AS rank, {key_sql} AS key FROM ({spans_sql})",
            ["rank", "key"],
            clipped,
        )
        # Names as small integers, packed with the window and the rank into one sort key: sorting 64-bit integers
        # is several times cheaper than sorting (window, rank, name) rows.
        spans.run(
            f"""
            CREATE OR REPLACE TEMP TABLE {key_ids} AS
            SELECT key, (row_number() OVER ())::BIGINT AS key_id FROM (SELECT DISTINCT key FROM {clipped})
            """
        )
        ((keys,),) = spans.rows(f"SELECT count(*) FROM {key_ids}")
        if keys >= 1 << 22:
            raise GoodputError(
                f"--by name/group: {keys:,} distinct keys, more than the breakdown tells apart (4,194,303)"
            )
        rows = spans.rows(
            f"""
            WITH grouped AS (
                SELECT (c.stretch << 24) | (c.rank::BIGINT << 22) | k.key_id AS grp, c.s, c.e
                FROM {clipped} c JOIN {key_ids} k USING (key)
            ),
            edges AS (
                SELECT grp, s AS t, 1 AS d FROM grouped UNION ALL SELECT grp, e AS t, -1 AS d FROM grouped
            ),
            -- A name starts being active (+1) when its count rises to 1, stops (-1) when it falls to 0. Each group's
            -- edges are contiguous in this order and add up to 0, so one running sum over all of them is each
            -- group's own count (no partitioning: one sort of integers).
            counted AS (SELECT *, sum(d) OVER (ORDER BY grp, t, d DESC ROWS UNBOUNDED PRECEDING) AS n FROM edges),
            turns AS (
                SELECT grp >> 24 AS frame_id, ((grp >> 22) & 3)::INTEGER AS rank, grp & {(1 << 22) - 1} AS key_id,
                       t, d
                FROM counted WHERE (d = 1 AND n = 1) OR (d = -1 AND n = 0)
            ),
            swept AS (
                SELECT frame_id, rank, key_id, t, d,
                       lead(t) OVER w AS t_next,
                       sum(d * (1::HUGEINT << ({shift} * rank))) OVER w AS active
                FROM turns WINDOW w AS (PARTITION BY frame_id ORDER BY t, d, rank, key_id ROWS UNBOUNDED PRECEDING)
            ),
            segments AS (
                SELECT frame_id, rank, key_id, t, d, {charged_rank} AS charged,
                       coalesce(t_next, t) - t AS length, length::DOUBLE / {sharers} AS portion
                FROM swept
            ),
            prefixed AS (
                SELECT frame_id, rank, key_id, d, {prefix} FROM segments  -- the same total order as `swept`'s
                WINDOW before AS (PARTITION BY frame_id ORDER BY t, d, rank, key_id
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
            ),
            shares AS (SELECT frame_id, rank, key_id, sum(-d * {priced}) AS share FROM prefixed GROUP BY ALL),
            charged AS (
                SELECT frame_id, charged AS rank, sum(length)::BIGINT AS ns FROM segments
                WHERE charged IS NOT NULL GROUP BY ALL
            )
            SELECT s.frame_id, s.rank, k.key, s.share, NULL::BIGINT FROM shares s JOIN {key_ids} k USING (key_id)
            UNION ALL SELECT frame_id, rank, NULL, NULL, ns FROM charged
            """
        )
    out: dict[int, dict[tuple[str, str], float]] = {}
    by_rank: dict[int, list[int]] = {}
    for frame_id, rank, key, value, ns in rows:
        if ns is not None:
            by_rank.setdefault(frame_id, [0] * len(BUCKETS))[rank] = int(ns)
        elif value and value > 0:
            out.setdefault(frame_id, {})[(precedence[rank], key)] = float(value)
    return out, by_rank
