"""`goodput lint` (SPEC section 15): the instrumentation mistakes that silently corrupt the rollup, found in the
source before the job runs.

The paths are files, folders (every `*.py` below, hidden folders and virtual environments left out) or globs. Each
file is parsed with `ast` (nothing imported or run), in two passes: the first collects what the rules read across
files (the methods decorated `@accepts_trace_context`), the second runs the rules (`lint.rules`). A finding on a
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

from rollup.base.errors import GoodputError

from .rules import SEVERITY, CrossFile, Linter, LintFinding, Names, SourceFacts, facts_of

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


# Past this many files, they are linted by worker processes, one per core (parsing is most of the time: ~3 ms a
# file of 170 lines, bench/lint.py); below, a pool costs more than it saves.
PARALLEL_FILES = 64


@dataclass
class _FileLint:
    """One file's part: its own findings (less those ignored), the facts it adds, its cross-file candidates."""

    findings: list[LintFinding]
    facts: SourceFacts
    cross_file: list[CrossFile]


def lint_file(path: Path) -> _FileLint:
    """The rules over one file (what depends on other files left as candidates: `CrossFile`)."""
    text, tree = _read(path)
    names = Names(tree)
    linter = Linter(str(path), tree, names)
    lines = text.splitlines()
    kept = [f for f in linter.findings if f.rule not in _ignored(lines, f.line)]
    crossing = [c for c in linter.cross_file if c.finding.rule not in _ignored(lines, c.finding.line)]
    return _FileLint(kept, facts_of(tree, names), crossing)


def lint_paths(paths: Sequence[str | os.PathLike[str]], workers: int | None = None) -> Lint:
    """SPEC section 15 over the Python files `paths` name, on `workers` processes (default: one per core when
    there are more than PARALLEL_FILES files)."""
    files = python_files(paths)
    count = workers if workers is not None else (os.cpu_count() or 1) if len(files) > PARALLEL_FILES else 1
    if count > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=count) as pool:
            parts = list(pool.map(lint_file, files, chunksize=max(1, len(files) // (8 * count))))
    else:
        parts = [lint_file(path) for path in files]
    facts = SourceFacts()
    for part in parts:
        facts.carriers |= part.facts.carriers
        facts.undecorated |= part.facts.undecorated
    findings = [f for part in parts for f in part.findings]
    findings += [c.finding for part in parts for c in part.cross_file if c.holds(facts)]
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
