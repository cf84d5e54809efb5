"""`goodput critical`: what each step waited on, and the phase and the worker to speed up first."""

from __future__ import annotations

from pathlib import Path

import typer

from . import shell
from .views.critical import critical_text
from .views.formats import TabularFormat


def critical(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    iteration: int | None = typer.Option(None, "--iteration", "-i", help="Only iteration N, and show its path."),
    iterations: str | None = shell.IterationsOption,
    attempt: str | None = shell.AttemptOption,
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    no_cache: bool = shell.NoCacheOption,
    keep_going: bool = shell.KeepGoingOption,
    ray: bool = typer.Option(
        False,
        "--ray",
        help="Walk the windows as Ray tasks, by ranges of iterations: --ray [ADDRESS] (default: "
        "RAY_ADDRESS, else a local cluster). Same output as without.",
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
) -> None:
    """What each step waited on: its critical path, walked back from the window's end, and each phase's and
    process's share of it.

    From the end of each iteration's window, the bucketed span (any process, any iteration) the step was waiting
    on: the one running then that started last, else the one that ended last (the gap after it is waiting); then on
    from that span's start. The table leads with the phase most on the path and what making it 10% shorter saves at
    most per step (a phase off the path saves nothing until another becomes critical), names a straggler (a process
    on the path far longer than the other processes of its service, that the steps waited on alone), then lists the
    phases' and processes' shares; with --iteration N, that step's path. JSON, CSV and Markdown give every path.
    """
    selected = shell.selected_iterations(iteration, iterations)
    chosen = shell.output_format(fmt, output)
    from rollup import CriticalOptions, build_critical

    options = CriticalOptions(selected, attempt, exact=iteration is not None)
    with shell.runner(ray, ray_address) as runner, shell.opened_store(paths, no_cache, keep_going=keep_going) as store:
        found = build_critical(store, options, runner)
        if not found.iterations:
            shell.print_notices([shell.nothing_note(store, found.missing)])
    shell.emit(critical_text(found, chosen, width=shell.terminal_width(), path_of=iteration), output)
