"""`goodput lint` (SPEC section 15): the instrumentation mistakes that silently corrupt the rollup, found in the
source before the job runs.

The paths are files, folders (every `*.py` below, hidden folders and virtual environments left out) or globs. Each
file is parsed with `ast` (nothing imported or run), in two passes: the first collects what the rules read across
files (the methods decorated `@accepts_trace_context`), the second runs the rules (`lint_rules`). A finding on a
line ending in `# goodput: ignore[RULE]` (several rules comma-separated) is left out. A path that does not exist,
or a file that does not parse, is a GoodputError naming it (and the line), exit 2.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import GoodputError
from .lint_rules import SEVERITY, Linter, LintFinding, Names, SourceFacts, facts_of

# The comment that silences a rule on its line: `# goodput: ignore[nested-bucket]`, `ignore[a, b]`.
IGNORE = re.compile(r"#\s*goodput:\s*ignore\[([a-z, -]+)\]")
# Folders a walk of a folder does not enter: hidden ones, virtual environments, caches.
_SKIPPED_FOLDERS = {"__pycache__", "node_modules", "site-packages", "venv", ".venv"}


@dataclass(frozen=True)
class Lint:
    """What `goodput lint` found: the findings sorted by path, line and column, and the files read."""

    findings: list[LintFinding]
    files: int

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == "warning")

    def summary(self) -> dict[str, int]:
        return {"files": self.files, "errors": self.errors, "warnings": self.warnings}

    def json(self) -> dict[str, object]:
        """SPEC section 15's object."""
        return {"findings": [f.json() for f in self.findings], "summary": self.summary()}


def python_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The Python files `paths` name, each once, in the order given (a folder's sorted); a path that names nothing
    is a GoodputError."""
    found: dict[Path, None] = {}
    for given in paths:
        text = os.fspath(given)
        matches = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise GoodputError(f"{text}: no such file or folder")
        for match in matches:
            path = Path(match)
            if path.is_dir():
                found.update(dict.fromkeys(_walk(path)))
            elif glob.has_magic(text) and path.suffix != ".py":
                continue  # a glob matching other files: their Python ones count
            else:
                found[path] = None
    return list(found)


def _walk(folder: Path) -> Iterable[Path]:
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith(".") and f not in _SKIPPED_FOLDERS)
        yield from (Path(root) / name for name in sorted(files) if name.endswith(".py"))


def _read(path: Path) -> tuple[str, ast.Module]:
    try:
        with tokenize.open(path) as source:  # the encoding a `# coding:` line or a BOM says
            text = source.read()
    except (OSError, SyntaxError, UnicodeDecodeError) as error:
        raise GoodputError(f"{path}: cannot read it as Python source: {error}") from None
    try:
        return text, ast.parse(text, filename=str(path))
    except SyntaxError as error:
        where = f"line {error.lineno}" + (f", column {error.offset}" if error.offset else "")
        raise GoodputError(f"{path}: {where}: does not parse: {error.msg}") from None
    except ValueError as error:  # a NUL byte
        raise GoodputError(f"{path}: does not parse: {error}") from None


def lint_paths(paths: Sequence[str | os.PathLike[str]]) -> Lint:
    """SPEC section 15 over the Python files `paths` name."""
    files = python_files(paths)
    parsed = []
    facts = SourceFacts()
    for path in files:
        text, tree = _read(path)
        names = Names(tree)
        of_file = facts_of(tree, names)
        facts.carriers |= of_file.carriers
        facts.undecorated |= of_file.undecorated
        parsed.append((path, text, tree, names))
    findings: list[LintFinding] = []
    for path, text, tree, names in parsed:
        lines = text.splitlines()
        for finding in Linter(str(path), tree, names, facts).findings:
            if finding.rule not in _ignored(lines, finding.line):
                findings.append(finding)
    findings = sorted(set(findings), key=lambda f: (f.path, f.line, f.col, f.rule))
    return Lint(findings, len(files))


def _ignored(lines: list[str], line: int) -> set[str]:
    """The rules `# goodput: ignore[...]` silences on `line` (1-based)."""
    if not 1 <= line <= len(lines):
        return set()
    match = IGNORE.search(lines[line - 1])
    if match is None:
        return set()
    return {rule.strip() for rule in match.group(1).split(",")} & set(SEVERITY)
