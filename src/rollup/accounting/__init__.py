"""Where the wall clock went (SPEC sections 4, 7, 8, 12): iteration windows and the report's frames, each instant
charged once to the first active bucket (in SQL, and for a few spans on Arrow columns), shared among names, and
charged in GPU-seconds per pool; the report's rows as columns of integer nanoseconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "Figures": "rows",
    "IterationRow": "rows",
    "NameShare": "rows",
    "GpuOptions": "gpus",
    "GpuReport": "gpu_charge",
    "GpuFigures": "gpu_charge",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .gpu_charge import GpuFigures, GpuReport
    from .gpus import GpuOptions
    from .rows import Figures, IterationRow, NameShare
