"""What a command works out from a cached set of files, kept beside that set's lineage table for the next command.

A report's heaviest steps (the charge's sweep over every bucketed span, the kinds of its windows) are pure functions
of the set of files and of the question (the attempt, the stretches of time, the precedence). When the spans are the
cache's (`SpanSet.files` names the set's lineage table, `lineage.ensure_lineage`), their answers are kept as Arrow
IPC files in a folder beside that table, named by a digest of the question, and a re-run on the same files reads
them back instead of sweeping again. The folder retires with its lineage table (`cache.retire_older_lineage`); a
file that cannot be read is worked out again, and one that cannot be written costs the next command the work,
never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollup.base.arrays import int64_array, int64_column
from rollup.read.cache import DERIVED_SUFFIX

if TYPE_CHECKING:
    from .spanset import SpanSet

DERIVED_VERSION = 3  # part of every digest: bump it whenever what is kept, or how it is worked out, changes
_LENGTHS = "__lengths__"  # in a file's extras: each column's own length (the table pads the shorter ones with 0)

Columns = dict[str, array]


def derived_folder(lineage: Path) -> Path:
    """The folder of what is worked out from the set whose lineage table is `lineage`."""
    return lineage.with_name(lineage.name + DERIVED_SUFFIX)


def _path_for(spans: SpanSet, what: str, key: Sequence[bytes | str]) -> Path | None:
    """Where the answer to `what` with `key` is kept for `spans`, or None when they are not the cache's."""
    if len(spans.files) != 1 or not spans.files[0].endswith(".parquet"):
        return None
    digest = hashlib.sha256(repr((DERIVED_VERSION, what, spans.run_id)).encode())
    for part in key:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "little") + data)
    return derived_folder(Path(spans.files[0])) / f"{what}-{digest.hexdigest()[:32]}.arrow"


def kept_columns(
    spans: SpanSet, what: str, key: Sequence[bytes | str], make: Callable[[], tuple[Columns, dict[str, Any]]]
) -> tuple[Columns, dict[str, Any]]:
    """`make()`'s columns of 64-bit integers (of any lengths) and its small JSON-able extras, read back from the
    cache when `spans` are the cache's and the same question was answered before, else worked out and kept."""
    path = _path_for(spans, what, key)
    if path is not None:
        found = _read(path)
        if found is not None:
            return found
    columns, extras = make()
    if path is not None:
        _write(path, columns, extras)
    return columns, extras


def stretches_key(starts: array, ends: array) -> bytes:
    """The bytes that name a sequence of stretches of time in a key."""
    return bytes(memoryview(starts).cast("B")) + b"|" + bytes(memoryview(ends).cast("B"))


def _read(path: Path) -> tuple[Columns, dict[str, Any]] | None:
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
        extras = json.loads((table.schema.metadata or {}).get(b"extras", b"{}"))
        lengths = extras.pop(_LENGTHS)
        return {name: int64_column(table, name)[: lengths[name]] for name in table.column_names}, extras
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None


def _write(path: Path, columns: Columns, extras: dict[str, Any]) -> None:
    import pyarrow as pa

    staging = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        longest = max((len(column) for column in columns.values()), default=0)
        padded = {name: column + array("q", bytes(8 * (longest - len(column)))) for name, column in columns.items()}
        table = pa.table({name: int64_array(column) for name, column in padded.items()})
        lengths = {name: len(column) for name, column in columns.items()}
        table = table.replace_schema_metadata({"extras": json.dumps({**extras, _LENGTHS: lengths})})
        with pa.OSFile(str(staging), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(staging, path)
    except (OSError, pa.ArrowException):
        staging.unlink(missing_ok=True)
