"""The Parquet cache: each trace file's normalized spans kept under a key of its path, size and modification time.

An entry is a folder of Parquet parts with a manifest written last, renamed into place whole, so a half-written entry
is never read and two commands converting the same file at once both end with a good one. A set of files also gets
its lineage table (parent links cross files) beside the entries.

The cache is keyed by content identity, so a file that keeps growing, re-read every few minutes while its job runs,
would leave one stale copy per read. Each family of versions (one trace file; one set of trace paths) has a small
index naming its current version and the ones it superseded, with when. A superseded version is removed at the next
publish in its family once it has been superseded for RETIRE_AFTER_S: long enough for a command that started on it
to finish reading it. All of it is best effort: an unwritable cache costs time, never a command.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from instrument.wire import ENV_CACHE_DIR
from rollup.base.errors import GoodputError
from rollup.base.schema import SCHEMA_VERSION

DERIVED_SUFFIX = ".derived"  # beside a set's lineage table, the folder of what was worked out from it (`derived`)

MANIFEST = "manifest.json"
RETIRE_AFTER_S = 600.0
INDEX_DIR = "versions"
SPILL_DIR = "spill"
SUMMARY_SUFFIX = ".spans.json"  # beside a set's lineage table: `read_set_summary`
_CACHE_KEY = re.compile(r"[0-9a-f]{32}")
_LINEAGE_FILE = re.compile(r"[0-9a-f]{32}\.lineage-v[0-9]+\.parquet")


def default_cache_dir() -> Path:
    """`GOODPUT_CACHE_DIR`, else the user's cache directory (`$XDG_CACHE_HOME/goodput`, `~/.cache/goodput`)."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "goodput"


def cache_work_dir(cache_dir: Path | None) -> Path:
    """The folder of this schema version's entries, created when missing."""
    work_dir = (cache_dir or default_cache_dir()) / f"v{SCHEMA_VERSION}"
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GoodputError(f"{work_dir}: cannot create the cache folder: {exc.strerror or exc}") from None
    return work_dir


def spill_root(cache_dir: Path | None) -> Path:
    """Where DuckDB spills what exceeds its memory limit (`memory`): beside the entries, on the disk the user chose
    for the cache, one folder per process under it. Not versioned: nothing in it outlives its command."""
    return (cache_dir or default_cache_dir()) / SPILL_DIR


def file_cache_key(path: Path, size: int, mtime_ns: int) -> str:
    """The key of one trace file's entry: its identity as the file system sees it, and the schema version."""
    identity = f"{SCHEMA_VERSION}|{path}|{size}|{mtime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _set_key(cache_keys: Iterable[str]) -> str:
    return hashlib.sha256("|".join(sorted(cache_keys)).encode()).hexdigest()[:32]


def lineage_cache_path(work_dir: Path, cache_keys: Iterable[str], lineage_version: int) -> Path:
    """Where the lineage table of a set of files (by their entries' keys) is kept."""
    return work_dir / "sets" / f"{_set_key(cache_keys)}.lineage-v{lineage_version}.parquet"


def set_summary_path(work_dir: Path, cache_keys: Iterable[str]) -> Path:
    """Where what the store learns of a set of files from all their spans (`read_set_summary`) is kept."""
    return work_dir / "sets" / f"{_set_key(cache_keys)}{SUMMARY_SUFFIX}"


def read_set_summary(path: Path) -> tuple[int, list[str]] | None:
    """(spans exported more than once, process names shared by several processes) of a set of files, or None when
    not recorded (or unreadable: then it is worked out again)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        duplicates, shared = int(summary["duplicates"]), [str(name) for name in summary["shared"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return duplicates, shared


def write_set_summary(path: Path, duplicates: int, shared: list[str]) -> None:
    """Record `read_set_summary`'s answer, best effort (a read-only cache costs the next command that pass)."""
    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps({"duplicates": duplicates, "shared": shared}), encoding="utf-8")
        os.replace(staging, path)
    except OSError:
        staging.unlink(missing_ok=True)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """An entry's manifest with its parts as full paths, or None when the entry is missing or damaged."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    parts = [str(directory / name) for name in manifest.get("parts", [])]
    if not all(os.path.exists(p) for p in parts):
        return None
    manifest["parts"] = parts
    return manifest


def publish_entry(manifest: dict[str, Any], staging: Path, final: Path) -> list[str]:
    """Write `manifest` (the converted file's `path`, `size`, `mtime_ns`, `spans`, `notices`, and its `parts` as paths
    in `staging`) last and rename the staging folder into place, so a half-written entry is never read. Returns the
    published entry's parts as full paths: another command's entry, when it published the same file first, may be
    cut into other chunks than ours."""
    written = {**manifest, "schema_version": SCHEMA_VERSION, "parts": [os.path.basename(p) for p in manifest["parts"]]}
    (staging / MANIFEST).write_text(json.dumps(written), encoding="utf-8")
    try:
        os.replace(staging, final)
    except OSError:
        if read_manifest(final) is None:  # a damaged entry (a part or the manifest lost) is replaced ...
            shutil.rmtree(final, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.replace(staging, final)
        shutil.rmtree(staging, ignore_errors=True)  # ... a whole one, another command's, is as good as ours
        published = read_manifest(final)
        if published is None:
            raise GoodputError(f"{final}: cannot write the cache entry (GOODPUT_CACHE_DIR, or --no-cache)") from None
        parts = published["parts"]
    else:
        parts = [str(final / os.path.basename(p)) for p in manifest["parts"]]
    work_dir = final.parent

    def remove(key: str) -> None:
        if _CACHE_KEY.fullmatch(key):  # never anything but an entry folder, whatever the index says
            shutil.rmtree(work_dir / key, ignore_errors=True)

    publish_version(index_path(work_dir, str(manifest["path"])), final.name, remove)
    return parts


def retire_older_lineage(cached: Path, paths: Iterable[Path]) -> None:
    """`cached`, the lineage table of the files `paths`, was just written: the same files' older ones can retire."""
    family = "lineage:" + "\n".join(sorted(str(path) for path in paths))

    def remove(name: str) -> None:
        if _LINEAGE_FILE.fullmatch(name):
            (cached.parent / name).unlink(missing_ok=True)
            (cached.parent / f"{name.split('.', 1)[0]}{SUMMARY_SUFFIX}").unlink(missing_ok=True)
            shutil.rmtree(cached.parent / f"{name}{DERIVED_SUFFIX}", ignore_errors=True)  # what was worked out of it

    publish_version(index_path(cached.parent.parent, family), cached.name, remove)


# --- versions ---------------------------------------------------------------------------------------------------


def index_path(work_dir: Path, family: str) -> Path:
    """Where the index of `family` (any text naming it, e.g. a trace file's path) lives under the cache folder."""
    return work_dir / INDEX_DIR / f"{hashlib.sha256(family.encode()).hexdigest()[:32]}.json"


def publish_version(index: Path, current: str, remove: Callable[[str], None]) -> None:
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
