"""`goodput report` and `goodput diff`: where the wall clock went, and what changed between two runs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from . import shell
from .views.diff import diff_text
from .views.formats import OutputFormat, TabularFormat
from .views.gates import goodput_gate_verdict, goodput_share, percent_over, slower_verdict
from .views.html import check_counts
from .views.report import report_chunks, report_notes


def report(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = shell.IterationOption,
    iterations: str | None = shell.IterationsOption,
    precedence: str | None = typer.Option(
        None,
        "--precedence",
        help="Bucket order for instants where several are active (default productive,overhead,idle,wasted).",
    ),
    by: str | None = typer.Option(
        None,
        "--by",
        help="'process': each process's own breakdown within the windows; 'name' or 'group': which phase (span name or "
        "rl.span_group) each bucket's seconds went to; 'pool': each pool of GPUs' own GPU-seconds.",
    ),
    gpus: list[str] = shell.GpusOption,
    place: list[str] = shell.PlaceOption,
    total_only: bool = typer.Option(
        False, "--total", help="With --by: the totals only (each process's, or the total's breakdown by name or group)."
    ),
    fail_under: str | None = typer.Option(
        None, "--fail-under", help="Exit 1 (after printing) when the total goodput is below G: 0.6 or 60%."
    ),
    attempt: str | None = shell.AttemptOption,
    last: str | None = shell.LastOption,
    fmt: OutputFormat | None = shell.ReportFormatOption,
    output: Path | None = shell.ReportOutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Charge the windows as Ray tasks, by ranges of iterations: --ray [ADDRESS] (default: "
        "RAY_ADDRESS, else a local cluster). Same output as without.",
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
) -> None:
    """Goodput per iteration: wall clock by bucket, and span-seconds beside it.

    Each instant of an iteration's window is charged once, to the first active bucket in precedence order; the
    naive span-seconds sum is shown beside it so the overcount is visible. Then totals, and the time outside
    every iteration (start-up, gaps, shutdown). A job restarted from a checkpoint writes several attempts: an
    iteration's row is its latest attempt's, the windows it replaced are rework, the time between attempts is
    downtime, and the job's goodput over all of it is shown below. Figures far above their median over the
    iterations (3 scaled MADs) are marked as outliers. With --last, only that stretch up to the latest span end,
    and the stretch as a whole (`recent`).
    """
    if total_only and by is None:
        raise typer.BadParameter("--total goes with --by process, name, group or pool", param_hint="--total")
    gpu_options = shell.gpu_options(gpus, place)
    gate = _goodput_gate(fail_under)
    selected = shell.selected_iterations(iteration, iterations)
    last_ns = shell.last_duration(last)
    fmt = shell.output_format(fmt, output, report=True)
    if fmt is OutputFormat.html and by is None:  # the page shows the total's breakdown by name
        by = "name"
    from rollup import CheckOptions, CriticalOptions, ReportOptions, build_critical, build_report, check_findings

    options = shell.checked(
        lambda: ReportOptions(
            selected, precedence, by, attempt, exact=iteration is not None, gpus=gpu_options, last_ns=last_ns
        )
    )  # every option checked before a file is read
    checks = critical = None
    with shell.runner(ray, ray_address) as runner, shell.opened_store(paths, no_cache, keep_going=keep_going) as store:
        built = build_report(store, options, runner)
        if not built.iterations:
            shell.print_notices([shell.nothing_note(store, built.missing)])
        if fmt is OutputFormat.html:
            checks = check_counts(check_findings(store, CheckOptions(attempt=attempt), runner).findings)
            critical = build_critical(store, CriticalOptions(selected, attempt, gpus=gpu_options))
    width = shell.terminal_width()
    shell.emit(report_chunks(built, fmt, width=width, checks=checks, total_only=total_only, critical=critical), output)
    shell.print_notices(report_notes(built))
    if gate is not None:
        verdict = goodput_gate_verdict(built.total.goodput, gate)
        if verdict is not None:
            shell.stderr().print(escape(verdict))
            raise typer.Exit(shell.EXIT_FINDINGS)


def _goodput_gate(text: str | None) -> float | None:
    """`--fail-under`'s value as a share: `0.6` or `60%`."""
    if text is None:
        return None
    try:
        return goodput_share(text)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--fail-under") from None


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
    gpus: list[str] = shell.GpusOption,
    place: list[str] = shell.PlaceOption,
    fail_over: str | None = typer.Option(
        None, "--fail-over", help="Exit 1 (after printing) when the candidate's median step is more than PCT% slower."
    ),
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
) -> None:
    """Did it get worse, and where: the median step of two runs, figure by figure and phase by phase.

    Medians over each side's iterations of the wall clock, each bucket, unaccounted and goodput, their difference
    (candidate minus baseline) and change; then per span name and bucket its median seconds per step (from `report
    --by name`), its spans' median length and its median seconds per step on the critical path, each largest change
    first. The first line is the verdict: the phase whose spans got longer or shorter most, and the one whose time on
    the path moved most.
    """
    percent = None
    if fail_over is not None:
        try:
            percent = percent_over(fail_over)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--fail-over") from None
    selected = shell.selected_iterations(None, iterations)
    chosen = shell.output_format(fmt, output)
    gpu_options = shell.gpu_options(gpus, place)
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import ExitStack

    from rollup import compare, measure

    # The two sides load one after the other (one progress bar at a time), then are measured at once: each has a
    # DuckDB connection of its own (half the memory limit each), which works without the GIL.
    sides = [baseline, candidate]
    with ExitStack() as stack:
        stores = [
            stack.enter_context(shell.opened_store([path], no_cache, keep_going=keep_going, memory_share=0.5))
            for path in sides
        ]
        with ThreadPoolExecutor(max_workers=2) as pool:
            measured = list(pool.map(lambda store, path: measure(store, [path], iterations=selected,
                                                                 precedence=precedence, gpus=gpu_options),
                                     stores, sides))  # fmt: skip
    result = compare(*measured)
    shell.emit(diff_text(result, chosen, width=shell.terminal_width()), output)
    if percent is not None and (verdict := slower_verdict(result, percent)) is not None:
        shell.stderr().print(escape(verdict))
        raise typer.Exit(shell.EXIT_FINDINGS)
