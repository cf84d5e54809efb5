"""The answers a user reads: `build_report` (SPEC section 6) and its JSON, the declared figures every view shows,
outliers, the last stretch of `--last` (section 13), and `diff` of two runs (section 9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "Report": "build",
    "ReportOptions": "build",
    "WholeRun": "build",
    "build_report": "build",
    "report_json": "as_json",
    "FIGURES": "figures",
    "Figure": "figures",
    "Recent": "recent",
    "LastStretch": "recent",
    "parse_duration": "recent",
    "Diff": "diff",
    "PhaseChange": "diff",
    "measure": "diff",
    "compare": "diff",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .as_json import report_json
    from .build import Report, ReportOptions, WholeRun, build_report
    from .diff import Diff, PhaseChange, compare, measure
    from .figures import FIGURES, Figure
    from .recent import LastStretch, Recent, parse_duration
