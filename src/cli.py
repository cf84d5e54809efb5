"""The `goodput` command: parse arguments, call `rollup`, render tables/JSON/CSV/Markdown, set the exit code.

The only module that knows typer (and the terminal); what it prints comes from `rollup.views`. Errors become exit
codes in one place (`_Commands.invoke`): the library raises `GoodputError` with a message a user can act on, printed
as one line on stderr, exit 2, never with a traceback; anything else is a bug in goodput, said as such in one line,
exit 3, with its traceback under `--debug` or `GOODPUT_DEBUG=1`. DuckDB, pyarrow and Ray are imported inside the
commands, so `goodput --help` stays instant.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from rollup.views import (
    LoadProgress,
    OutputFormat,
    arrow_rows,
    check_counts,
    check_text,
    diff_text,
    format_for_output,
    goodput_gate_verdict,
    goodput_share,
    internal_error_text,
    iteration_range,
    no_iterations_note,
    percent_over,
    render_rows,
    report_text,
    spans_title,
    version_text,
)

if TYPE_CHECKING:
    from rollup import SpanStore

EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3
DEBUG_VARIABLE = "GOODPUT_DEBUG"


class _Commands(TyperGroup):
    """goodput's command group: `--debug` is taken anywhere on the line, and errors become exit codes here."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _debug_first(args))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):  # exit codes and usage errors: typer's own
            raise
        except KeyboardInterrupt:
            raise _fail("interrupted", 130) from None
        except Exception as exc:
            from rollup import GoodputError

            if isinstance(exc, GoodputError):
                raise _fail(str(exc)) from None
            if isinstance(exc, OSError) and exc.errno == errno.EPIPE:  # `goodput ... | head`: typer exits quietly
                raise
            raise _internal_error(exc, debug=bool(ctx.params.get("debug")) or _debug_variable()) from None


def _debug_first(args: list[str]) -> list[str]:
    """`--debug` given after the command (`goodput report run/ --debug`) moved before it, where the group's option
    is parsed; nothing after a `--` is touched."""
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug"] + [arg for arg in args[:end] if arg != "--debug"] + args[end:]


def _debug_variable() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


app = typer.Typer(
    name="goodput",
    cls=_Commands,
    help=(
        "Where the wall clock of a distributed RL training job goes, read from its OpenTelemetry trace files.\n\n"
        "Exit codes: 0 success; 1 a gate failed (check found errors, or warnings with --strict; report "
        "--fail-under; diff --fail-over); 2 the input could not be used (a missing or "
        "unreadable file, not a trace, a corrupt record, a bad option value); 3 an internal error in goodput "
        "itself (a bug; --debug or GOODPUT_DEBUG=1 prints its traceback)."
    ),
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@app.callback()
def _global_options(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print goodput's version and exit."
    ),
    debug: bool = typer.Option(
        False, "--debug", help="On an internal error (exit 3), print its traceback too (also GOODPUT_DEBUG=1)."
    ),
) -> None:
    """Options of every command (read by `_Commands`)."""


# --- shared options -----------------------------------------------------------------------------------------------

FormatOption = typer.Option(
    None,
    "--format",
    "-f",
    help="Output as a table, JSON, CSV or Markdown (default: from --output's extension, else a table).",
    show_default=False,
)
OutputOption = typer.Option(
    None,
    "--output",
    "-o",
    help="Write the output to FILE instead of standard output; .json, .csv and .md choose the format.",
)
NoCacheOption = typer.Option(False, "--no-cache", help="Parse the files afresh; neither read nor write the cache.")

def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    _stderr().print(f"Error: {escape(message)}", markup=True)
    return typer.Exit(code)


def _internal_error(exc: BaseException, *, debug: bool) -> typer.Exit:
    """A bug in goodput (not in the traces): one line saying so, exit 3; the traceback first when debugging."""
    if debug:
        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.flush()
    return _fail(internal_error_text(exc, debug=debug), EXIT_INTERNAL)


def _output_format(fmt: OutputFormat | None, output: Path | None) -> OutputFormat:
    """`--format` when given; else the format `--output`'s extension names (SPEC section 6); else a table."""
    if fmt is not None:
        return fmt
    try:
        return format_for_output(output)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--output") from None


def _print_notices(notices: Sequence[str]) -> None:
    for notice in notices:
        _stderr().print(escape(notice))


@contextmanager
def _opened_store(paths: Sequence[str], no_cache: bool, *, accounting: bool = True) -> Iterator[SpanStore]:
    """The store for a command; `accounting`: the command reads only what the accounting reads (not `query`)."""
    from rollup import ACCOUNTING_SCHEMA, SPAN_SCHEMA, open_store

    progress = LoadProgress(_stderr())
    try:
        schema = ACCOUNTING_SCHEMA if accounting else SPAN_SCHEMA
        store = open_store(paths, use_cache=not no_cache, progress=progress, schema=schema)
    finally:
        progress.close()
    _print_notices(store.notices)
    try:
        yield store
    finally:
        store.close()


