"""Older versions of cached things are removed once a newer one has replaced them for a while.

The cache is keyed by content identity (a trace file's path, size and modification time; a set of such files), so a
file that keeps growing, re-read every few minutes while its job runs, would leave one stale copy per read. Each
family of versions (one trace file; one set of trace paths) has a small index naming its current version and the
ones it superseded, with when. A superseded version is removed at the next publish in its family once it has been
superseded for RETIRE_AFTER_S: long enough for a command that started on it to finish reading it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

RETIRE_AFTER_S = 600.0
INDEX_DIR = "versions"


def index_path(work_dir: Path, family: str) -> Path:
    """Where the index of `family` (any text naming it, e.g. a trace file's path) lives under the cache folder."""
    return work_dir / INDEX_DIR / f"{hashlib.sha256(family.encode()).hexdigest()[:32]}.json"


def publish(index: Path, current: str, remove: Callable[[str], None]) -> None:
    """Record `current` as the family's newest version and `remove` the versions retired long enough.

    Best effort, like the rest of the cache: an unreadable or unwritable index costs disk, never a command.
    """
    now = time.time()
    try:
        recorded = json.loads(index.read_text(encoding="utf-8"))
        superseded = {str(k): float(v) for k, v in recorded.get("superseded", {}).items()}
        previous = str(recorded.get("current", ""))
    except (OSError, ValueError, AttributeError, TypeError):
        superseded, previous = {}, ""
    if previous and previous != current:
        superseded.setdefault(previous, now)
    superseded.pop(current, None)  # a version can come back (a file restored to the same size and time)
    for version, since in list(superseded.items()):
        if now - since >= RETIRE_AFTER_S:
            try:
                remove(version)
            except OSError:
                continue  # kept in the index: the next publish tries again
            del superseded[version]
    staging = index.with_name(f"{index.name}.{os.getpid()}.tmp")
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps({"current": current, "superseded": superseded}), encoding="utf-8")
        os.replace(staging, index)
    except OSError:
        staging.unlink(missing_ok=True)
