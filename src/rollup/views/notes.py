"""The one-line notes a command prints on stderr when it has nothing to show, saying why."""

from __future__ import annotations

from typing import Any


def count(number: int, noun: str) -> str:
    """`1 span`, `3 spans`."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def no_iterations_note(read: Any) -> str:
    """Why a report has no row, from what was read (`SpanStore.read_summary()`): no span at all, spans of no RL job,
    or no iteration."""
    if not read.spans:
        empty = f" ({count(read.empty_files, 'file')}, all empty)" if read.empty_files else ""
        return f"note: no spans in these traces{empty}"
    spans = f"read {count(read.spans, 'span')} from {count(read.files, 'file')}"
    if not read.with_bucket and not read.with_iteration:
        return f"note: no iterations: {spans}, and none carries rl.bucket or rl.iteration (nothing to charge)"
    return f"note: no iterations: {spans}, and none carries rl.iteration (on a step span or an ancestor)"
