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
    speedup: list[str] = typer.Option(
        [],
        "--speedup",
        metavar="NAME=PCT",
        help="Predict the steps with the own time of every span of NAME PCT shorter (rl.grpo.generation=10%), the "
        "run re-timed along its recorded dependencies; repeatable.",
    ),
    wakeup: str = typer.Option(
        "20ms",
        "--wakeup",
        metavar="DURATION",
        help="A wait (an idle span) ended because a span elsewhere ended at most this long before it (20ms, 0.5s).",
    ),
    gpus: list[str] = shell.GpusOption,
    place: list[str] = shell.PlaceOption,
) -> None:
    """What each step waited on, and what speeding up a phase would buy.

    Each step is explained back from its end along the dependencies the trace records: the children its spans
    waited for, the order of the spans of one process, the span elsewhere whose end woke a wait. The table leads
    with the phase whose 10% speed-up saves the most wall clock a step (the run re-timed with that phase shorter:
    a phase beside a longer one saves nothing), lists each phase's time on the path and its saving, each process's
    time on it, and per fleet the worker its fan-outs waited on most; with --iteration N, that step's path. JSON,
    CSV and Markdown give every path.
    """
    selected = shell.selected_iterations(iteration, iterations)
    chosen = shell.output_format(fmt, output)
    from rollup import CriticalOptions, build_critical
    from rollup.critical import parse_speedup
    from rollup.report import parse_duration

    options = shell.checked(
        lambda: CriticalOptions(
            selected,
            attempt,
            exact=iteration is not None,
            wakeup_ns=parse_duration(wakeup, "--wakeup", zero=True),
            speedup=parse_speedup(speedup),
            gpus=shell.gpu_options(gpus, place),
        )
    )  # every option checked before a file is read
    with shell.opened_store(paths, no_cache, keep_going=keep_going) as store:
        found = shell.checked(lambda: build_critical(store, options))
        if not found.iterations:
            shell.print_notices([shell.nothing_note(store, found.missing)])
    shell.emit(critical_text(found, chosen, width=shell.terminal_width(), path_of=iteration), output)
