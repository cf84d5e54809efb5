"""What one step waited on (SPEC section 14): its window explained back from its end along the recorded dependencies.

`explain(X, t)` accounts for span X's time from `t` back to its lower bound (its start, or the window's start):
among X's joined children ending at or before `t` and after the bound, the latest-ending one (ties: the later
start, then the smaller span id) was what X waited on last; the stretch from its end to `t` is X's own, the child
is explained from its end, and X goes on from the child's start. With no child left, the rest is X's own. A wait
(an `idle` span) woken by a span Y is explained the same way with Y as its one child: `[Y.end, t]` is the wait's own
time, Y explains itself down to the wait's bound, and what is left before Y's start is the wait's own.

A window is explained from a virtual step `[a, b]` whose children are its step spans (or, without one, its spans
whose parent is not in the window). A span's own time is a segment of its name and bucket when it is bucketed, and
`waiting` otherwise (the step ran something uninstrumented, or waited on something the trace does not show). A
child is explained no further back than its parent's bound (a remote child's clock may run ahead of its caller's),
so the segments and the waits always partition `[a, b]`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .graph import NO_ITERATION, NONE, AttemptSpans, Dependencies

# Nested deeper than any real trace; it only stops a walk that a corrupt file could make endless.
MOST_DEPTH = 10_000


def window_tops(spans: AttemptSpans, deps: Dependencies, iteration: int, rows: list[int] | None = None) -> list[int]:
    """The children of window `iteration`'s virtual step: its step spans, latest end first; without one, `rows` (the
    window's spans: those whose effective iteration it is) whose parent is not among them."""
    steps = deps.steps.get(iteration)
    if steps:
        return list(steps)
    if rows is None:
        rows = [r for r in range(len(spans)) if spans.eff_iteration[r] == iteration != NO_ITERATION]
    inside = set(rows)
    start, end = spans.start, spans.end
    tops = [r for r in rows if spans.parent[r] not in inside]
    tops.sort(key=lambda r: (-end[r], -start[r], spans.span_id(r)))
    return tops


def explain_window(
    spans: AttemptSpans, deps: Dependencies, tops: Sequence[int], start_ns: int, end_ns: int
) -> list[tuple[int, int, int]]:
    """The window `[start_ns, end_ns]` explained from its virtual step, whose children are `tops` (latest end first):
    `(row, start, end)` for each stretch of a span's own time in time order, row NONE for the virtual step's own."""
    start, end = spans.start, spans.end
    idle = spans.idle_code()
    woke = deps.wakeup
    out: list[tuple[int, int, int]] = []
    # A frame: the span explained, the time it is explained back from, its lower bound, its children, the next one.
    stack: list[list] = [[NONE, end_ns, start_ns, tops, 0]]
    on_stack = {NONE}
    while stack:
        frame = stack[-1]
        row, t, low, children, k = frame
        pushed = False
        while k < len(children):
            child = children[k]
            k += 1
            child_end = end[child]
            if child_end > t:
                continue
            if child_end <= low:
                k = len(children)
                break
            child_low = max(start[child], low)
            if child_end <= child_low or child in on_stack or len(stack) >= MOST_DEPTH:
                continue  # nothing of it to explain here
            if t > child_end:
                out.append((row, child_end, t))
            frame[1], frame[4] = start[child], k
            wake = woke[child] if spans.bucket[child] == idle else NONE
            woken = wake != NONE and child_low < end[wake] <= child_end
            grandchildren = [wake] if woken else deps.children(child)
            stack.append([child, child_end, child_low, grandchildren, 0])
            on_stack.add(child)
            pushed = True
            break
        if pushed:
            continue
        if t > low:
            out.append((row, low, t))
        stack.pop()
        on_stack.discard(row)
    out.reverse()
    return out
