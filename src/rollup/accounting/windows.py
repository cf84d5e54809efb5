"""Iteration windows: each attempt's, which are the report's rows and which are superseded.

Windows are found per attempt (`attempts`). In an attempt, window N is the step span carrying its own
`rl.iteration = N` (the envelope when there are several); an attempt with no such step span gets, for each N, the
envelope of its spans whose effective iteration is N. When several attempts have a window for N, the latest one's
is the report's row and the earlier ones are superseded (the stretches no window covers are the report's frames
too: `frames`). And what else was happening in step N: every span active during its window, whatever its own
iteration (`listing`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from rollup.base.arrays import alike, int64_column, rising
from rollup.base.errors import GoodputError
from rollup.base.schema import sql_text
from rollup.store.attempts import ATTEMPT_SQL
from rollup.store.derived import kept_columns, stretches_key

from .intervals import Stretches

if TYPE_CHECKING:
    import pyarrow as pa

    from rollup.store.attempts import Attempt
    from rollup.store.spanset import SpanSet


@dataclass(frozen=True, slots=True)
class Window:
    """Iteration `iteration`'s stretch of attempt `run_id`, `[start_ns, end_ns)`."""

    iteration: int
    start_ns: int
    end_ns: int
    run_id: str = ""

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


class Windows(Sequence[Window]):
    """Windows held as columns: iterations and each window's stretch (`intervals.Stretches`) as 64-bit integers, and
    each window's attempt as a position in `run_ids`. A long run has hundreds of thousands of windows: a Window
    object with its Python ints takes ~180 bytes, these columns 28. A Window is made when one is asked for."""

    __slots__ = ("iterations", "stretches", "attempts", "run_ids")

    def __init__(self, iterations: array, stretches: Stretches, attempts: array, run_ids: Sequence[str]) -> None:
        self.iterations, self.stretches, self.attempts, self.run_ids = iterations, stretches, attempts, run_ids

    def __len__(self) -> int:
        return len(self.iterations)

    @overload
    def __getitem__(self, index: int) -> Window: ...

    @overload
    def __getitem__(self, index: slice) -> Windows: ...

    def __getitem__(self, index: int | slice) -> Window | Windows:
        if isinstance(index, slice):
            return Windows(self.iterations[index], self.stretches[index], self.attempts[index], self.run_ids)
        start, end = self.stretches[index]
        return Window(self.iterations[index], start, end, self.run_ids[self.attempts[index]])

    def take(self, positions: Iterable[int]) -> Windows:
        """The windows at `positions`, in that order."""
        picked = list(positions)
        if picked and picked == list(range(picked[0], picked[-1] + 1)):  # a run of them: sliced, not picked one by one
            return self[picked[0] : picked[-1] + 1]
        return Windows(
            array("q", (self.iterations[i] for i in picked)),
            self.stretches.take(picked),
            array("q", (self.attempts[i] for i in picked)),
            self.run_ids,
        )

    def concat(self, other: Windows) -> Windows:
        """These windows, then `other`'s (of the same attempts' run ids)."""
        starts, ends = array("q", self.stretches.starts), array("q", self.stretches.ends)
        starts.extend(other.stretches.starts)
        ends.extend(other.stretches.ends)
        return Windows(self.iterations + other.iterations, Stretches(starts, ends), self.attempts + other.attempts,
                       self.run_ids)  # fmt: skip

    def by_attempt(self) -> dict[str, Windows]:
        """The windows of each attempt that has any, by run id, in the order held."""
        if self.attempts and alike(self.attempts):  # one attempt, the usual run: no loop over the windows
            return {self.run_ids[self.attempts[0]]: self[:]}
        positions: dict[int, list[int]] = {}
        for position, attempt in enumerate(self.attempts):
            positions.setdefault(attempt, []).append(position)
        return {self.run_ids[attempt]: self.take(held) for attempt, held in positions.items()}


def stretches_of(windows: Sequence[Window]) -> Stretches:
    """The windows' stretches of time, in order."""
    if isinstance(windows, Windows):
        return windows.stretches
    return Stretches.of((w.start_ns, w.end_ns) for w in windows)


