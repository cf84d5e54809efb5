"""`goodput ingest`: convert trace files to Parquet once, on all cores or as Ray tasks; `--ray [ADDRESS]`."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from . import shell
from .views.formats import TabularFormat, render_rows
from .views.progress import LoadProgress

_RAY_ADDRESS = re.compile(r"^(auto|local|ray://\S+|[\w.\-]+:\d+)$")


def ingest(
    paths: list[str] = typer.Argument(..., metavar="PATH...", help="Trace files, directories or globs."),
    to: Path | None = typer.Option(None, "--to", help="Write a Parquet dataset to DIR instead of the cache."),
    ray: bool = typer.Option(
        False, "--ray", help="Convert as Ray tasks: --ray [ADDRESS] (default: RAY_ADDRESS, else a local cluster)."
    ),
    ray_address: str | None = typer.Option(None, "--ray-address", hidden=True),
    fmt: TabularFormat | None = shell.FormatOption,
    output: Path | None = shell.OutputOption,
    keep_going: bool = shell.KeepGoingOption,
) -> None:
    """Convert trace files to Parquet once, locally or on a Ray cluster.

    Every later command on the same files then reads Parquet only. Without --to the result is the cache the
    other commands look in; with --to DIR it is a Parquet dataset that they read as a PATH.
    """
    chosen = shell.output_format(fmt, output)
    from rollup import ingest as ingest_files

    runner, max_chunk_bytes = None, None
    if ray or ray_address:
        from rollup import RayRunner

        runner = RayRunner(ray_address)
        max_chunk_bytes = runner.max_chunk_bytes
    progress = LoadProgress(shell.stderr())
    try:
        entries = ingest_files(
            paths, to_dir=to, runner=runner, progress=progress, max_chunk_bytes=max_chunk_bytes, keep_going=keep_going
        )
    finally:
        progress.close()
    shell.print_notices([n for entry in entries for n in entry.notices])
    rows = [[str(e.path), e.spans, len(e.parts), "cached" if e.cached else "converted"] for e in entries]
    shell.emit(render_rows(["file", "spans", "parts", "state"], rows, chosen, width=shell.terminal_width()), output)


def rewrite_ray_address(argv: list[str]) -> list[str]:
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
