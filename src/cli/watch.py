"""`goodput watch`: a run still being written, redrawn as it grows (SPEC section 13).

Each refresh reads what the files gained (`rollup.watch.watcher.LiveRun`) and shows the report as it stands: a screen
that fits the terminal, redrawn in place (rich's `Live` on the alternate screen, so the terminal never scrolls and is
given back as it was on Ctrl-C), or one JSON object a line (`--format jsonl`), and with `--serve` the same figures at
`/metrics` for Prometheus. `--once` shows one refresh and exits: for scripts and tests."""

from __future__ import annotations

import enum
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import typer

from . import shell

if TYPE_CHECKING:
    from rollup.watch import LiveState

    from .serve import MetricsServer


class WatchFormat(str, enum.Enum):
    table = "table"
    jsonl = "jsonl"


def watch(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs, as they grow."),
    interval: float = typer.Option(5.0, "--interval", help="Seconds between refreshes (default 5)."),
    once: bool = typer.Option(False, "--once", help="Show one refresh and exit."),
    fmt: WatchFormat = typer.Option(
        WatchFormat.table, "--format", help="table: a screen redrawn in place; jsonl: one JSON object per refresh."
    ),
    serve: str | None = typer.Option(
        None,
        "--serve",
        metavar="[HOST:]PORT",
        help="Also serve the latest refresh for Prometheus at http://HOST:PORT/metrics (PORT alone: 127.0.0.1).",
    ),
    precedence: str | None = typer.Option(
        None, "--precedence", help="Bucket order for instants where several are active (as report takes it)."
    ),
) -> None:
    """Goodput of a run still being written: the newest iterations, the total so far, the last 1, 5 and 15 minutes.

    Each refresh reads only what each file gained since the last one (and files new in the folders named), so it
    costs what the job wrote, not the run. A folder that does not exist yet is waited for. Ctrl-C leaves.
    """
    if not interval > 0:
        raise typer.BadParameter(f"expected seconds more than 0, got {interval}", param_hint="--interval")
    from rollup import ReportOptions
    from rollup.watch import LiveRun

    options = shell.checked(lambda: ReportOptions(precedence=precedence))
    server = _server(serve) if serve is not None else None
    run = LiveRun(paths, options)
    # Ctrl-C asks the loop to stop after the refresh under way: raised as KeyboardInterrupt, it would interrupt a
    # DuckDB query halfway (DuckDB says so as an error of its own), so it only sets `stop`. A second Ctrl-C (a first
    # read of a long run takes a while) interrupts the refresh itself; whatever that raises, wherever it lands (the
    # clean-up too), ends the watch with exit 0, and any Ctrl-C after it has nothing left to stop.
    stop = threading.Event()

    def interrupted(signum: int, frame: object) -> None:
        if not stop.is_set():
            stop.set()
            return
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        _watch(run, fmt, interval, once, server, stop, previous)
    except (KeyboardInterrupt, Exception):
        if not stop.is_set():
            raise


def _watch(
    run: Any,
    fmt: WatchFormat,
    interval: float,
    once: bool,
    server: MetricsServer | None,
    stop: threading.Event,
    previous: Any,
) -> None:
    """The refreshes until `stop` (or one, `once`), then the watcher's files closed and Ctrl-C given back: to
    `previous` when the watch ended by itself, ignored when a Ctrl-C ended it (a second one, sent as the first ends
    it, would otherwise end the process as interrupted, exit 130)."""
    notes: list[str] = []
    try:
        if fmt is WatchFormat.jsonl or once:
            _print_refreshes(run, fmt, interval, once, server, notes, stop)
        else:
            _live_screen(run, interval, server, notes, stop)
    finally:
        try:
            run.close()
            if server is not None:
                server.close()
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN if stop.is_set() else previous)


def _server(serve: str) -> MetricsServer:
    from .serve import MetricsServer, parse_serve_address, shown_address

    host, port = shell.checked(lambda: parse_serve_address(serve))
    server = MetricsServer(host, port)
    shell.print_notices([f"note: serving metrics at http://{shown_address(*server.address)}/metrics"])
    return server


def _refresh(run: Any, server: MetricsServer | None, notes: list[str]) -> LiveState:
    state: LiveState = run.refresh()
    notes.extend(state.notes)
    if server is not None:
        server.update(state)
    return state


# A check asks every span again (the watcher keeps no check from one refresh to the next): on a run this large or
# larger, the screen's counts are worked out again at most once a CHECK_EVERY_S.
CHECK_EVERY_SPANS, CHECK_EVERY_S = 200_000, 60.0


class _Checked:
    """The screen's check counts as of the last check of the watcher's spans: errors, warnings, and how many of the
    warnings are `orphan-span` ones (the screen counts those only once the run has stopped writing: SPEC section
    13)."""

    def __init__(self) -> None:
        self.counts: tuple[int | None, int | None, int] = (None, None, 0)
        self._spans = -1
        self._at = 0.0

    def of(self, run: Any, state: LiveState) -> tuple[int | None, int | None, int]:
        now = time.monotonic()
        due = state.spans != self._spans and (state.spans < CHECK_EVERY_SPANS or now - self._at >= CHECK_EVERY_S)
        if due:
            check = run.check()
            orphans = sum(finding.rule == "orphan-span" for finding in check.findings)
            self.counts = (check.summary["errors"], check.summary["warnings"], orphans)
            self._spans, self._at = state.spans, now
        return self.counts


def _status(interval: float, notes: list[str], counts: tuple[int | None, int | None, int]) -> Any:
    from .views.watch import WatchStatus

    errors, warnings, orphans = counts
    return WatchStatus(time.time_ns(), interval, errors, warnings, tuple(notes), orphans)


def _print_refreshes(
    run: Any,
    fmt: WatchFormat,
    interval: float,
    once: bool,
    server: MetricsServer | None,
    notes: list[str],
    stop: threading.Event,
) -> None:
    """One line of JSON (or one screen, as wide and tall as the terminal) per refresh; with `once`, one refresh."""
    from rich.console import Console

    from .views.watch import watch_json_line, watch_screen

    console = Console(highlight=False)
    checked = _Checked()
    waits_said: set[str] = set()
    while not stop.is_set():
        said = len(notes)
        state = _refresh(run, server, notes)
        if fmt is WatchFormat.jsonl:
            try:
                sys.stdout.write(watch_json_line(state) + "\n")
                sys.stdout.flush()
            except BrokenPipeError:  # `goodput watch ... | head` has read enough: stop quietly, as `shell.emit` does
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return
            waits = [wait for wait in state.waits if wait not in waits_said]  # a log: each wait said once
            waits_said.update(waits)
            shell.print_notices([f"note: {note}" for note in [*waits, *notes[said:]]])
        else:
            size = console.size
            status = _status(interval, notes, checked.of(run, state))
            console.print(watch_screen(state, status, size.width, size.height))
        if once or stop.wait(interval):
            return


def _live_screen(
    run: Any, interval: float, server: MetricsServer | None, notes: list[str], stop: threading.Event
) -> None:
    """The screen redrawn in place every `interval` seconds until Ctrl-C (`stop`)."""
    from rich.console import Console
    from rich.live import Live

    from .views.watch import watch_screen

    console = Console(highlight=False)
    checked = _Checked()
    with Live(console=console, screen=True, auto_refresh=False, transient=True) as live:
        while not stop.is_set():
            state = _refresh(run, server, notes)
            size = console.size
            status = _status(interval, notes, checked.of(run, state))
            live.update(watch_screen(state, status, size.width, size.height), refresh=True)
            stop.wait(interval)
