"""Turn the PATH arguments of a command into the list of files to read: files, directories, globs."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rollup.base.errors import InputError

_GLOB_CHARS = frozenset("*?[")


def _files_under(directory: Path) -> list[Path]:
    """Every regular file below `directory`, recursively, hidden ones (`.name`) left out, in a stable order."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(root) / f for f in sorted(files) if not f.startswith("."))
    return found


class InputFile(NamedTuple):
    """A file to read, and whether it was named as such on the command line (`named`) or found by listing a
    directory or matching a glob: a file found that way that is not a trace is skipped with a note (a README beside
    the traces), a file named directly is an error."""

    path: Path
    named: bool


def expand_paths(paths: Sequence[str | os.PathLike[str]]) -> list[InputFile]:
    """Files named by `paths`, absolute, each once, in argument order.

    A directory stands for every file below it; a pattern with `*`, `?` or `[` is a glob (`**` recurses). A path
    that names nothing, a directory with no files and a pattern that matches none are errors: a typo must not read
    as a run with no spans. A file both named and found counts as named.
    """
    files: list[InputFile] = []
    for raw in paths:
        text = os.fspath(raw)
        path = Path(text).expanduser()
        if path.is_dir():
            matched = _files_under(path)
            if not matched:
                raise InputError(f"{text}: directory holds no trace files")
        elif path.is_file():
            files.append(InputFile(path, named=True))
            continue
        elif _GLOB_CHARS & set(text):
            matched = []
            for hit in sorted(glob.glob(os.path.expanduser(text), recursive=True)):
                hit_path = Path(hit)
                matched.extend(_files_under(hit_path) if hit_path.is_dir() else [hit_path])
            if not matched:
                raise InputError(f"{text}: no file matches this pattern")
        elif path.exists():
            raise InputError(f"{text}: not a regular file")
        else:
            raise InputError(f"{text}: no such file or directory")
        files.extend(InputFile(file, named=False) for file in matched)
    unique: dict[Path, bool] = {}
    for file, named in files:
        resolved = file.resolve()
        unique[resolved] = unique.get(resolved, False) or named
    return [InputFile(path, named) for path, named in unique.items()]
