"""goodput's rollup: trace files in, the wall clock of each iteration by goodput bucket out.

The front door: what `cli.py` calls, and what a user's script may. Each name loads its module on first use, so
importing `rollup` (or `rollup.views` for the CLI's option types) does not import DuckDB or pyarrow.

The path of a span: `read` (paths, sniff, chunks, otlp_proto / otlp_json / duckdb_json, plan) turns files into
Parquet parts or DuckDB rows; `store` puts them behind one `spans` view, with `cache` in between; `lineage` gives
each span its effective iteration; `attempts` tells a job's restarts apart; `windows` cuts each attempt into
iteration windows; `attribution` charges their wall clock, `breakdown` shares it among span names; `report`,
`outliers`, `checks` and `diff` build the results; `views` renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

# Public name -> the module (under this package) that defines it.
_HOMES: dict[str, str] = {
    **dict.fromkeys(["GoodputError", "InputError", "TraceFormatError"], "errors"),
    **dict.fromkeys(["SpanStore", "open_store", "ingest"], "store"),
    **dict.fromkeys(["SPAN_SCHEMA", "ACCOUNTING_SCHEMA", "BUCKETS"], "schema"),
    **dict.fromkeys(["Report", "IterationRow", "Figures", "JobFigures", "build_report", "report_json"], "report"),
    "Attempt": "attempts",
    **dict.fromkeys(["NameShare", "shares_by_name"], "breakdown"),
    **dict.fromkeys(["Side", "summarise", "measure", "compare", "slower_than"], "diff"),
    "outliers": "outliers",
    **dict.fromkeys(["Finding", "RULES", "check_findings", "check_summary"], "checks"),
    "parse_groups": "window_rules",
    "out_of_memory": "connection",
    **dict.fromkeys(["build_report_on_ray", "check_findings_on_ray", "ray_connection"], "distributed"),
    **dict.fromkeys(["Timeline", "build_timeline", "timeline_trace"], "timeline"),
    **dict.fromkeys(["Window", "iteration_windows", "spans_in_window"], "windows"),
    **dict.fromkeys(["ray_runner", "RAY_CHUNK_BYTES"], "read.ray_tasks"),
    "default_cache_dir": "cache",
}

__all__ = list(_HOMES)


__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .attempts import Attempt
    from .breakdown import NameShare, shares_by_name
    from .cache import default_cache_dir
    from .checks import RULES, Finding, check_findings, check_summary
    from .connection import out_of_memory
    from .diff import Side, compare, measure, slower_than, summarise
    from .distributed import build_report_on_ray, check_findings_on_ray, ray_connection
    from .errors import GoodputError, InputError, TraceFormatError
    from .outliers import outliers
    from .read.ray_tasks import RAY_CHUNK_BYTES, ray_runner
    from .report import Figures, IterationRow, JobFigures, Report, build_report, report_json
    from .schema import ACCOUNTING_SCHEMA, BUCKETS, SPAN_SCHEMA
    from .store import SpanStore, ingest, open_store
    from .timeline import Timeline, build_timeline, timeline_trace
    from .window_rules import parse_groups
    from .windows import Window, iteration_windows, spans_in_window
