"""Where the accounting's time goes, statement by statement: the lineage walk, the report, its breakdowns, the checks.

Loads a trace through the cache (the conversion is not what this measures), then builds the lineage afresh and runs
each command's accounting on the same connection, timing every DuckDB statement it sends and naming it by the
rollup function that sent it. Run it at two sizes and compare the lines: a step that takes more than 4x the time
for 4x the spans is the one to fix.

With `--no-cache` the trace is loaded as `report --no-cache` loads it (the accounting columns alone, no cache), and
the lineage phase builds the view `report --no-cache` queries.

Usage: python bench/accounting_phases.py TRACE [--phases lineage,report,name,process,check,spans,timeline]
       [--cache-dir DIR] [--threads N] [--top N] [--no-cache]
"""

from __future__ import annotations

import argparse
import inspect
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def cpu_seconds() -> float:
    """This process's CPU time so far, every thread's (DuckDB's included): steadier than wall time on a busy
    machine."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


PHASES = ("lineage", "report", "name", "process", "check", "spans", "timeline")


class TimedConnection:
    """A DuckDB connection that adds each statement's seconds to `timings`, keyed by the rollup function that sent
    it (and the statement's ordinal within that function). Results are materialized before the clock stops."""

    def __init__(self, connection: Any, timings: dict[str, list[float]]) -> None:
        self._connection = connection
        self._timings = timings
        self._seen: dict[str, int] = defaultdict(int)

    def _caller(self) -> str:
        for frame in inspect.stack()[2:]:
            path = frame.filename.replace(os.sep, "/")
            if "/rollup/" in path and not path.endswith("/store.py"):
                return f"{Path(path).stem}.{frame.function}"
        return "?"

    def _timed(self, method: str, *args: Any, **kwargs: Any) -> Any:
        caller = self._caller()
        self._seen[caller] += 1
        started, cpu = time.perf_counter(), cpu_seconds()
        result = getattr(self._connection, method)(*args, **kwargs)
        if method == "execute":
            result = _Fetched(result.fetchall() if result.description else [], result.description)
        self._add(caller, time.perf_counter() - started, cpu_seconds() - cpu)
        return result

    def _add(self, caller: str, wall: float, cpu: float) -> None:
        timing = self._timings[f"{caller}#{self._seen[caller]}"]
        timing[0] += wall
        timing[1] += cpu

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("execute", *args, **kwargs)

    def sql(self, *args: Any, **kwargs: Any) -> Any:
        return _Lazy(self, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


class _Fetched:
    """An executed statement's rows, fetched inside the timer."""

    def __init__(self, rows: list[tuple[Any, ...]], description: Any) -> None:
        self._rows = rows
        self.description = description

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


class _Lazy:
    """`connection.sql(...)`: timed when its result is taken (`to_arrow_table`, `to_arrow_reader`)."""

    def __init__(self, timed: TimedConnection, args: Any, kwargs: Any) -> None:
        self._timed, self._args, self._kwargs = timed, args, kwargs

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            caller = self._timed._caller()
            self._timed._seen[caller] += 1
            started, cpu = time.perf_counter(), cpu_seconds()
            relation = self._timed._connection.sql(*self._args, **self._kwargs)
            result = getattr(relation, name)(*args, **kwargs)
            if name == "to_arrow_reader":
                result = result.read_all().to_reader()
            self._timed._add(caller, time.perf_counter() - started, cpu_seconds() - cpu)
            return result

        return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--cache-dir", type=Path, default=ROOT / "bench" / "out" / "phases-cache")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: DuckDB's)")
    parser.add_argument("--top", type=int, default=12, help="statements listed per phase")
    parser.add_argument(
        "--no-cache", action="store_true", help="load as `--no-cache` does (the accounting columns, no Parquet cache)"
    )
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]

    from rollup import ReportOptions, build_report, build_timeline, check_findings, open_store, spans_in_window
    from rollup.accounting.windows import iteration_windows
    from rollup.base.tables import LINEAGE, OWN_SPANS
    from rollup.store.lineage import build_lineage
    from rollup.store.spanset import SpanSet

    started = time.perf_counter()
    if args.no_cache:
        store = open_store([args.trace], use_cache=False, accounting=True)
    else:
        store = open_store([args.trace], cache_dir=args.cache_dir)
    (spans,) = store.connection.execute("SELECT count(*) FROM spans").fetchall()[0]
    how = "without the cache" if args.no_cache else "through the cache"
    print(f"{args.trace.name}: {spans:,} spans, loaded {how} in {time.perf_counter() - started:.2f} s")
    if args.threads:
        store.connection.execute(f"SET threads = {args.threads}")
    timings: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    store.connection = TimedConnection(store.connection, timings)  # type: ignore[assignment]
    totals: dict[str, tuple[float, float]] = {}

    def phase(name: str, work: Any) -> None:
        timings.clear()
        store.connection._seen.clear()  # type: ignore[attr-defined]
        begun, cpu = time.perf_counter(), cpu_seconds()
        work()
        totals[name] = (time.perf_counter() - begun, cpu_seconds() - cpu)
        in_sql = sum(wall for wall, _ in timings.values())
        print(f"\n{name}: {totals[name][0]:.2f} s wall, {totals[name][1]:.2f} s cpu ({in_sql:.2f} s wall in DuckDB)")
        for key, (wall, cpu_s) in sorted(timings.items(), key=lambda item: -item[1][0])[: args.top]:
            print(f"  {wall:7.3f} s wall {cpu_s:7.3f} s cpu  {key}")

    if "lineage" in phases:  # always walks, cache or not; the store then reads the walk's tables
        phase("lineage", lambda: build_lineage(store.connection, store.nodes_table, scratch=store.scratch()))
        store._whole = SpanSet(store.connection, LINEAGE, OWN_SPANS)
    else:  # the cached lineage, as a re-run reads it
        phase("cached lineage", store.spans)
    windows = iteration_windows(store.spans())
    middle = windows[len(windows) // 2].iteration if windows else 0
    work = {
        "report": lambda: build_report(store),
        "name": lambda: build_report(store, ReportOptions(by="name")),
        "process": lambda: build_report(store, ReportOptions(by="process")),
        "check": lambda: check_findings(store),
        "spans": lambda: spans_in_window(store, middle),
        "timeline": lambda: build_timeline(store, iterations=(middle, middle + 2)),
    }
    for name in phases:
        if name in work:
            phase(name, work[name])
    print("\nwall: " + "  ".join(f"{name} {wall:.2f}" for name, (wall, _) in totals.items()))
    print("cpu:  " + "  ".join(f"{name} {cpu:.2f}" for name, (_, cpu) in totals.items()))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
