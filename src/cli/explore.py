"""Looking at the spans themselves: `spans` (what else ran in step N), `timeline` (Perfetto), `query` (SQL)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from instrument.groups import BUCKETS

from . import shell
from .views.check import spans_title
from .views.formats import OutputFormat, TabularFormat, arrow_rows, render_rows

# Where `goodput timeline` writes when no --output is given (and says so).
DEFAULT_TIMELINE = "timeline.json"


def query(
    paths_and_sql: list[str] = typer.Argument(
        ..., metavar="PATH... SQL", help="Trace files, directories or globs, then the SQL."
    ),
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
) -> None:
    """SQL over the spans: one row a span, in the DuckDB view `spans`.

    Columns: trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, duration_ns, status_code,
    status_message, attributes and resource (maps), events (list of {time_ns, name, attributes}), links (list of
    {trace_id, span_id, attributes}), scope_name, scope_version, service, process, host_pid, run_id, bucket,
    iteration, span_group, efficiency_category, source_file.

    Example: goodput query run/ "SELECT bucket, sum(duration_ns)/1e9 AS s FROM spans GROUP BY bucket"

    Exceptions: goodput query run/ "SELECT s.name, e.attributes['exception.type'] FROM spans s,
    unnest(s.events) AS u(e) WHERE e.name = 'exception'"
    """
    if len(paths_and_sql) < 2:
        raise typer.BadParameter("give at least one PATH and then the SQL", param_hint="PATH... SQL")
    *paths, sql = paths_and_sql
    chosen = shell.output_format(fmt, output)
    with shell.opened_store(paths, no_cache, keep_going=keep_going, accounting=False) as store:
        columns, rows = arrow_rows(store.sql(sql))
    shell.emit(render_rows(columns, rows, chosen, width=shell.terminal_width()), output)


def spans(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = typer.Option(
        None, "--iteration", "-i", help="List the spans active in this iteration's window (default: every span)."
    ),
    bucket: str | None = typer.Option(
        None, "--bucket", help="Only spans of this bucket: productive, overhead, idle or wasted."
    ),
    process: str | None = typer.Option(
        None,
        "--process",
        help="Only spans of this process: its name as listed, or the service name it is shown under (NAME@host:pid, "
        "NAME [host:pid]).",
    ),
    attempt: str | None = shell.AttemptOption,
    last: str | None = shell.LastOption,
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
) -> None:
    """What else was happening in step N: every span active in its window; without --iteration, every span.

    Whatever the span's own iteration, process or attempt; sorted by start, offsets from the window's start (from
    the first span's start without --iteration). The window is the report's row for N, its latest attempt's.
    --process NAME selects the process listed as NAME, and those listed as NAME@host:pid or NAME [host:pid]: every
    process of the service NAME (`--process grpo-generation` lists both grpo-generation@vm:13372 and @vm:13373).
    --last DURATION keeps the spans sharing time with that last stretch of trace time.
    """
    chosen = shell.output_format(fmt, output)
    last_ns = shell.last_duration(last)
    from rollup import spans_in_window

    if bucket is not None:
        bucket = bucket.strip().lower()
        if bucket not in BUCKETS:
            known = ", ".join(BUCKETS)
            raise typer.BadParameter(f"{bucket!r} is not a bucket; buckets: {known}", param_hint="--bucket")
    with shell.opened_store(paths, no_cache, keep_going=keep_going) as store:
        window, table = spans_in_window(
            shell.through_last(store, last_ns), iteration, bucket=bucket, process=process, attempt=attempt
        )
    if chosen is OutputFormat.table:  # ids that only a script needs would push the readable columns off the screen
        table = table.drop_columns(["parent_span_id", "trace_id"])
    columns, rows = arrow_rows(table)
    title = spans_title(window, table["start_offset_s"].to_pylist(), table["duration_s"].to_pylist())
    shell.emit(render_rows(columns, rows, chosen, title=title, width=shell.terminal_width()), output)


def timeline(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    output: Path = typer.Option(
        Path(DEFAULT_TIMELINE), "--output", "-o", help="Write the trace to FILE ('-': standard output)."
    ),
    iteration: int | None = shell.IterationOption,
    iterations: str | None = shell.IterationsOption,
    attempt: str | None = shell.AttemptOption,
    gpus: list[str] = shell.GpusOption,
    place: list[str] = shell.PlaceOption,
    last: str | None = shell.LastOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
) -> None:
    """Write the spans as a Chrome/Perfetto trace: open FILE (default timeline.json) in ui.perfetto.dev or
    chrome://tracing.

    One process per emitting process, concurrent spans on separate lanes, an 'iterations' process with each
    window (and each superseded one), arrows from a parent to its children in other processes, and a 'critical
    path' process with what each step waited on (see `goodput critical`). Times are
    microseconds from the run's first span. --iterations A:B keeps the spans overlapping those windows. With GPUs,
    each process is labelled with its fleet, its pool and the GPUs it holds. --last DURATION keeps the spans
    sharing time with that last stretch of trace time.
    """
    selected = shell.selected_iterations(iteration, iterations)
    gpu_options = shell.gpu_options(gpus, place)
    last_ns = shell.last_duration(last)
    from rollup import build_timeline

    with shell.opened_store(paths, no_cache, keep_going=keep_going, accounting=False) as store:
        built = build_timeline(shell.through_last(store, last_ns), iterations=selected, attempt=attempt,
                               exact=iteration is not None, gpus=gpu_options)  # fmt: skip
        if built.missing is not None or (not built.windows and selected is None):
            shell.print_notices([shell.nothing_note(store, built.missing)])
        if str(output) == "-":
            sys.stdout.flush()
            built.write(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            try:
                with output.open("wb") as out:
                    built.write(out)
            except OSError as exc:
                raise shell.fail(f"{output}: cannot write: {exc.strerror or exc}") from None
    shell.print_notices([f"wrote {built.summary()} to {'standard output' if str(output) == '-' else output}"])
