"""Where the spans are kept and handed out: `open_store` loads trace files into DuckDB (each span once), walks
their lineage (effective iterations, bucketed ancestors) and hands out `SpanSet`s, the handle every question takes;
a set answers the questions a report asks of the whole run (its attempts, its step spans, what processes hold)
through named methods, which a watcher's store answers from what it keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "SpanStore": "span_store",
    "open_store": "span_store",
    "ingest": "span_store",
    "Attempt": "attempts",
    "attempt_label": "attempts",
    "SpanSet": "spanset",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .attempts import Attempt, attempt_label
    from .span_store import SpanStore, ingest, open_store
    from .spanset import SpanSet
