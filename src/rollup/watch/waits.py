"""What a watcher waits for (SPEC section 13): the paths named that name no trace file yet, said for as long as that
holds and no longer, where a note (the tailer's, said once) would stay on the screen after the folder appeared.

A path is looked at until it first names a file; from then on the tailer follows what it names, so a refresh pays
for this only while something is awaited.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rollup.base.errors import InputError
from rollup.read.paths import expand_paths

# How the tailer's own notes of an awaited path begin (`read.tail`): the watcher drops them and says its waits itself.
WAIT_NOTE_START = "waiting for "


class Waits:
    """The awaited paths among `paths` (as the command line names them), at each `now()`."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        self._looked_at = [os.fspath(path) for path in paths]  # those that have not named a file yet

    def now(self) -> tuple[str, ...]:
        """What is awaited now, a sentence a path in the order named: `waiting for run/ to appear`, or `waiting for
        files in run/` (a folder that holds none yet). A path that names a file, or that is no file nor folder
        (the tailer's note says why), is not looked at again."""
        waits, awaited = [], []
        for text in self._looked_at:
            wait = _wait_of(text)
            if wait is not None:
                waits.append(wait)
                awaited.append(text)
        self._looked_at = awaited
        return tuple(waits)


def is_wait_note(note: str) -> bool:
    """Whether a tailer's note says that a path names no file yet (what `Waits` says while it holds)."""
    return note.startswith(WAIT_NOTE_START)


def _wait_of(text: str) -> str | None:
    """What `text` waits for; None when it names a file, or is no file nor folder."""
    try:
        expand_paths([text])
    except InputError:
        path = Path(text).expanduser()
        if path.is_dir():
            return f"{WAIT_NOTE_START}files in {text}"
        if not path.exists():
            return f"{WAIT_NOTE_START}{text} to appear"
    return None
