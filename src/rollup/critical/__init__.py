"""What each step waited on (SPEC section 14): the critical path through the dependencies a trace records,
stragglers of fan-outs, and what a speed-up of one phase buys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "CriticalOptions": "build",
    "build_critical": "build",
    "CriticalPaths": "paths",
    "PathShare": "paths",
    "WindowPath": "paths",
    "Speedup": "paths",
    "parse_speedup": "build",
    "Straggler": "stragglers",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .build import CriticalOptions, build_critical, parse_speedup
    from .paths import CriticalPaths, PathShare, Speedup, WindowPath
    from .stragglers import Straggler
