"""goodput's rollup: trace files in, the wall clock of each iteration by goodput bucket out.

The front door: what the `goodput` command calls, and what a user's script may. Open a store on trace files, then
ask it a question; each answer is a typed result the caller renders as it likes:

    with open_store(["run/"]) as store:
        report = build_report(store, ReportOptions(by="name"))
        check = check_findings(store)

Each name loads its module on first use, so importing `rollup` imports neither DuckDB nor pyarrow. The path of one
span from a file to a report row is in docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

# Public name -> the module (under this package) that defines it.
_HOMES: dict[str, str] = {
    **dict.fromkeys(["GoodputError", "InputError", "TraceFormatError", "OptionError"], "errors"),
    **dict.fromkeys(["SpanStore", "open_store", "ingest"], "store"),
    **dict.fromkeys(["Report", "ReportOptions", "WholeRun", "build_report"], "report"),
    "report_json": "json_report",
    **dict.fromkeys(["Figures", "IterationRow", "NameShare"], "rows"),
    **dict.fromkeys(["Attempt", "attempt_label"], "attempts"),
    **dict.fromkeys(["Check", "CheckOptions", "check_findings"], "checks"),
    "Finding": "findings",
    **dict.fromkeys(["Diff", "PhaseChange", "measure", "compare"], "diff"),
    **dict.fromkeys(["Timeline", "build_timeline"], "timeline"),
    "spans_in_window": "listing",
    **dict.fromkeys(["CriticalOptions", "build_critical"], "critical"),
    **dict.fromkeys(["CriticalPaths", "PathShare", "WindowPath"], "critical_paths"),
    **dict.fromkeys(["lint_paths", "Lint"], "lint"),
    "LintFinding": "lint_rules",
    "RayRunner": "on_ray",
    **dict.fromkeys(["FIGURES", "Figure"], "figures"),
    "GpuOptions": "gpus",
    **dict.fromkeys(["GpuReport", "GpuFigures"], "gpu_charge"),
    **dict.fromkeys(["LiveRun", "LiveState", "watch_json"], "live"),
    **dict.fromkeys(["Recent", "LastStretch", "parse_duration"], "recent"),
}

__all__ = list(_HOMES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .attempts import Attempt, attempt_label
    from .checks import Check, CheckOptions, check_findings
    from .critical import CriticalOptions, build_critical
    from .critical_paths import CriticalPaths, PathShare, WindowPath
    from .diff import Diff, PhaseChange, compare, measure
    from .errors import GoodputError, InputError, OptionError, TraceFormatError
    from .figures import FIGURES, Figure
    from .findings import Finding
    from .gpu_charge import GpuFigures, GpuReport
    from .gpus import GpuOptions
    from .json_report import report_json
    from .lint import Lint, lint_paths
    from .lint_rules import LintFinding
    from .listing import spans_in_window
    from .live import LiveRun, LiveState, watch_json
    from .on_ray import RayRunner
    from .recent import LastStretch, Recent, parse_duration
    from .report import Report, ReportOptions, WholeRun, build_report
    from .rows import Figures, IterationRow, NameShare
    from .store import SpanStore, ingest, open_store
    from .timeline import Timeline, build_timeline