def _terminal_width() -> int:
    """The terminal's width on a terminal; wide enough for a whole report row when writing to a pipe or file."""
    return Console().width if sys.stdout.isatty() else 200


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"{output}: cannot write: {exc.strerror or exc}") from None


# --- commands -----------------------------------------------------------------------------------------------------


def query(
    paths_and_sql: list[str] = typer.Argument(
        ..., metavar="PATH... SQL", help="Trace files, directories or globs, then the SQL."
    ),
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
    no_cache: bool = NoCacheOption,
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
    fmt = _output_format(fmt, output)
    with _opened_store(paths, no_cache, accounting=False) as store:
        columns, rows = arrow_rows(store.sql(sql))
    _emit(render_rows(columns, rows, fmt, width=_terminal_width()), output)


def _iteration_range(iteration: int | None, iterations: str | None) -> tuple[int, int] | None:
    """`--iteration N` or `--iterations A:B` (inclusive; either end may be left open) as a range, or None."""
    if iteration is not None and iterations is not None:
        raise typer.BadParameter("give --iteration or --iterations, not both")
    if iteration is not None:
        return iteration, iteration
    try:
        return iteration_range(iterations) if iterations is not None else None
    except ValueError:
        raise typer.BadParameter(f"expected A:B, got {iterations!r}", param_hint="--iterations") from None


IterationOption = typer.Option(None, "--iteration", "-i", help="Only iteration N.")
IterationsOption = typer.Option(None, "--iterations", help="Only iterations A to B inclusive (A:B, A:, :B).")
AttemptOption = typer.Option(
    None, "--attempt", help="Read one attempt only: its run id (goodput.run.id, else nemo.run.id), or 'latest'."
)


@app.command()
def report(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = IterationOption,
    iterations: str | None = IterationsOption,
    precedence: str | None = typer.Option(
        None,
        "--precedence",
        help="Bucket order for instants where several are active (default productive,overhead,idle,wasted).",
    ),
    by: str | None = typer.Option(
        None,
        "--by",
        help="'process': each process's own breakdown within the windows; 'name' or 'group': which phase (span name or "
        "rl.span_group) each bucket's seconds went to.",
    ),
    total_only: bool = typer.Option(False, "--total", help="With --by name or group: the total's breakdown only."),
    fail_under: str | None = typer.Option(
        None, "--fail-under", help="Exit 1 (after printing) when the total goodput is below G: 0.6 or 60%."
    ),
    attempt: str | None = AttemptOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """Goodput per iteration: wall clock by bucket, and span-seconds beside it.

    Each instant of an iteration's window is charged once, to the first active bucket in precedence order; the
    naive span-seconds sum is shown beside it so the overcount is visible. Then totals, and the time outside
    every iteration (start-up, gaps, shutdown). A job restarted from a checkpoint writes several attempts: an
    iteration's row is its latest attempt's, the windows it replaced are rework, the time between attempts is
    downtime, and the job's goodput over all of it is shown below. Figures far above their median over the
    iterations (3 scaled MADs) are marked as outliers.
    """
    if by is not None and by not in ("process", "name", "group"):
        raise typer.BadParameter(f"expected process, name or group, got {by!r}", param_hint="--by")
    if total_only and by not in ("name", "group"):
        raise typer.BadParameter("--total goes with --by name or --by group", param_hint="--total")
    gate = _goodput_gate(fail_under)
    selected = _iteration_range(iteration, iterations)
    fmt = _output_format(fmt, output)
    from rollup import build_report, report_json

    checks = None
    with _opened_store(paths, no_cache) as store:
        if fmt is OutputFormat.html and by is None:  # the page shows the total's breakdown by name
            by = "name"
        built = build_report(store, iterations=selected, precedence=precedence, by=by, attempt=attempt)
        payload = report_json(built)
        if not payload["iterations"]:
            _print_notices([_nothing_selected(store, selected, iteration) or no_iterations_note(store.read_summary())])
        if fmt is OutputFormat.html:
            from rollup import check_findings
            checks = check_counts(check_findings(store, attempt=attempt))
    width = _terminal_width()
    _emit(report_text(payload, by == "process", fmt, width=width, checks=checks, total_only=total_only), output)
    if gate is not None:
        verdict = goodput_gate_verdict(payload["total"]["goodput"], gate)
        if verdict is not None:
            _stderr().print(escape(verdict))
            raise typer.Exit(EXIT_FINDINGS)


def _goodput_gate(text: str | None) -> float | None:
    """`--fail-under`'s value as a share: `0.6` or `60%`."""
    if text is None:
        return None
    try:
        return goodput_share(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--fail-under") from None


@app.command()
def check(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = IterationOption,
    iterations: str | None = IterationsOption,
    attempt: str | None = AttemptOption,
    strict: bool = typer.Option(False, "--strict", help="Exit 1 on warnings too, not only on errors."),
    expect: list[str] | None = typer.Option(
        None,
        "--expect",
        metavar="GROUP,...",
        help="Span groups (rl.span_group, any case) that should be active in every iteration window: warn "
        "missing-group for each window without one. Repeatable.",
    ),
    each: bool = typer.Option(False, "--all", help="List each finding on a line of its own in the table."),
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """Flag the accounting bugs; exit 1 when any is an error (with --strict, when any is a warning too).

    Errors: nested-bucket, self-overlap, bucketed-umbrella, unknown-bucket. Warnings: overlapping-steps (within
    an attempt), orphan-span, iteration-mismatch, inverted-span, overlapping-attempts, no-iterations,
    mostly-unaccounted (a window more than half charged to no bucket), missing-group (with --expect). The table
    has a line per rule and span name, with the count, the iterations and an example; --all, JSON, CSV and
    Markdown list each finding.
    """
    selected = _iteration_range(iteration, iterations)
    fmt = _output_format(fmt, output)
    groups: list[str] = []
    if expect is not None:
        from rollup import parse_groups

        try:
            groups = parse_groups(expect)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--expect") from None
    from rollup import check_findings, check_summary

    with _opened_store(paths, no_cache) as store:
        findings = check_findings(store, attempt=attempt, expect=groups)
        if selected is not None and (note := _nothing_selected(store, selected, iteration)):
            _print_notices([note])
    if selected is not None:
        findings = [f for f in findings if f.iteration is not None and selected[0] <= f.iteration <= selected[1]]
    summary = check_summary(findings)
    _emit(check_text(findings, summary, fmt, width=_terminal_width(), each=each), output)
    if summary["errors"] or (strict and summary["warnings"]):
        raise typer.Exit(EXIT_FINDINGS)


@app.command()
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
    attempt: str | None = AttemptOption,
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """What else was happening in step N: every span active in its window; without --iteration, every span.

    Whatever the span's own iteration, process or attempt; sorted by start, offsets from the window's start (from
    the first span's start without --iteration). The window is the report's row for N, its latest attempt's.
    --process NAME selects the process listed as NAME, and those listed as NAME@host:pid or NAME [host:pid]: every
    process of the service NAME (`--process grpo-generation` lists both grpo-generation@vm:13372 and @vm:13373).
    """
    fmt = _output_format(fmt, output)
    from rollup import BUCKETS, spans_in_window

    if bucket is not None:
        bucket = bucket.strip().lower()
        if bucket not in BUCKETS:
            known = ", ".join(BUCKETS)
            raise typer.BadParameter(f"{bucket!r} is not a bucket; buckets: {known}", param_hint="--bucket")
    with _opened_store(paths, no_cache) as store:
        window, table = spans_in_window(store, iteration, bucket=bucket, process=process, attempt=attempt)
    if fmt is OutputFormat.table:  # ids that only a script needs would push the readable columns off the screen
        table = table.drop_columns(["parent_span_id", "trace_id"])
    columns, rows = arrow_rows(table)
    title = spans_title(window, table["start_offset_s"].to_pylist(), table["duration_s"].to_pylist())
    _emit(render_rows(columns, rows, fmt, title=title, width=_terminal_width()), output)


@app.command()
def diff(
    baseline: str = typer.Argument(
        ..., metavar="BASELINE", help="The run to compare against: a file, directory or glob."
    ),
    candidate: str = typer.Argument(..., metavar="CANDIDATE", help="The run to judge: a file, directory or glob."),
    iterations: str | None = typer.Option(
        None, "--iterations", help="Only iterations A to B inclusive (A:B, A:, :B), on both sides."
    ),
    precedence: str | None = typer.Option(
        None, "--precedence", help="Bucket order for instants where several are active, on both sides."
    ),
    fail_over: str | None = typer.Option(
        None, "--fail-over", help="Exit 1 (after printing) when the candidate's median step is more than PCT% slower."
    ),
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """Did it get worse, and where: the median step of two runs, figure by figure and phase by phase.

    Medians over each side's iterations of the wall clock, each bucket, unaccounted and goodput, their difference
    (candidate minus baseline) and change; then each span name's median seconds per step in each bucket (from
    `report --by name`), largest change first. The first line is the verdict.
    """
    percent = None
    if fail_over is not None:
        try:
            percent = percent_over(fail_over)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--fail-over") from None
    selected = _iteration_range(None, iterations)
    fmt = _output_format(fmt, output)
    from rollup import build_report, compare, slower_than, summarise

    sides = []
    for path in (baseline, candidate):
        with _opened_store([path], no_cache) as store:
            built = build_report(store, iterations=selected, precedence=precedence, by="name")
            sides.append(summarise(built, [path]))
    result = compare(*sides)
    _emit(diff_text(result, fmt, width=_terminal_width()), output)
    if percent is not None and (verdict := slower_than(result, percent)) is not None:
        _stderr().print(escape(verdict))
        raise typer.Exit(EXIT_FINDINGS)


def _nothing_selected(store: SpanStore, selected: tuple[int, int] | None, iteration: int | None) -> str | None:
    """When `--iteration N` / `--iterations A:B` select no iteration of the traces: `--iteration N`, one iteration
    asked for by number, is a bad option value (exit 2, as in `spans`); a range holding none is an empty result
    with a note. Both name the iterations the traces hold."""
    missing = store.missing_iterations(selected) if selected is not None else None
    if missing is None:
        return None
    if iteration is not None:
        raise _fail(missing)
    return f"note: {missing}"


_RAY_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[\w.\-]+:\d+)$")


def ingest(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    to: Path | None = typer.Option(None, "--to", help="Write a Parquet dataset to DIR instead of the cache."),
    ray: bool = typer.Option(
        False, "--ray", help="Convert as Ray tasks: --ray [ADDRESS] (default: RAY_ADDRESS, else a local cluster)."
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
    fmt: OutputFormat | None = FormatOption,
    output: Path | None = OutputOption,
) -> None:
    """Convert trace files to Parquet once, locally or on a Ray cluster.

    Every later command on the same files then reads Parquet only. Without --to the result is the cache the
    other commands look in; with --to DIR it is a Parquet dataset that they read as a PATH.
    """
    fmt = _output_format(fmt, output)
    from rollup import ingest as ingest_files

    runner, max_chunk_bytes = None, None
    if ray or ray_address:
        from rollup import RAY_CHUNK_BYTES, ray_runner

        runner, max_chunk_bytes = ray_runner(ray_address), RAY_CHUNK_BYTES
    progress = LoadProgress(_stderr())
    try:
        entries = ingest_files(paths, to_dir=to, runner=runner, progress=progress, max_chunk_bytes=max_chunk_bytes)
    finally:
        progress.close()
    _print_notices([n for entry in entries for n in entry.notices])
    rows = [[str(e.path), e.spans, len(e.parts), "cached" if e.cached else "converted"] for e in entries]
    _emit(render_rows(["file", "spans", "parts", "state"], rows, fmt, width=_terminal_width()), output)


def timeline(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    output: Path = typer.Option(..., "--output", "-o", help="Write the trace to FILE ('-': standard output)."),
    iteration: int | None = IterationOption,
    iterations: str | None = IterationsOption,
    attempt: str | None = AttemptOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """Write the spans as a Chrome/Perfetto trace: open FILE in ui.perfetto.dev or chrome://tracing.

    One process per emitting process, concurrent spans on separate lanes, an 'iterations' process with each
    window (and each superseded one), arrows from a parent to its children in other processes. Times are
    microseconds from the run's first span. --iterations A:B keeps the spans overlapping those windows.
    """
    selected = _iteration_range(iteration, iterations)
    from rollup import build_timeline

    with _opened_store(paths, no_cache, accounting=False) as store:
        built = build_timeline(store, iterations=selected, attempt=attempt)
        note = _nothing_selected(store, selected, iteration)
        if note is None and not built.windows and selected is None:
            note = no_iterations_note(store.read_summary())
        _print_notices([note] if note else [])
        if str(output) == "-":
            sys.stdout.flush()
            built.write(sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            try:
                with output.open("wb") as out:
                    built.write(out)
            except OSError as exc:
                raise _fail(f"{output}: cannot write: {exc.strerror or exc}") from None
    _print_notices([f"wrote {built.summary()} to {'standard output' if str(output) == '-' else output}"])


# Registered here so `goodput --help` lists them in the order a user needs them.
app.command()(query)
app.command()(ingest)
app.command()(timeline)


def _rewrite_ray_address(argv: list[str]) -> list[str]:
    """Let `--ray` take an optional address (`--ray`, `--ray auto`, `--ray=host:6379`) without eating a PATH."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--ray="):
            out += ["--ray", "--ray-address", arg.split("=", 1)[1]]
        elif (
            arg == "--ray" and i + 1 < len(argv) and _RAY_ADDRESS.match(argv[i + 1]) and not Path(argv[i + 1]).exists()
        ):
            out += ["--ray", "--ray-address", argv[i + 1]]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `goodput` script and of `python -m cli`."""
    args = _rewrite_ray_address(list(sys.argv[1:] if argv is None else argv))
    app(args=args, prog_name="goodput")


if __name__ == "__main__":
    main()
