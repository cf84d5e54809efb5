"""The `goodput` command: parse arguments, call `rollup`, render its results (`views`), set the exit code.

The only package that knows typer (and the terminal). `shell` is what every command runs in (the app, the exit
codes, the shared options, the store, the output); the commands live by the question they answer: `report` (report,
diff), `check`, `explore` (spans, timeline, query), `ingest`. Errors become exit codes in one place
(`shell._Commands.invoke`): the library raises `GoodputError` with a message a user can act on, printed as one line
on stderr, exit 2, never with a traceback; anything else is a bug in goodput, said as such in one line, exit 3, with
its traceback under `--debug` or `GOODPUT_DEBUG=1`. DuckDB, pyarrow and Ray are imported inside the commands, so
`goodput --help` stays instant.
"""

from __future__ import annotations

import sys

from . import check, critical, explore, ingest, lint, report, watch
from .ingest import rewrite_ray_address
from .shell import app

# Registered here so `goodput --help` lists them in the order a user needs them.
for command in (
    report.report, check.check, explore.spans, report.diff, critical.critical, explore.timeline, explore.query,
    watch.watch, ingest.ingest, lint.lint,
):  # fmt: skip
    app.command()(command)

__all__ = ["app", "main", "rewrite_ray_address"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `goodput` script and of `python -m cli`."""
    args = rewrite_ray_address(list(sys.argv[1:] if argv is None else argv))
    if not any(arg.startswith("--ray") for arg in args):  # Ray's own pyarrow use wants numpy interop
        from .lean_imports import skip_numpy_for_pyarrow

        skip_numpy_for_pyarrow()
    app(args=args, prog_name="goodput")
