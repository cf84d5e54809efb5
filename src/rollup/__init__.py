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

# Public name -> the module (under this package) that defines it. The rest of the library is reached through its
# room (`rollup.report`, `rollup.watch`, ...: each room's own front door lists its public names).
_HOMES: dict[str, str] = {
    **dict.fromkeys(["GoodputError", "InputError", "TraceFormatError", "OptionError"], "base.errors"),
    **dict.fromkeys(["SpanStore", "open_store", "ingest"], "store.span_store"),
    **dict.fromkeys(["Report", "ReportOptions", "build_report"], "report.build"),
    "report_json": "report.as_json",
    **dict.fromkeys(["Check", "CheckOptions", "check_findings"], "checks.check"),
    "Finding": "checks.findings",
    **dict.fromkeys(["Diff", "measure", "compare"], "report.diff"),
    **dict.fromkeys(["Timeline", "build_timeline"], "timeline.build"),
    "spans_in_window": "timeline.listing",
    **dict.fromkeys(["CriticalOptions", "build_critical"], "critical.build"),
    "RayRunner": "runners.on_ray",
}

__all__ = list(_HOMES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from rollup.base.errors import GoodputError, InputError, OptionError, TraceFormatError
    from rollup.checks.check import Check, CheckOptions, check_findings
    from rollup.checks.findings import Finding
    from rollup.critical.build import CriticalOptions, build_critical
    from rollup.report.as_json import report_json
    from rollup.report.build import Report, ReportOptions, build_report
    from rollup.report.diff import Diff, compare, measure
    from rollup.runners.on_ray import RayRunner
    from rollup.store.span_store import SpanStore, ingest, open_store
    from rollup.timeline.build import Timeline, build_timeline
    from rollup.timeline.listing import spans_in_window
