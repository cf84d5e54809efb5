"""The one-line notes a command prints on stderr when it has nothing to show, saying why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def count(number: int, noun: str) -> str:
    """`1 span`, `3 spans`."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def no_iterations_note(read: Any) -> str:
    """Why a report has no row, from what was read (`SpanStore.read_summary()`): no span at all, spans of no RL job,
    or no iteration."""
    if not read.spans:
        cut, empty = getattr(read, "cut_files", 0), read.empty_files
        said = [f"{count(empty - cut, 'file')}, all empty"] if empty - cut else []
        said += [f"{count(cut, 'file')} cut before its first record"] if cut else []
        return "note: no spans in these traces" + (f" ({'; '.join(said)})" if said else "")
    again = f" (and {count(read.duplicates, 'duplicate')})" if read.duplicates else ""
    spans = f"read {count(read.spans, 'span')}{again} from {count(read.files, 'file')}"
    if not read.with_bucket and not read.with_iteration:
        return f"note: no iterations: {spans}, and none carries rl.bucket or rl.iteration (nothing to charge)"
    return f"note: no iterations: {spans}, and none carries rl.iteration (on a step span or an ancestor)"


def internal_error_text(exc: BaseException, *, debug: bool) -> str:
    """The one line a bug in goodput (not in the traces) is said in, exit 3."""
    first_line = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    what = type(exc).__name__ + (f": {first_line}" if first_line else "")
    how = "" if debug else "; --debug or GOODPUT_DEBUG=1 prints its traceback"
    return f"internal error (a bug in goodput, not in the traces): {what}{how}"


def iteration_range(text: str) -> tuple[int, int]:
    """`A:B`, `A:` or `:B` as an inclusive range of iterations (an open end is int64's); ValueError otherwise."""
    low, sep, high = text.partition(":")
    if not sep:
        raise ValueError(text)
    return (int(low) if low.strip() else -(2**63)), (int(high) if high.strip() else 2**63 - 1)


def version_text() -> str:
    """`goodput 0.1.0`, from the installed package's metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"goodput {version('goodput')}"
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "goodput unknown (not installed)"


def number_ranges(numbers: Sequence[int]) -> str:
    """`1-3, 7, 9-10`."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
