"""`goodput check`: the accounting bugs, and the coverage warnings a CI gate holds a run to."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rollup.views import (
    OutputFormat,
    check_text,
)

if TYPE_CHECKING:
    pass

from . import shell


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
    fmt: OutputFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    ray: bool = typer.Option(
        False, "--ray", help="Run the rules as Ray tasks, by ranges of iterations: --ray [ADDRESS] (default: "
        "RAY_ADDRESS, else a local cluster). Same findings as without."
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
) -> None:
    """Flag the accounting bugs; exit 1 when any is an error (with --strict, when any is a warning too).

    Errors: nested-bucket, self-overlap, bucketed-umbrella, unknown-bucket. Warnings: overlapping-steps (within
    an attempt), orphan-span, iteration-mismatch, inverted-span, overlapping-attempts, no-iterations,
    mostly-unaccounted (a window more than half charged to no bucket), missing-group (with --expect). The table
    has a line per rule and span name, with the count, the iterations and an example; --all, JSON, CSV and
    Markdown list each finding.
    """
    selected = shell.selected_iterations(iteration, iterations)
    fmt = shell.output_format(fmt, output)
    groups: list[str] = []
    if expect is not None:
        from rollup import parse_groups

        try:
            groups = parse_groups(expect)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--expect") from None
    from rollup import check_findings, check_summary

    with shell.opened_store(paths, no_cache) as store:
        if ray or ray_address:
            from rollup import check_findings_on_ray

            findings = check_findings_on_ray(store, address=ray_address, attempt=attempt, expect=groups)
        else:
            findings = check_findings(store, attempt=attempt, expect=groups)
        if selected is not None and (note := shell.nothing_selected(store, selected, iteration)):
            shell.print_notices([note])
    if selected is not None:
        findings = [f for f in findings if f.iteration is not None and selected[0] <= f.iteration <= selected[1]]
    summary = check_summary(findings)
    shell.emit(check_text(findings, summary, fmt, width=shell.terminal_width(), each=each), output)
    if summary["errors"] or (strict and summary["warnings"]):
        raise typer.Exit(shell.EXIT_FINDINGS)
