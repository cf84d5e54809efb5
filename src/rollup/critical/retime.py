"""What a speed-up buys (SPEC section 14): one attempt re-timed as a whole with some phases' own time shorter.

Every span's start and end is an event, and each event has causes, read off the trace:

- a span's **start**: its parent's start; its sequence anchor's end; for a call received (a parent in another
  process), the end of the process's previous span (it was busy) and of the caller's previous span (the latest-ending
  span of the parent's process and parent that ended by the call's start: the call was sent after it); for a child of
  window N's step span, the end of each span made ahead for window N (its own `rl.iteration` is N, its parent in an
  earlier window) that ended by the child's start (the step used what was made for it).
- a span's **end**: its own length (a leaf), its joined children's ends, its wakeup's end (a wait); never before its
  start.

The causes that bound as recorded (the latest) are followed by the gap recorded, and the event is no earlier than any
other cause. A gap is a span's own time, and shrinks with it when its name is sped up: a leaf's length, a span's
tail after its last child, the code a parent ran before a child started or between two children; the wait of a
call queued behind the process's previous one is nobody's. An event with no cause keeps its time (the attempt's
first span, a process's first span that names no parent). Each event's causes are recorded no later than it is, so
the events in time order are re-timed in one pass (events at one instant ordered by their causes among themselves).

So an async step that ends sooner can make the next one wait longer for its batch: the attempt is re-timed whole,
never a window at a time. A window's new length is its step spans' re-timed envelope (without a step span, its
spans').
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from rollup.base.arrays import int64_column

from .graph import NONE, AttemptSpans, Dependencies

# The speed-up `saves_s` is worked out for: each phase's own time 10% shorter.
SAVES_PCT = Fraction(10)


@dataclass
class EventGraph:
    """The causes of every event of one attempt (event `2 * row` a span's start, `2 * row + 1` its end).

    Event e's binding cause is `bind[e]` (NONE: it has no cause and keeps its time), followed by the gap `gap[e]`,
    which is the own time of span `owner[e]` (NONE: nobody's), of name code `owner_name[e]`; `ties[e]` lists further
    binding causes that were recorded at the same instant, each with its gap's owner. Its other causes, which only
    bound it from below, are `other[other_at[e]:other_at[e + 1]]`. `order`: the events in an order where every cause
    comes first. `row_names`: each span's name code. Columns of 64-bit integers: a million spans' graph is about
    170 MB."""

    times: array
    bind: array
    owner: array
    owner_name: array
    gap: array
    other_at: array
    other: array
    order: array
    ties: dict[int, list[tuple[int, int]]]
    row_names: array
    names: int  # how many name codes there are
    _lists: tuple[list[int], ...] | None = field(default=None, repr=False)

    def retimed(self, keep: Mapping[int, Fraction]) -> list[int]:
        """Every event's time with the own time of each name code in `keep` multiplied by its fraction (0.9: 10%
        shorter), in nanoseconds rounded down.

        One pass over the events in causal order, over Python lists (a third faster to index than the arrays they
        are kept in: `bench/critical.py`), made once for every speed-up asked of this graph (`lists`)."""
        bind, owner, gap, other_at, other, order = self.lists()
        ties, row_names = self.ties, self.row_names
        factors: list[tuple[int, int] | None] = [None] * (self.names + 1)  # the last one is NONE's: nobody's time
        for code, fraction in keep.items():
            factors[code] = (fraction.numerator, fraction.denominator)
        new = self.times.tolist()
        for e in order:
            b = bind[e]
            if b < 0:
                continue  # no cause: it keeps its time
            g = gap[e]
            factor = factors[owner[e]]
            best = new[b] + (g if factor is None else g * factor[0] // factor[1])
            low, high = other_at[e], other_at[e + 1]
            while low < high:
                value = new[other[low]]
                if value > best:
                    best = value
                low += 1
            if ties and e in ties:
                for cause, who in ties[e]:
                    factor = factors[NONE if who == NONE else row_names[who]]
                    value = new[cause] + (g if factor is None else g * factor[0] // factor[1])
                    if value > best:
                        best = value
            new[e] = best
        return new

    def lists(self) -> tuple[list[int], ...]:
        """The columns `retimed` reads, as lists, made on first use and kept (`forget_lists` lets them go)."""
        if self._lists is None:
            self._lists = tuple(column.tolist() for column in (self.bind, self.owner_name, self.gap, self.other_at,
                                                                self.other, self.order))  # fmt: skip
        return self._lists

    def forget_lists(self) -> None:
        self._lists = None

    def bound_by(self, events: Iterable[int]) -> set[int]:
        """The spans (rows) whose own time binds any of `events`, through any chain of binding causes: only their
        names' speed-ups can move those events (a name off every such chain leaves them where they are)."""
        bind, owner, ties = self.bind, self.owner, self.ties
        seen = bytearray(len(self.times))
        todo = [e for e in events]
        owners: set[int] = set()
        while todo:
            e = todo.pop()
            if seen[e]:
                continue
            seen[e] = 1
            if bind[e] == NONE:
                continue
            todo.append(bind[e])
            if owner[e] != NONE:
                owners.add(owner[e])
            for cause, who in ties.get(e, ()):
                todo.append(cause)
                if who != NONE:
                    owners.add(who)
        return owners


def causal_order(
    times: array, bind: array, ties: dict[int, list[tuple[int, int]]], other_at: array, other: array
) -> array:
    """The events in time order, those at one instant ordered so that each comes after its causes among them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sorted_at = pc.sort_indices(pa.array(times, pa.int64()))
    order = array("q", bytes(8 * len(times)))
    order[:] = int64_column(pa.table({"o": sorted_at}), "o")
    if len(order) < 2:
        return order
    in_order = pc.take(pa.array(times, pa.int64()), sorted_at)
    same = pc.indices_nonzero(pc.equal(in_order.slice(1), in_order.slice(0, len(order) - 1))).to_pylist()
    i = 0
    while i < len(same):  # each run of events at one instant: positions same[i] .. end of the run
        first = same[i]
        j = i
        while j + 1 < len(same) and same[j + 1] == same[j] + 1:
            j += 1
        last = same[j] + 1
        order[first : last + 1] = array("q", _ordered_instant(order[first : last + 1], bind, ties, other_at, other))
        i = j + 1
    return order


def _ordered_instant(
    events: array, bind: array, ties: dict[int, list[tuple[int, int]]], other_at: array, other: array
) -> list[int]:
    """`events` (all at one instant) with each after its causes among them (a cycle, which no trace can record, is
    broken in the given order)."""
    members = set(events)
    waiting_on = {e: 0 for e in events}
    effects: dict[int, list[int]] = {}
    for e in events:
        causes = [bind[e], *(c for c, _ in ties.get(e, ())), *other[other_at[e] : other_at[e + 1]]]
        for c in causes:
            if c in members and c != e:
                waiting_on[e] += 1
                effects.setdefault(c, []).append(e)
    ready = [e for e in events if not waiting_on[e]]
    done: list[int] = []
    seen: set[int] = set()
    while len(done) < len(events):
        if not ready:  # a cycle: take the first left
            ready = [next(e for e in events if e not in seen)]
        e = ready.pop(0)
        if e in seen:
            continue
        seen.add(e)
        done.append(e)
        for later in effects.get(e, ()):
            waiting_on[later] -= 1
            if not waiting_on[later]:
                ready.append(later)
    return done


def window_lengths(
    spans: AttemptSpans, deps: Dependencies, windows: Sequence[tuple[int, list[int]]], times: Sequence[int]
) -> list[int]:
    """Each window's length under event `times`: `windows` gives each window's iteration and its spans' rows (used
    when it has no step span), the length is its step spans' envelope, else its spans'."""
    out = []
    for iteration, rows in windows:
        steps = deps.steps.get(iteration) or rows
        if not steps:
            out.append(0)
            continue
        out.append(max(times[2 * r + 1] for r in steps) - min(times[2 * r] for r in steps))
    return out
