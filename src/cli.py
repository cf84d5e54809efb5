"""The `goodput` command: parse arguments, call `rollup`, render tables/JSON/CSV/Markdown, set the exit code.

The only module that knows typer and rich. The library raises `GoodputError` with a message a user can act on;
this module prints it as one line on stderr and exits 2, never with a traceback. DuckDB, pyarrow and Ray are
imported inside the commands, so `goodput --help` stays instant.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    name="goodput",
    help="Where the wall clock of a distributed RL training job goes, read from its OpenTelemetry trace files.",
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"


# --- shared options -----------------------------------------------------------------------------------------------

FormatOption = typer.Option(OutputFormat.table, "--format", "-f", help="Output as a table, JSON, CSV or Markdown.")
OutputOption = typer.Option(None, "--output", "-o", help="Write the output to FILE instead of standard output.")
NoCacheOption = typer.Option(False, "--no-cache", help="Parse the files afresh; neither read nor write the cache.")


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    _stderr().print(f"Error: {escape(message)}", markup=True)
    return typer.Exit(code)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn the library's GoodputError into `Error: ...` on stderr and exit 2: the one place that does."""
    from rollup.errors import GoodputError

    try:
        yield
    except GoodputError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise _fail("interrupted", 130) from None


def _print_notices(notices: Sequence[str]) -> None:
    console = _stderr()
    for notice in notices:
        console.print(escape(notice))


class _LoadProgress:
    """A rich progress bar on stderr, shown only on a terminal and only once loading has taken over a second."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __call__(self, done_bytes: int, total_bytes: int) -> None:
        if self._progress is None:
            if not sys.stderr.isatty() or time.monotonic() - self._started < 1.0:
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            self._progress = Progress(
                "reading traces", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=_stderr(), transient=True
            )
            self._task = self._progress.add_task("load", total=total_bytes)
            self._progress.start()
        self._progress.update(self._task, completed=done_bytes, total=total_bytes)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


@contextmanager
def _opened_store(paths: Sequence[str], no_cache: bool) -> Iterator[Any]:
    from rollup.store import open_store

    progress = _LoadProgress()
    try:
        store = open_store(paths, use_cache=not no_cache, progress=progress)
    finally:
        progress.close()
    _print_notices(store.notices)
    try:
        yield store
    finally:
        store.close()


# --- rendering ----------------------------------------------------------------------------------------------------


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(_jsonable(value), separators=(",", ":"))
    return str(value)


def _jsonable(value: Any) -> Any:
    """Arrow's Python values made JSON-ready: maps (lists of pairs) become objects, NaN becomes null."""
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _jsonable(v) for k, v in value}
        return [_jsonable(v) for v in value]
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def render_rows(columns: list[str], rows: list[list[Any]], fmt: OutputFormat, title: Optional[str] = None) -> str:
    """Rows of plain Python values as text in `fmt` (JSON: a list of objects, one per row)."""
    if fmt is OutputFormat.json:
        return json.dumps([{c: _jsonable(v) for c, v in zip(columns, row)} for row in rows], indent=2) + "\n"
    if fmt is OutputFormat.csv:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_cell_text(v) for v in row] for row in rows)
        return buffer.getvalue()
    if fmt is OutputFormat.markdown:
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(_cell_text(v).replace("|", "\\|") for v in row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    table = Table(title=title, show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(escape(_cell_text(v)) for v in row))
    return _rich_text(table)


def _rich_text(renderable: Any) -> str:
    console = Console(file=io.StringIO(), width=_terminal_width(), force_terminal=False, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def _terminal_width() -> int:
    return Console().width


def _emit(text: str, output: Optional[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"{output}: cannot write: {exc.strerror or exc}") from None


def _arrow_rows(table: Any) -> tuple[list[str], list[list[Any]]]:
    columns = table.column_names
    data = table.to_pydict()
    return columns, [[data[c][i] for c in columns] for i in range(table.num_rows)]


# --- commands -----------------------------------------------------------------------------------------------------


@app.command()
def query(
    paths_and_sql: list[str] = typer.Argument(..., metavar="PATH... SQL", help="Trace files, directories or globs, then the SQL."),
    fmt: OutputFormat = FormatOption,
    output: Optional[Path] = OutputOption,
    no_cache: bool = NoCacheOption,
) -> None:
    """SQL over the `spans` view: one row a span, `attributes` and `resource` as maps, promoted columns
    `bucket`, `iteration`, `span_group`, `efficiency_category`, `process`, `service`.

    Example: goodput query run/ "SELECT bucket, sum(duration_ns)/1e9 AS s FROM spans GROUP BY bucket"
    """
    if len(paths_and_sql) < 2:
        raise typer.BadParameter("give at least one PATH and then the SQL", param_hint="PATH... SQL")
    *paths, sql = paths_and_sql
    with _user_errors(), _opened_store(paths, no_cache) as store:
        columns, rows = _arrow_rows(store.sql(sql))
    _emit(render_rows(columns, rows, fmt), output)


_RAY_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[\w.\-]+:\d+)$")


@app.command()
def ingest(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    to: Optional[Path] = typer.Option(None, "--to", help="Write a Parquet dataset to DIR instead of the cache."),
    ray: bool = typer.Option(False, "--ray", help="Convert as Ray tasks: --ray [ADDRESS] (default: RAY_ADDRESS, else a local cluster)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", hidden=True),
    fmt: OutputFormat = FormatOption,
    output: Optional[Path] = OutputOption,
) -> None:
    """Convert trace files to Parquet once (on all cores, or on a Ray cluster) so every later command reads
    Parquet only. Without --to, the result is the cache the other commands look in."""
    from rollup.store import ingest as ingest_files

    with _user_errors():
        runner = None
        if ray or ray_address:
            from rollup.ray_ingest import ray_runner

            runner = ray_runner(ray_address)
        progress = _LoadProgress()
        try:
            entries = ingest_files(paths, to_dir=to, runner=runner, progress=progress)
        finally:
            progress.close()
    _print_notices([n for entry in entries for n in entry.notices])
    rows = [[str(e.path), e.spans, len(e.parts), "cached" if e.cached else "converted"] for e in entries]
    _emit(render_rows(["file", "spans", "parts", "state"], rows, fmt), output)


def _rewrite_ray_address(argv: list[str]) -> list[str]:
    """Let `--ray` take an optional address (`--ray`, `--ray auto`, `--ray=host:6379`) without eating a PATH."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--ray="):
            out += ["--ray", "--ray-address", arg.split("=", 1)[1]]
        elif arg == "--ray" and i + 1 < len(argv) and _RAY_ADDRESS.match(argv[i + 1]) and not Path(argv[i + 1]).exists():
            out += ["--ray", "--ray-address", argv[i + 1]]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point of the `goodput` script and of `python -m cli`."""
    args = _rewrite_ray_address(list(sys.argv[1:] if argv is None else argv))
    app(args=args, prog_name="goodput")


if __name__ == "__main__":
    main()
