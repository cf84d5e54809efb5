"""`goodput check`: the accounting bugs, and the coverage warnings a CI gate holds a run to."""

from __future__ import annotations

from pathlib import Path

import typer

from . import shell
from .views.check import check_text
from .views.formats import TabularFormat


def check(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = shell.IterationOption,
    iterations: str | None = shell.IterationsOption,
    attempt: str | None = shell.AttemptOption,
    strict: bool = typer.Option(False, "--strict", help="Exit 1 on warnings too, not only on errors."),
    expect: list[str] | None = typer.Option(
        None,
        "--expect",
        metavar="GROUP,...",
        help="Span groups (rl.span_group, any case) that should be active in every iteration window: warn "
        "missing-group for each window without one. Repeatable.",
    ),
    each: bool = typer.Option(False, "--all", help="List each finding on a line of its own in the table."),
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
    last: str | None = shell.LastOption,
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Run the rules as Ray tasks, by ranges of iterations: --ray [ADDRESS] (default: "
        "RAY_ADDRESS, else a local cluster). Same findings as without.",
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
) -> None:
    """Flag the accounting bugs; exit 1 when any is an error (with --strict, when any is a warning too).

    Errors: nested-bucket, self-overlap, bucketed-umbrella, unknown-bucket. Warnings: overlapping-steps (within
    an attempt), orphan-span, iteration-mismatch, inverted-span, overlapping-attempts, no-iterations,
    mostly-unaccounted (a window more than half charged to no bucket), missing-group (with --expect). The table
    has a line per rule and span name, with the count, the iterations and an example; --all, JSON, CSV and
    Markdown list each finding. With --last, the spans sharing time with that last stretch of trace time.
    """
    selected = shell.selected_iterations(iteration, iterations)
    last_ns = shell.last_duration(last)
    chosen = shell.output_format(fmt, output)
    from rollup import CheckOptions, check_findings

    options = shell.checked(lambda: CheckOptions(attempt, expect or (), selected, exact=iteration is not None))
    with shell.runner(ray, ray_address) as runner, shell.opened_store(paths, no_cache, keep_going=keep_going) as store:
        found = check_findings(shell.through_last(store, last_ns), options, runner)
        if found.missing is not None:
            shell.print_notices([f"note: {found.missing}"])
    shell.emit(check_text(found, chosen, width=shell.terminal_width(), each=each), output)
    if found.summary["errors"] or (strict and found.summary["warnings"]):
        raise typer.Exit(shell.EXIT_FINDINGS)
