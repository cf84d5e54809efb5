"""`goodput lint`: the instrumentation mistakes that corrupt the rollup, found in the source before the job runs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from . import shell
from .views.lint import lint_text


class LintFormat(str, Enum):
    """`--format` of `lint`: ruff's lines, or SPEC section 15's JSON object."""

    text = "text"
    json = "json"


def lint(
    paths: list[str] = typer.Argument(
        ..., metavar="PATH...", help="Python files, folders (read recursively) or globs."
    ),
    fmt: LintFormat = typer.Option(LintFormat.text, "--format", "-f", help="Lines as ruff prints them, or JSON."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the findings to FILE."),
) -> None:
    """Find the instrumentation mistakes in Python source; exit 1 when one is an error.

    Read with Python's own parser, nothing imported or run. Errors: nested-bucket (a bucketed span opened inside
    another: the same seconds count twice), leaf-at-umbrella, undispatched-carrier (a method that takes a trace
    context called with a bare .remote()). Warnings: umbrella-at-leaf, dispatch-undecorated,
    unended-efficiency-span, unknown-group. A call counts by the name it is imported as from instrument or
    nemo_rl.telemetry.instrumentation; `# goodput: ignore[RULE]` at the end of a line silences that rule there.
    Exit 2 for a path that does not exist or a file that does not parse.
    """
    from rollup.lint import lint_paths

    found = lint_paths(paths)
    shell.emit(lint_text(found, fmt.value), output)
    if found.errors:
        raise typer.Exit(shell.EXIT_FINDINGS)
