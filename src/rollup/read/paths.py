"""Turn the PATH arguments of a command into the list of files to read: files, directories, globs."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError

_GLOB_CHARS = frozenset("*?[")


def _files_under(directory: Path) -> list[Path]:
    """Every regular file below `directory`, recursively, hidden ones (`.name`) left out, in a stable order."""
    found: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(root) / f for f in sorted(files) if not f.startswith("."))
    return found


def expand_paths(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Files named by `paths`, absolute, each once, in argument order.

    A directory stands for every file below it; a pattern with `*`, `?` or `[` is a glob (`**` recurses). A path
    that names nothing, a directory with no files and a pattern that matches none are errors: a typo must not read
    as a run with no spans.
    """
    files: list[Path] = []
    for raw in paths:
        text = os.fspath(raw)
        path = Path(text).expanduser()
        if path.is_dir():
            matched = _files_under(path)
            if not matched:
                raise InputError(f"{text}: directory holds no trace files")
        elif path.is_file():
            matched = [path]
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
        files.extend(matched)
    unique: dict[Path, None] = {}
    for file in files:
        unique.setdefault(file.resolve(), None)
    return list(unique)
