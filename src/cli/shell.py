"""What every `goodput` command runs in: the typer app, the exit codes, the shared options, the store it opens,
where its output goes.

Errors become exit
codes in one place (`_Commands.invoke`): the library raises `GoodputError` with a message a user can act on, printed
as one line on stderr, exit 2, never with a traceback; anything else is a bug in goodput, said as such in one line,
exit 3, with its traceback under `--debug` or `GOODPUT_DEBUG=1`. DuckDB, pyarrow and Ray are imported inside the
commands, so `goodput --help` stays instant.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from .views.formats import OutputFormat, TabularFormat, format_for_output, tabular_format
from .views.notes import internal_error_text, iteration_range, no_iterations_note, version_text
from .views.progress import LoadProgress

if TYPE_CHECKING:
    from rollup import RayRunner, SpanStore
    from rollup.accounting import GpuOptions

_Made = TypeVar("_Made")

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
            raise fail("interrupted", 130) from None
        except Exception as exc:
            from rollup import GoodputError

            if isinstance(exc, GoodputError):
                raise fail(str(exc)) from None
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
ReportFormatOption = typer.Option(
    None,
    "--format",
    "-f",
    help="Output as a table, JSON, CSV, Markdown, a self-contained HTML page or JSON Lines (default: from "
    "--output's extension, else a table).",
    show_default=False,
)
OutputOption = typer.Option(
    None,
    "--output",
    "-o",
    help="Write the output to FILE instead of standard output; .json, .csv and .md choose the format.",
)
ReportOutputOption = typer.Option(
    None,
    "--output",
    "-o",
    help="Write the output to FILE instead of standard output; .json, .csv, .md, .html and .jsonl choose the format.",
)
NoCacheOption = typer.Option(False, "--no-cache", help="Parse the files afresh; neither read nor write the cache.")
KeepGoingOption = typer.Option(
    False,
    "--keep-going",
    help="Skip a file that cannot be read (its one-line error becomes a warning); exit 2 only when none can be.",
)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    stderr().print(f"Error: {escape(message)}", markup=True)
    return typer.Exit(code)


def _internal_error(exc: BaseException, *, debug: bool) -> typer.Exit:
    """A bug in goodput (not in the traces): one line saying so, exit 3; the traceback first when debugging."""
    if debug:
        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.flush()
    return fail(internal_error_text(exc, debug=debug), EXIT_INTERNAL)


def output_format(
    fmt: OutputFormat | TabularFormat | None, output: Path | None, *, report: bool = False
) -> OutputFormat:
    """`--format` when given; else the format `--output`'s extension names (SPEC section 6); else a table. The HTML
    page and JSON Lines are the report's alone (`report`): another command refuses an `--output` naming them, exit
    2 (its `--format` does not offer them)."""
    chosen = OutputFormat(fmt.value) if fmt is not None else format_for_output(output)
    if report:
        return chosen
    try:
        return tabular_format(chosen)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--format" if fmt is not None else "--output") from None


def print_notices(notices: Sequence[str]) -> None:
    for notice in notices:
        stderr().print(escape(notice))


@contextmanager
def opened_store(
    paths: Sequence[str],
    no_cache: bool,
    *,
    accounting: bool = True,
    memory_share: float = 1.0,
    keep_going: bool = False,
) -> Iterator[SpanStore]:
    """The store for a command; `accounting`: the command reads only what the accounting reads (not `query`);
    `memory_share`: of GOODPUT_MEMORY_LIMIT, for stores that work at the same time (a diff's two sides: 0.5 each);
    `keep_going`: skip the files that cannot be read (`--keep-going`)."""
    from rollup import open_store

    progress = LoadProgress(stderr())
    try:
        store = open_store(
            paths, use_cache=not no_cache, progress=progress, accounting=accounting, memory_share=memory_share,
            keep_going=keep_going,
        )  # fmt: skip
    finally:
        progress.close()
    print_notices(store.notices)
    with store:  # DuckDB out of memory under GOODPUT_MEMORY_LIMIT is said as such (exit 2), not as a bug
        yield store


def terminal_width() -> int:
    """The terminal's width on a terminal; wide enough for a whole report row when writing to a pipe or file."""
    return Console().width if sys.stdout.isatty() else 200


def emit(text: str | Iterable[str], output: Path | None) -> None:
    """Write the command's output, whole or in pieces (a report's JSON is made a row at a time as it is written)."""
    pieces = [text] if isinstance(text, str) else text
    if output is None:
        try:
            for piece in pieces:
                sys.stdout.write(piece)
            sys.stdout.flush()
        except BrokenPipeError:  # `goodput ... | head` has read enough: stop quietly, the exit code unchanged
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the flush at exit has nowhere to fail
        return
    try:
        with output.open("w", encoding="utf-8") as out:
            for piece in pieces:
                out.write(piece)
    except OSError as exc:
        raise fail(f"{output}: cannot write: {exc.strerror or exc}") from None


def selected_iterations(iteration: int | None, iterations: str | None) -> tuple[int, int] | None:
    """`--iteration N` or `--iterations A:B` (inclusive; either end may be left open) as a range, or None."""
    if iteration is not None and iterations is not None:
        raise typer.BadParameter("give --iteration or --iterations, not both")
    if iteration is not None:
        return iteration, iteration
    try:
        selected = iteration_range(iterations) if iterations is not None else None
    except ValueError:
        raise typer.BadParameter(f"expected A:B, got {iterations!r}", param_hint="--iterations") from None
    if selected is not None and selected[0] > selected[1]:
        low, high = selected
        raise typer.BadParameter(
            f"{iterations!r} is reversed: it starts after it ends (did you mean {high}:{low}?)",
            param_hint="--iterations",
        )
    return selected


IterationOption = typer.Option(None, "--iteration", "-i", help="Only iteration N.")
IterationsOption = typer.Option(None, "--iterations", help="Only iterations A to B inclusive (A:B, A:, :B).")
GpusOption = typer.Option(
    [],
    "--gpus",
    metavar="FLEET=N",
    help="The fleet holds N GPUs of its own, whatever its resources say (for traces written without GPU "
    "attributes, NeMo-RL's among them); repeatable.",
)
PlaceOption = typer.Option(
    [],
    "--place",
    metavar="NAME=FLEET",
    help="Spans of this name or rl.span_group occupy FLEET's GPUs too (work the driver records for the fleet); "
    "repeatable.",
)


def gpu_options(gpus: Sequence[str], place: Sequence[str]) -> GpuOptions:
    """`--gpus` and `--place` checked (exit 2 on a bad one) before a file is read."""
    from rollup.accounting import GpuOptions

    return checked(lambda: GpuOptions(tuple(gpus), tuple(place)))


LastOption = typer.Option(
    None,
    "--last",
    metavar="DURATION",
    help="Only the last DURATION of trace time (90s, 10m, 2h), up to the latest span end read.",
)


def through_last(store: Any, last_ns: int | None) -> Any:
    """The store as `--last` shows it (`rollup.LastStretch`: the spans sharing time with the last stretch), or as it
    is without it."""
    if last_ns is None:
        return store
    from rollup.report import LastStretch

    return LastStretch(store, last_ns)


def last_duration(text: str | None) -> int | None:
    """`--last`'s value in nanoseconds (None without it); exit 2 on a bad one, before a file is read."""
    if text is None:
        return None
    from rollup.report import parse_duration

    return checked(lambda: parse_duration(text))


AttemptOption = typer.Option(
    None, "--attempt", help="Read one attempt only: its run id (goodput.run.id, else nemo.run.id), or 'latest'."
)


def nothing_note(store: SpanStore, missing: str | None) -> str:
    """Why a command has nothing to show: the iterations asked for hold none of the traces' (`missing`, the
    result's, naming those they hold), else what was read (no span, or none of an RL job)."""
    return f"note: {missing}" if missing else no_iterations_note(store.read_summary())


def checked(make: Callable[[], _Made]) -> _Made:
    """`make()`, an OptionError of the library's (a bad option value) said as typer says a bad option: exit 2."""
    from rollup import OptionError

    try:
        return make()
    except OptionError as error:
        raise typer.BadParameter(error.message, param_hint=error.option) from None


def runner(ray: bool, address: str | None) -> AbstractContextManager[RayRunner | None]:
    """Where the command's accounting runs: None (in this process), or `--ray [ADDRESS]`'s Ray runner, connected for
    the whole command (a report and its page's checks share one cluster)."""
    if not (ray or address):
        return nullcontext()
    from rollup import RayRunner

    return checked(lambda: RayRunner(address))
