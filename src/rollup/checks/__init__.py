"""Can the figures be trusted (SPEC sections 5 and 10): the rules over spans, over windows and over the whole
run, and `check_findings`, which runs them in parts and merges them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "Check": "check",
    "CheckOptions": "check",
    "check_findings": "check",
    "Finding": "findings",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .check import Check, CheckOptions, check_findings
    from .findings import Finding
