"""The dependencies a trace records (SPEC section 14), among the spans of one attempt.

Three kinds, each read off the spans' times, parents and processes, nothing guessed:

- **joined child**: a span ending no later than its parent, its own `rl.iteration` no later than its parent's window
  (a child started for a later step, fire-and-forget, was not waited on). A span with no parent whose own
  `rl.iteration` is N counts as a child of window N's step span (the context was lost across a thread or a
  process: nemo-lens's workers write traces of their own).
- **sequence**: in one process, a span starting at or after the end of another of the same parent (both parentless
  counts as the same) started after it: its *anchor* is the latest-ending such span.
- **wakeup**: a wait (an `idle` span) ended because what it waited for ended: the latest-ending span that is not
  idle, neither its ancestor nor its descendant, in any process, ending inside the wait and at most `wakeup_ns`
  before its end.

`re-time` (`retime.py`) adds what starts a call received from another process (the process's previous span, the
caller's previous span) and what a step used that an earlier step made for it. Each span is a row: an index into
the columns of `AttemptSpans`, in the order of their starts (then the longer first, then the id), so a parent comes
before its children.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollup.base.arrays import int64_column

if TYPE_CHECKING:
    import pyarrow as pa


IDLE = "idle"
NONE = -1  # no span: a row index that names nothing
NO_ITERATION = -(2**63)  # no `rl.iteration`: what the iteration columns hold for none

# A wait ends this close after what woke it, at most (`--wakeup`): the latency of a queue, a future, an RPC's reply.
WAKEUP_NS = 20 * 10**6


@dataclass
class AttemptSpans:
    """One attempt's spans as columns, a row each, in start order (then the longer first, then the id).

    `parent` is each span's parent's row (NONE: no parent loaded), `iteration` its own `rl.iteration` and
    `eff_iteration` the one it inherits (SPEC section 4), NO_ITERATION when none. Names, processes and buckets are
    codes into `names`, `processes` and `buckets`; `ids` the span ids (`span_id(row)` reads one)."""

    ids: pa.Array
    name: array
    process: array
    bucket: array
    iteration: array
    eff_iteration: array
    is_step: bytearray
    start: array
    end: array
    parent: array
    names: list[str] = field(default_factory=list)
    processes: list[str | None] = field(default_factory=list)
    buckets: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.start)

    def span_id(self, row: int) -> str:
        return str(self.ids[row].as_py())

    @classmethod
    def of_table(cls, table: pa.Table) -> AttemptSpans:
        """From a table with columns `parent_row`, `span_id`, `name`, `process`, `bucket`, `iteration`,
        `eff_iteration`, `is_step`, `start_ns` and `end_ns`, in row order."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def coded(column: str) -> tuple[array, list]:
            encoded = pc.dictionary_encode(table.column(column).combine_chunks(), null_encoding="encode")
            return int64_column(pa.table({"c": encoded.indices.cast(pa.int64())}), "c"), encoded.dictionary.to_pylist()

        def filled(column: str, value: int) -> array:
            return int64_column(pa.table({"c": pc.fill_null(table.column(column), value)}), "c")

        names, name_list = coded("name")
        processes, process_list = coded("process")
        buckets, bucket_list = coded("bucket")
        steps = pc.fill_null(table.column("is_step"), False).cast(pa.uint8())
        return cls(
            ids=table.column("span_id").combine_chunks(),
            name=names,
            process=processes,
            bucket=buckets,
            iteration=filled("iteration", NO_ITERATION),
            eff_iteration=filled("eff_iteration", NO_ITERATION),
            is_step=bytearray(steps.combine_chunks().buffers()[1].to_pybytes()[: len(steps)]),
            start=int64_column(table, "start_ns"),
            end=int64_column(table, "end_ns"),
            parent=filled("parent_row", NONE),
            names=[n or "" for n in name_list],
            processes=process_list,
            buckets=bucket_list,
        )

    def idle_code(self) -> int:
        """The code of the `idle` bucket (NONE when no span has it)."""
        return self.buckets.index(IDLE) if IDLE in self.buckets else NONE

    def is_bucketed(self, row: int) -> bool:
        return self.buckets[self.bucket[row]] is not None


@dataclass
class Dependencies:
    """The dependencies among one attempt's spans (rows of `AttemptSpans`).

    `children(p)`: the rows of p's joined children, latest end first (then the later start, then the smaller id),
    the order `explain` takes them in (held as `joined[joined_at[p]:joined_at[p + 1]]`). `anchor[r]`: r's sequence
    anchor, the latest-ending span of its process and parent that ended by its start (NONE: none). `wakeup[r]`: the
    span that woke wait r (NONE: none, or r is no wait). `steps[n]`: the step spans carrying iteration n, latest
    end first; `adopted[n]`: the spans without a parent whose own iteration is n (children of window n's step
    span)."""

    joined_at: array
    joined: array
    anchor: array
    wakeup: array
    steps: dict[int, list[int]]
    adopted: dict[int, list[int]]

    def children(self, row: int) -> array:
        return self.joined[self.joined_at[row] : self.joined_at[row + 1]]


def ancestors(parent: array, row: int, most: int = 10_000) -> set[int]:
    """The rows of `row`'s ancestors (at most `most`: a corrupt file's parent cycle ends there)."""
    found: set[int] = set()
    row = parent[row]
    while row != NONE and row not in found and len(found) < most:
        found.add(row)
        row = parent[row]
    return found
