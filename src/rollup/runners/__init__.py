"""Where the parts of a report, a check and a critical path are computed when not in this process: Ray tasks, one per
range of windows, each over its slice of the lineage (`RayRunner`), and `ingest --ray`'s conversions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "RayRunner": "on_ray",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .on_ray import RayRunner
