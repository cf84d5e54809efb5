"""Instrumentation mistakes found in Python source before the job runs (SPEC section 15): nothing is imported or
run, the files are parsed and their calls of `instrument` read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "Lint": "files",
    "lint_paths": "files",
    "LintFinding": "rules",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .files import Lint, lint_paths
    from .rules import LintFinding
