"""What was happening when (SPEC sections 6 and 11): the spans active in one window (`goodput spans`) and the
Perfetto timeline, its spans laid on lanes that nest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "Timeline": "build",
    "build_timeline": "build",
    "spans_in_window": "listing",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .build import Timeline, build_timeline
    from .listing import spans_in_window
