"""Lanes: concurrent spans of one process laid on separate rows, so each row nests like a call stack.

A trace viewer draws the complete events of one thread (`tid`) as a stack of slices and needs any two of them to be
disjoint or one to contain the other; a partial overlap is dropped or misdrawn. Spans of one process overlap
freely (Ray actors, threads, async tasks), so `goodput timeline` gives each process as many lanes as it needs.

Greedy, in start order (the longer first at equal starts): a span goes on the first lane where it fits, that is
where every open span has ended by its start or the innermost open span contains it. A span that only touches
another (one ends where the next begins) fits beside it. Two zero-length spans at the same instant nest, as Perfetto
stacks them. One exception keeps flow arrows bound to the right slice: a span is never nested, at the same start,
under a span that a flow event is anchored to (`anchor`), since the viewers bind a flow event at that instant to
the innermost slice there (Perfetto: the last one begun); it goes to another lane instead.
"""

from __future__ import annotations

from collections.abc import Sequence

# One open span on a lane: (start_ns, end_ns, anchor).
_Open = tuple[int, int, bool]


def assign_lanes(starts: Sequence[int], ends: Sequence[int], anchors: Sequence[bool] | None = None) -> list[int]:
    """The lane (0, 1, ...) of each span of one process, the spans given sorted by start, then by end descending.

    `anchors` marks the spans a flow event is bound to (see the module's docstring); none when omitted.
    """
    lanes: list[list[_Open]] = []  # each lane's chain of open spans, outermost first
    out: list[int] = []
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        anchor = bool(anchors[index]) if anchors is not None else False
        zero = start == end
        placed = -1
        for number, chain in enumerate(lanes):
            while chain and _ended(chain[-1], start, zero):
                chain.pop()
            if not chain or (chain[-1][1] >= end and not _anchored_at(chain, start)):
                placed = number
                break
        if placed < 0:
            placed = len(lanes)
            lanes.append([])
        lanes[placed].append((start, end, anchor))
        out.append(placed)
    return out


def _ended(open_span: _Open, start: int, zero: bool) -> bool:
    """Whether `open_span` is over by `start`: it ended before, or ends there (unless both are zero-length at the
    same instant: those nest)."""
    open_start, open_end, _ = open_span
    if open_end != start:
        return open_end < start
    return not (zero and open_start == open_end)


def _anchored_at(chain: list[_Open], start: int) -> bool:
    """Whether an open span that starts at `start` carries a flow event (the open spans starting there are the
    innermost ones)."""
    for open_start, _, anchor in reversed(chain):
        if open_start != start:
            return False
        if anchor:
            return True
    return False
