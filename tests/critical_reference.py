"""SPEC section 14's dependencies and re-timing causes read literally, in plain Python, one span at a time: the
reference the DuckDB build (`rollup.critical.causes`) is held to on generated traces (tests/test_critical_rules.py).

Everything here is the rule as the SPEC words it, with no care for speed: each span's parent, its joined children,
its sequence anchor, its wakeup, and each event's causes, the latest of which bind.
"""

from __future__ import annotations

from rollup.critical.graph import IDLE, NO_ITERATION, NONE, AttemptSpans, ancestors

Causes = tuple[frozenset[tuple[int, int]], int, frozenset[int]]  # (binding (event, owner name code)), gap, others


def steps_of(spans: AttemptSpans) -> dict[int, list[int]]:
    """The step spans carrying each iteration, latest end first, then the earlier start, then the id."""
    steps: dict[int, list[int]] = {}
    for row in range(len(spans)):
        if spans.is_step[row] and spans.iteration[row] != NO_ITERATION:
            steps.setdefault(spans.iteration[row], []).append(row)
    for rows in steps.values():
        rows.sort(key=lambda r: (-spans.end[r], spans.start[r], spans.span_id(r)))
    return steps


def effective_parent(spans: AttemptSpans, steps: dict[int, list[int]], row: int) -> int:
    """The parent, or for a span without one whose own iteration is N, window N's step span."""
    if spans.parent[row] != NONE:
        return spans.parent[row]
    iteration = spans.iteration[row]
    if iteration != NO_ITERATION and not spans.is_step[row] and steps.get(iteration) and steps[iteration][0] != row:
        return steps[iteration][0]
    return NONE


def joined(spans: AttemptSpans) -> list[list[int]]:
    """Each span's joined children: ending no later than it, not carrying an own iteration later than its window,
    latest end first (then the later start, then the smaller id)."""
    steps = steps_of(spans)
    out: list[list[int]] = [[] for _ in range(len(spans))]
    for row in range(len(spans)):
        parent = effective_parent(spans, steps, row)
        if parent == NONE or spans.end[row] > spans.end[parent]:
            continue
        own, window = spans.iteration[row], spans.eff_iteration[parent]
        if own != NO_ITERATION and window != NO_ITERATION and own > window:
            continue
        out[parent].append(row)
    for children in out:
        children.sort(key=lambda r: (-spans.end[r], -spans.start[r], spans.span_id(r)))
    return out


def _ended_by(spans: AttemptSpans, row: int, candidates: list[int]) -> int:
    """Of `candidates`, the latest-ending one that ended at or before `row`'s start (other than `row`; of no length
    at that instant, only one before it in row order), the last in row order among ties; NONE when none."""
    start = spans.start[row]
    zero = spans.end[row] == start
    fitting = [c for c in candidates if c != row and spans.end[c] <= start
               and not (zero and spans.end[c] == start and c > row)]  # fmt: skip
    if not fitting:
        return NONE
    latest = max(spans.end[c] for c in fitting)
    return max(c for c in fitting if spans.end[c] == latest)


def anchors(spans: AttemptSpans) -> list[int]:
    """Each span's sequence anchor: of its process and (loaded) parent, both parentless alike."""
    return [
        _ended_by(spans, row, [c for c in range(len(spans))
                               if spans.process[c] == spans.process[row] and spans.parent[c] == spans.parent[row]])
        for row in range(len(spans))
    ]  # fmt: skip


def wakeups(spans: AttemptSpans, wakeup_ns: int) -> list[int]:
    """Each wait's wakeup: the latest-ending span not idle, neither its ancestor nor its descendant, with
    `W.start < X.end <= W.end` and `W.end - X.end <= wakeup_ns` (ties: the later start, then the smaller id)."""
    out = [NONE] * len(spans)
    for w in range(len(spans)):
        if spans.buckets[spans.bucket[w]] != IDLE:
            continue
        found = [
            x for x in range(len(spans))
            if x != w and spans.buckets[spans.bucket[x]] != IDLE
            and spans.start[w] < spans.end[x] <= spans.end[w] and spans.end[w] - spans.end[x] <= wakeup_ns
            and x not in ancestors(spans.parent, w) and w not in ancestors(spans.parent, x)
        ]  # fmt: skip
        if found:
            out[w] = min(found, key=lambda x: (-spans.end[x], -spans.start[x], spans.span_id(x)))
    return out


def causes(spans: AttemptSpans, wakeup_ns: int) -> list[Causes]:
    """Each event's causes (event `2 * row` a start, `2 * row + 1` an end), as SPEC's `--speedup` paragraph names
    them: the latest recorded bind, followed by the gap (the own time of the span whose name code is given, or
    nobody's, NONE); the others bound from below."""
    steps = steps_of(spans)
    children, anchor, woke = joined(spans), anchors(spans), wakeups(spans, wakeup_ns)
    parent = [effective_parent(spans, steps, row) for row in range(len(spans))]
    out: list[Causes] = []

    def event(found: list[tuple[int, int, int]], lower: list[int], at: int) -> Causes:
        if not found:
            return frozenset(), 0, frozenset(lower)
        latest = max(when for _, when, _ in found)
        owners: dict[int, set[int]] = {}
        for e, when, who in found:
            if when == latest:
                owners.setdefault(e, set()).add(who)
        # a cause reached two ways binds once, by the gap no speed-up shrinks when one of them is nobody's
        binding = frozenset((e, NONE if NONE in who else spans.name[min(who)]) for e, who in owners.items())
        others = {e for e, when, _ in found if when < latest} | set(lower)
        return binding, at - latest, frozenset(others - set(owners))

    for row in range(len(spans)):
        start, end, p = spans.start[row], spans.end[row], parent[row]
        found: list[tuple[int, int, int]] = []
        if p != NONE and spans.start[p] <= start:
            found.append((2 * p, spans.start[p], p))
        if anchor[row] != NONE:
            found.append((2 * anchor[row] + 1, spans.end[anchor[row]], p))
        if p != NONE and spans.process[p] != spans.process[row]:  # a call received
            busy = _ended_by(spans, row, [c for c in range(len(spans)) if spans.process[c] == spans.process[row]])
            if busy != NONE:
                found.append((2 * busy + 1, spans.end[busy], NONE))
            callers = [c for c in range(len(spans)) if parent[c] == p and spans.process[c] == spans.process[p]]
            sent_after = _ended_by(spans, row, callers)
            if sent_after != NONE:
                found.append((2 * sent_after + 1, spans.end[sent_after], p))
        if p != NONE and spans.is_step[p]:  # what was made ahead for the step's window, ended by this start
            for m in range(len(spans)):
                q = spans.parent[m]
                if (m != row and not spans.is_step[m] and spans.iteration[m] == spans.iteration[p] != NO_ITERATION
                        and q != NONE and spans.eff_iteration[q] != NO_ITERATION
                        and spans.eff_iteration[q] < spans.iteration[m] and spans.end[m] <= start):  # fmt: skip
                    found.append((2 * m + 1, spans.end[m], p))
        out.append(event(found, [], start))
        ending = [(2 * c + 1, spans.end[c], row) for c in children[row]]
        if woke[row] != NONE:
            ending.append((2 * woke[row] + 1, spans.end[woke[row]], row))
        if ending:
            out.append(event(ending, [2 * row], end))
        else:
            out.append(event([(2 * row, start, row)], [], end))  # a leaf: its own length
    return out