def window_keys(windows: Sequence[Window]) -> pa.Table:
    """The windows as a table to join spans to by attempt and iteration: `position`, `attempt` (its run id),
    `iteration`; 64-bit columns shared with `Windows`, not a Python int each."""
    import pyarrow as pa

    from rollup.base.arrays import int64_array

    if isinstance(windows, Windows):
        attempts = pa.array([windows.run_ids[attempt] for attempt in windows.attempts], pa.string())
        iterations = int64_array(windows.iterations)
    else:
        attempts = pa.array([w.run_id for w in windows], pa.string())
        iterations = pa.array([w.iteration for w in windows], pa.int64())
    return pa.table({"position": pa.array(range(len(windows)), pa.int64()), "attempt": attempts,
                     "iteration": iterations})  # fmt: skip


def window_kinds(spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
    """Each stretch's kind (SPEC section 10): a 64-bit fingerprint of the set of names of the bucketed spans active in
    it (overlapping it for some time; zero-length spans overlap nothing), equal for two stretches exactly when
    their sets are (barring a hash collision, which only merges two kinds). A stretch with no bucketed span has
    kind 0. Stretches given twice (a window's rows of several processes) are looked up once."""
    if not len(starts):
        return array("q")
    starts, ends = array("q", starts), array("q", ends)

    def work_out() -> tuple[dict[str, array], dict[str, object]]:
        return {"kind": _kinds_of(spans, starts, ends)}, {}

    columns, _ = kept_columns(spans, "kinds", [stretches_key(starts, ends)], work_out)  # a re-run reads them back
    return columns["kind"]


def _kinds_of(spans: SpanSet, starts: array, ends: array) -> array:
    return kinds_with_names(spans, starts, ends)[0]


def kinds_with_names(spans: SpanSet, starts: array, ends: array) -> tuple[array, list[frozenset[str]]]:
    """Each stretch's kind (`window_kinds`) and the set of names it is the fingerprint of (KIND_SQL: the xor of
    each name's hash, so a name added to the set changes the kind by its own hash alone)."""
    import pyarrow as pa

    from rollup.base.arrays import int64_array

    stretches = pa.table({"start_ns": int64_array(starts), "end_ns": int64_array(ends)})
    with spans.registered("kind_stretches", stretches) as table:
        found = spans.arrow(
            f"""
            WITH stretch AS (SELECT DISTINCT start_ns, end_ns FROM {table}),
            active AS (
                SELECT DISTINCT w.start_ns, w.end_ns, s.name
                FROM stretch w JOIN {spans.lineage} s ON s.start_ns < w.end_ns AND s.end_ns > w.start_ns
                WHERE s.bucket IS NOT NULL AND s.end_ns > s.start_ns
            )
            SELECT start_ns, end_ns, {KIND_SQL} AS kind, list(name) AS names FROM active GROUP BY ALL
            """
        )
    bounds = zip(found["start_ns"].to_pylist(), found["end_ns"].to_pylist(), strict=True)
    kind_of = dict(zip(bounds, zip(found["kind"].to_pylist(), found["names"].to_pylist(), strict=True), strict=True))
    none: tuple[int, list[str]] = (0, [])
    held = [kind_of.get((start, end), none) for start, end in zip(starts, ends, strict=True)]
    return array("q", (kind for kind, _ in held)), [frozenset(names) for _, names in held]


# SQL, an aggregate over rows of distinct names: their kind, a 64-bit fingerprint of the set (`window_kinds`).
KIND_SQL = "bit_xor((hash(name) >> 1)::BIGINT)"


def attempt_windows(spans: SpanSet, order: Sequence[str]) -> Windows:
    """Every attempt's windows, superseded or not: by attempt in `order` (run ids), then by iteration.

    The step spans carrying their own iteration make the windows of the attempts that have any; only the attempts
    that have none (rare: a trace with no step spans) cost a second pass, for the envelopes of their iterations.
    """
    table, stepless = _step_windows(spans, order)
    if stepless:
        envelopes = f"""
            SELECT {ATTEMPT_SQL} AS attempt, eff_iteration AS iteration, min(start_ns) AS start_ns,
                   max(end_ns) AS end_ns
            FROM {spans.lineage} WHERE eff_iteration IS NOT NULL AND list_contains({_text_list(stepless)}, attempt)
            GROUP BY ALL
        """
        table = _numbered(spans, f"{_steps_sql(spans.step_spans())} UNION ALL {envelopes}", order)
    return _windows_of(table, order)


def torn_windows(spans: SpanSet, attempts: Sequence[Attempt], every: Windows) -> Windows:
    """SPEC section 7's torn windows: in each attempt that a later attempt follows, the iteration in progress when it
    ended (the highest iteration above its last window whose spans were read: its step span was not, the process
    died before exporting it), as the envelope of its spans clipped to the attempt's extent. Each is superseded
    (rework), whether or not a later attempt repeats the iteration: its work was lost, not outside any step. One
    query, and only when there are several attempts."""
    if len(attempts) < 2:
        return every[:0]
    last = every.by_attempt()
    ended = {a.run_id: a for a in attempts[:-1] if a.run_id in last and len(last[a.run_id])}
    if not ended:
        return every[:0]
    above = " OR ".join(f"({ATTEMPT_SQL} = {sql_text(run_id)} AND eff_iteration > {max(last[run_id].iterations)})"
                        for run_id in ended)  # fmt: skip
    rows = spans.rows(
        f"""
        SELECT attempt, arg_max(iteration, iteration), arg_max(start_ns, iteration), arg_max(end_ns, iteration)
        FROM (SELECT {ATTEMPT_SQL} AS attempt, eff_iteration AS iteration, min(start_ns) AS start_ns,
                     max(end_ns) AS end_ns
              FROM {spans.lineage} WHERE {above} GROUP BY ALL)
        GROUP BY attempt ORDER BY attempt
        """
    )
    order = list(every.run_ids)
    iterations, starts, ends, positions = array("q"), array("q"), array("q"), array("q")
    for run_id, iteration, start, end in rows:
        attempt = ended[run_id]
        start, end = max(start, attempt.start_ns), min(end, attempt.end_ns)
        if end > start:
            iterations.append(iteration)
            starts.append(start)
            ends.append(end)
            positions.append(order.index(run_id))
    return Windows(iterations, Stretches(starts, ends), positions, every.run_ids)


def step_windows(spans: SpanSet, order: Sequence[str]) -> Windows | None:
    """`attempt_windows` when every attempt has step spans carrying their iteration: its windows then depend on the
    step spans alone (`SpanSet.step_spans`, which a watcher keeps apart); None when an attempt has none."""
    table, stepless = _step_windows(spans, order)
    return None if stepless else _windows_of(table, order)


def _steps_sql(steps: SpanSet) -> str:
    """SQL: the windows of the step spans `steps` (a set of them alone) carrying their own iteration."""
    return f"""
        SELECT {ATTEMPT_SQL} AS attempt, iteration, min(start_ns) AS start_ns, max(end_ns) AS end_ns
        FROM {steps.own} WHERE iteration IS NOT NULL GROUP BY ALL
    """


def _step_windows(spans: SpanSet, order: Sequence[str]) -> tuple[pa.Table, list[str]]:
    """The windows of the step spans carrying their own iteration (`_numbered`), and the attempts of `order` with
    none of them, sorted."""
    import pyarrow.compute as pc

    steps = spans.step_spans()
    table = _numbered(steps, _steps_sql(steps), order)
    found = {order[position] for position in pc.unique(table.column("attempt")).to_pylist() if position is not None}
    return table, sorted(set(order) - found)


def _windows_of(table: pa.Table, order: Sequence[str]) -> Windows:
    stretches = Stretches(int64_column(table, "start_ns"), int64_column(table, "end_ns"))
    return Windows(int64_column(table, "iteration"), stretches, int64_column(table, "attempt"), tuple(order))


def _numbered(spans: SpanSet, rows: str, order: Sequence[str]) -> pa.Table:
    """The windows of query `rows` (attempt, iteration, start_ns, end_ns) as 64-bit columns, each attempt as its
    position in `order`, sorted by attempt, then iteration."""
    return spans.arrow(
        f"""
        SELECT (list_position({_text_list(order)}, attempt) - 1)::BIGINT AS attempt, iteration::BIGINT AS iteration,
               start_ns::BIGINT AS start_ns, end_ns::BIGINT AS end_ns
        FROM ({rows}) ORDER BY 1, 2
        """
    )


def _text_list(texts: Sequence[str]) -> str:
    """SQL: a list literal of `texts`."""
    return "[" + ", ".join(sql_text(text) for text in texts) + "]::VARCHAR[]"


def latest_windows(windows: Windows) -> tuple[Windows, Windows]:
    """(rows, superseded) of `windows` in attempt order: per iteration the latest attempt's window, sorted by
    iteration, and every earlier one, in the order given."""
    numbers = windows.iterations
    if rising(numbers):  # one attempt's, mostly
        return windows[:], windows[:0]
    latest: dict[int, int] = {}  # iteration -> position: a later attempt's window replaces an earlier one's
    for position, iteration in enumerate(windows.iterations):
        latest[iteration] = position
    rows = sorted(latest.values(), key=windows.iterations.__getitem__)
    if len(rows) == len(windows):  # nothing superseded
        return windows.take(rows), windows[:0]
    kept = set(rows)
    return windows.take(rows), windows.take(p for p in range(len(windows)) if p not in kept)


def iteration_windows(spans: SpanSet) -> Windows:
    """The report's windows of `spans`, one per iteration (the latest attempt's), sorted by iteration."""
    order = [a.run_id for a in spans.attempts()]
    rows, _ = latest_windows(attempt_windows(spans, order))
    return rows


def window_of(spans: SpanSet, iteration: int) -> Window:
    """The window of `iteration`; GoodputError naming the iterations these traces hold when it is not one."""
    windows = iteration_windows(spans)
    for window in windows:
        if window.iteration == iteration:
            return window
    raise GoodputError(_missing_iterations((iteration, iteration), windows.iterations))


def missing_in(held: Sequence[int], selected: tuple[int, int] | None) -> str | None:
    """Why `selected` (inclusive; ends may be open, +-2**63) holds none of the iterations `held` (the windows' of
    these traces), naming those they hold ("no iteration 99 in these traces; they hold iterations 1-6"); None when
    it holds one, or when nothing was selected."""
    if selected is None or any(selected[0] <= iteration <= selected[1] for iteration in held):
        return None
    return _missing_iterations(selected, held)


def _missing_iterations(selected: tuple[int, int], iterations: Sequence[int]) -> str:
    low, high = selected
    if low == high:
        asked = f"iteration {low}"
    else:
        asked = "iteration in the range " + (str(low) if low > -(2**63) else "") + ":"
        asked += str(high) if high < 2**63 - 1 else ""
    held = sorted(iterations)
    if not held:
        return f"no {asked} in these traces: they hold no iteration (no rl.iteration on any step or span)"
    return f"no {asked} in these traces; they hold {iteration_list(held)}"


def iteration_list(iterations: Sequence[int], most: int = 6) -> str:
    """`iterations 1-6`, `iterations 1-3, 7, 9-12`: sorted numbers as runs, the first `most` runs and the last."""
    runs: list[list[int]] = []
    for number in iterations:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    texts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(texts) > most + 1:
        texts = [*texts[:most], "...", texts[-1]]
    count = f" ({len(iterations)} in all)" if len(runs) > most + 1 else ""
    noun = "iteration" if len(iterations) == 1 else "iterations"
    return f"{noun} {', '.join(texts)}{count}"


def select_windows(windows: Windows, iterations: tuple[int, int] | None) -> Windows:
    """Windows whose iteration lies in the inclusive range `iterations` (all when None)."""
    if iterations is None:
        return windows
    low, high = iterations
    return windows.take(i for i, iteration in enumerate(windows.iterations) if low <= iteration <= high)
