"""A run followed while it is written (SPEC section 13): the files tailed, the spans and their lineage kept up to
date a refresh at a time, and the report rebuilt by `build_report` itself from each frame's kept answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "LiveRun": "watcher",
    "LiveState": "watcher",
    "watch_json": "watcher",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .watcher import LiveRun, LiveState, watch_json
