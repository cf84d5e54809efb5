"""`goodput lint` as text (SPEC section 15): a line a finding as ruff prints one, then a summary line; or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .formats import json_text

if TYPE_CHECKING:
    from rollup.lint import Lint


def _count(number: int, what: str) -> str:
    return f"{number} {what}{'s' if number != 1 else ''}"


def summary_line(found: Lint) -> str:
    """`Found 2 errors and 1 warning in 12 files.`, or `All checks passed! (12 files)`."""
    files = _count(found.files, "file")
    if not found.findings:
        return f"All checks passed! ({files})"
    return f"Found {_count(found.errors, 'error')} and {_count(found.warnings, 'warning')} in {files}."


def lint_text(found: Lint, fmt: str) -> str:
    if fmt == "json":
        return json_text(found.json())
    lines = [f"{f.path}:{f.line}:{f.col}: {f.rule} {f.message}" for f in found.findings]
    return "".join(f"{line}\n" for line in [*lines, summary_line(found)])
