"""A run followed while it is written (SPEC section 13): the files tailed, the spans and their lineage kept up to
date a refresh at a time, and the report rebuilt by `build_report` itself from each frame's kept answer; each
refresh a typed state (`LiveState`) that the screen, the JSON Lines object (`watch_json`) and `/metrics` read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "LiveRun": "watcher",
    "LiveState": "state",
    "LiveRow": "state",
    "LiveGpus": "state",
    "RECENT": "state",
    "WATCH_ROWS": "state",
    "watch_json": "state",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .state import RECENT, WATCH_ROWS, LiveGpus, LiveRow, LiveState, watch_json
    from .watcher import LiveRun
