"""The span store: trace files in, one deduplicated `spans` table in DuckDB out, with a Parquet cache in between.

Every command reads through here. Each input file is converted once into Parquet parts of the normalized schema
(`schema.SPAN_SCHEMA`), keyed by the file's path, size and modification time; the next command on the same files
reads the parts and skips parsing. Conversion runs chunk by chunk on all cores (or on a Ray cluster, see
`ray_ingest`), so memory is bounded by a chunk's batch, not by the file.

An uncached load for the accounting alone (`report`, `check`, `spans` with `--no-cache`) converts only the columns
the accounting reads, and lets DuckDB read plain JSON Lines files itself, straight into one table (`fast_json`),
handing any file it is not sure of back to the conversion above.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pyarrow as pa
import pyarrow.parquet as pq

from . import cache_versions
from .convert import Chunk, ChunkResult, convert_chunk, plan_chunks
from .errors import GoodputError, TraceFormatError
from .lineage import LINEAGE_VERSION, ensure_lineage
from .schema import SCHEMA_VERSION, SPAN_SCHEMA, accounting_only
from .sniff import compression_of, sniff_format
from .sources import expand_paths

MANIFEST = "manifest.json"
_CACHE_KEY = re.compile(r"[0-9a-f]{32}")
_LINEAGE_FILE = re.compile(r"[0-9a-f]{32}\.lineage-v[0-9]+\.parquet")
# Below this many bytes in all and this many files or chunks, converting in this process beats starting workers;
# past it, the per-file cost (~10-20 ms) of many small files is worth spreading over the cores.
IN_PROCESS_BYTES = 8 << 20
IN_PROCESS_JOBS = 16
MIN_CHUNK_BYTES = 4 << 20
DIRECT_TABLE = "direct_spans"  # where `fast_json` puts the spans of the JSON Lines files DuckDB reads itself

ConvertJob = tuple[Chunk, str, pa.Schema]  # a chunk, the Parquet part it becomes, the columns it keeps
Runner = Callable[[Sequence[ConvertJob]], Iterator[ChunkResult]]
Progress = Callable[[int, int], None]


def default_cache_dir() -> Path:
    """`GOODPUT_CACHE_DIR`, else the user's cache directory (`$XDG_CACHE_HOME/goodput`, `~/.cache/goodput`)."""
    explicit = os.environ.get("GOODPUT_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "goodput"


@dataclass
class FileEntry:
    """One input file and where its normalized spans live."""

    path: Path
    size: int
    mtime_ns: int
    parts: list[str] = field(default_factory=list)
    spans: int = 0
    notices: list[str] = field(default_factory=list)
    cached: bool = False
    tables: list[str] = field(default_factory=list)  # DuckDB tables holding its spans, when `fast_json` read it

    @property
    def cache_key(self) -> str:
        identity = f"{SCHEMA_VERSION}|{self.path}|{self.size}|{self.mtime_ns}"
        return hashlib.sha256(identity.encode()).hexdigest()[:32]


def _stat_entry(path: Path) -> FileEntry:
    try:
        stat = path.stat()
    except OSError as exc:
        raise GoodputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not os.access(path, os.R_OK):
        raise GoodputError(f"{path}: cannot read: permission denied")
    return FileEntry(path=path, size=stat.st_size, mtime_ns=stat.st_mtime_ns)


def _read_manifest(directory: Path) -> Optional[dict]:
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    parts = [str(directory / name) for name in manifest.get("parts", [])]
    if not all(os.path.exists(p) for p in parts):
        return None
    manifest["parts"] = parts
    return manifest


def _publish(entry: FileEntry, staging: Path, final: Path) -> None:
    """Write the manifest last and rename the staging folder into place, so a half-written entry is never read."""
    manifest = {
        "path": str(entry.path),
        "size": entry.size,
        "mtime_ns": entry.mtime_ns,
        "schema_version": SCHEMA_VERSION,
        "spans": entry.spans,
        "notices": entry.notices,
        "parts": [os.path.basename(p) for p in entry.parts],
    }
    (staging / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    try:
        os.replace(staging, final)
    except OSError:
        if _read_manifest(final) is None:  # a damaged entry (a part or the manifest lost) is replaced ...
            shutil.rmtree(final, ignore_errors=True)
            try:
                os.replace(staging, final)
            except OSError:
                pass
        shutil.rmtree(staging, ignore_errors=True)  # ... a whole one, another command's, is as good as ours
        published = _read_manifest(final)
        if published is None:
            raise GoodputError(f"{final}: cannot write the cache entry (GOODPUT_CACHE_DIR, or --no-cache)") from None
        entry.parts = published["parts"]  # theirs may be cut into other chunks than ours
    else:
        entry.parts = [str(final / os.path.basename(p)) for p in entry.parts]
    work_dir = final.parent

    def remove(key: str) -> None:
        if _CACHE_KEY.fullmatch(key):  # never anything but an entry folder, whatever the index says
            shutil.rmtree(work_dir / key, ignore_errors=True)

    cache_versions.publish(cache_versions.index_path(work_dir, str(entry.path)), entry.cache_key, remove)


def run_in_processes(jobs: Sequence[ConvertJob], workers: Optional[int] = None) -> Iterator[ChunkResult]:
    """Convert chunks on all cores; small work stays in this process."""
    workers = workers or os.cpu_count() or 1
    if workers <= 1 or len(jobs) <= 1:
        for chunk, out_path, schema in jobs:
            yield convert_chunk(chunk, out_path, schema=schema)
        return
    # fork is cheap and safe while this process runs no other thread; otherwise a forkserver, which is safe anyway.
    method = "fork" if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods() else None
    context = multiprocessing.get_context(method or "forkserver")
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
        futures = [pool.submit(convert_chunk, chunk, out_path, schema=schema) for chunk, out_path, schema in jobs]
        try:
            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


@dataclass
class Plan:
    """What a load has to do: the entries already cached and the chunks still to convert."""

    entries: list[FileEntry]
    jobs: list[ConvertJob]
    staging: dict[Path, Path]  # entry path -> folder its parts are being written to
    total_bytes: int
    direct: list[FileEntry] = field(default_factory=list)  # JSON Lines files DuckDB is to read itself first
    done_bytes: int = 0  # of total_bytes, read before the jobs run


def plan_load(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool,
    work_dir: Path,
    workers: int,
    schema: pa.Schema = SPAN_SCHEMA,
    direct_json: bool = False,
    max_chunk_bytes: Optional[int] = None,
) -> Plan:
    """Expand the paths, reuse what the cache holds, and cut the rest into conversion jobs keeping `schema`'s
    columns (always all of them when they go to the cache). With `direct_json`, JSON Lines files are set aside for
    `load_direct` instead. Chunks are sized for `workers`, and at most `max_chunk_bytes` when given."""
    schema = SPAN_SCHEMA if use_cache else schema
    files = expand_paths(paths)
    entries = [_stat_entry(path) for path in files]
    jobs: list[ConvertJob] = []
    staging: dict[Path, Path] = {}
    pending: list[tuple[FileEntry, str]] = []  # with the format sniffed once, here
    for entry in entries:
        if use_cache:
            manifest = _read_manifest(work_dir / entry.cache_key)
            if manifest is not None:
                entry.parts, entry.spans, entry.notices = manifest["parts"], manifest["spans"], manifest["notices"]
                entry.cached = True
                continue
        kind = sniff_format(str(entry.path)) if entry.size else "empty"
        if kind == "parquet":
            _check_parquet_spans(entry)
            continue
        pending.append((entry, kind))
    to_duckdb = [direct_json and kind == "json-lines" for _, kind in pending]
    direct = [entry for (entry, _), chosen in zip(pending, to_duckdb) if chosen]
    pending = [item for item, chosen in zip(pending, to_duckdb) if not chosen]
    converted = sum(e.size for e, _ in pending)
    plan = Plan(entries, jobs, staging, total_bytes=converted + sum(e.size for e in direct), direct=direct)
    target = _chunk_target(converted, workers, max_chunk_bytes)
    for entry, kind in pending:
        _add_jobs(plan, entry, kind, target, work_dir, schema)
    return plan


def _chunk_target(total_bytes: int, workers: int, max_chunk_bytes: Optional[int] = None) -> int:
    """Chunks of about this size give every worker two, so a slow one does not hold up the end."""
    target = max(MIN_CHUNK_BYTES, total_bytes // max(1, workers * 2))
    return min(target, max_chunk_bytes) if max_chunk_bytes else target


def _add_jobs(plan: Plan, entry: FileEntry, kind: str, target: int, work_dir: Path, schema: pa.Schema) -> None:
    folder = work_dir / f"{entry.cache_key}.staging-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    plan.staging[entry.path] = folder
    for chunk in plan_chunks(str(entry.path), target_bytes=target, kind=kind):
        plan.jobs.append((chunk, str(folder / f"part-{chunk.index:05d}.parquet"), schema))


def load_direct(
    plan: Plan, connection, *, work_dir: Path, workers: int, schema: pa.Schema, progress: Optional[Progress]
) -> None:
    """Let DuckDB read the plan's JSON Lines files itself (`fast_json`), all into one table of `connection`
    (DIRECT_TABLE), in one query per kind of compression; a file it gives back becomes conversion jobs for the
    careful reader."""
    from . import fast_json

    by_compression: dict[Optional[str], list[FileEntry]] = {}
    for entry in plan.direct:
        by_compression.setdefault(compression_of(str(entry.path)), []).append(entry)
    for compression, entries in by_compression.items():
        size = sum(entry.size for entry in entries)

        def on_progress(fraction: float, before: int = plan.done_bytes, size: int = size) -> None:
            if progress is not None:
                progress(before + int(fraction * size), plan.total_bytes)

        paths = [str(entry.path) for entry in entries]
        claimed = fast_json.load_json_lines(connection, paths, compression, DIRECT_TABLE, on_progress)
        plan.done_bytes += size
        for entry in entries:
            if str(entry.path) in claimed:
                entry.tables, entry.spans = [DIRECT_TABLE], claimed[str(entry.path)]
            else:
                plan.total_bytes += entry.size
                _add_jobs(plan, entry, "json-lines", _chunk_target(entry.size, workers), work_dir, schema)
        if progress is not None:
            progress(plan.done_bytes, plan.total_bytes)


def _check_parquet_spans(entry: FileEntry) -> None:
    """A Parquet file among the inputs (an `ingest --to` dataset) is used as it is, if it holds goodput spans."""
    try:
        schema = pq.read_schema(entry.path)
        rows = pq.read_metadata(entry.path).num_rows
    except Exception as exc:
        raise TraceFormatError(str(entry.path), "", f"unreadable Parquet file ({exc})") from None
    missing = [name for name in SPAN_SCHEMA.names if name not in schema.names]
    if missing:
        raise TraceFormatError(str(entry.path), "", f"a Parquet file that is not a goodput span table (no {missing[0]})")
    entry.parts, entry.spans = [str(entry.path)], rows


def execute_plan(
    plan: Plan, *, use_cache: bool, work_dir: Path, runner: Runner, progress: Optional[Progress] = None
) -> None:
    """Run the plan's jobs, then publish each converted file (to the cache, or in place for an uncached load)."""
    by_path = {entry.path: entry for entry in plan.entries}
    part_of = {(chunk.path, chunk.index): out_path for chunk, out_path, _ in plan.jobs}
    done_bytes = plan.done_bytes
    results: dict[Path, list[ChunkResult]] = {path: [] for path in plan.staging}
    try:
        for result in runner(plan.jobs):
            results[Path(result.chunk.path)].append(result)
            done_bytes += _chunk_bytes(result.chunk, by_path[Path(result.chunk.path)].size)
            if progress is not None:
                progress(min(done_bytes, plan.total_bytes), plan.total_bytes)
    except BaseException:
        for folder in plan.staging.values():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    for path, folder in plan.staging.items():
        entry = by_path[path]
        ordered = sorted(results[path], key=lambda r: r.chunk.index)
        entry.spans = sum(r.spans for r in ordered)
        entry.notices = [n for r in ordered for n in r.notices]
        entry.parts = [part_of[(r.chunk.path, r.chunk.index)] for r in ordered if r.spans]
        if use_cache:
            _publish(entry, folder, work_dir / entry.cache_key)


def _chunk_bytes(chunk: Chunk, file_size: int) -> int:
    return (file_size if chunk.end < 0 else chunk.end) - chunk.start


class SpanStore:
    """An open DuckDB connection whose `spans` table holds every span of the loaded files, each span once."""

    def __init__(
        self,
        connection,
        entries: list[FileEntry],
        temp_dir: Optional[Path] = None,
        lineage_cache: Optional[Path] = None,
        nodes_table: Optional[str] = None,
    ) -> None:
        self.connection = connection
        self.entries = entries
        self._temp_dir = temp_dir  # an uncached load's parts, which the view reads until close()
        self.lineage_cache = lineage_cache  # where `lineage.ensure_lineage` keeps its table for this set of files
        self.nodes_table = nodes_table  # a table `lineage.build_lineage` may walk as it is (see there)

    def lineage_cached(self) -> None:
        """`lineage.ensure_lineage` wrote `lineage_cache`: the same files' older lineage tables can retire."""
        cached = self.lineage_cache
        if cached is None:
            return
        family = "lineage:" + "\n".join(sorted(str(entry.path) for entry in self.entries))

        def remove(name: str) -> None:
            if _LINEAGE_FILE.fullmatch(name):
                (cached.parent / name).unlink(missing_ok=True)

        cache_versions.publish(cache_versions.index_path(cached.parent.parent, family), cached.name, remove)

    @property
    def notices(self) -> list[str]:
        return [n for entry in self.entries for n in entry.notices]

    def sql(self, query: str, params: Optional[Iterable | dict] = None):
        """Run `query` and return an Arrow table; a DuckDB error becomes a GoodputError naming the query's problem."""
        import duckdb

        if params is not None and not isinstance(params, dict):
            params = list(params)
        try:
            return self.connection.sql(query, params=params).to_arrow_table()
        except duckdb.Error as exc:
            raise GoodputError(f"SQL: {str(exc).splitlines()[0]}") from None

    def close(self) -> None:
        self.connection.close()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> "SpanStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _create_spans_view(connection, parts: list[str], schema: pa.Schema, tables: Sequence[str] = ()) -> bool:
    """`spans`: every span of the parts (and of the tables `fast_json` filled), each once, with `schema`'s columns.
    A view over the Parquet parts, read column by column as queries need them, so memory stays far below the
    spans' size; materialized only when duplicates must be dropped (the same span exported twice, same trace and
    span id, counts once). Returns whether it had to (then `spans` is a table of its own)."""
    if not parts and not tables:
        connection.register("empty_spans", pa.Table.from_batches([], schema=schema))
        connection.execute("CREATE TABLE spans AS SELECT * FROM empty_spans")
        connection.unregister("empty_spans")
        return False
    columns = ", ".join(schema.names)
    sources = [f"SELECT {columns} FROM {table}" for table in tables]
    if parts:
        files = "[" + ", ".join(_sql_text(p) for p in parts) + "]"
        sources.append(f"SELECT {columns} FROM read_parquet({files})")
    connection.execute(f"CREATE VIEW all_spans AS {' UNION ALL '.join(sources)}")
    (duplicates,) = connection.execute(
        "SELECT count(*) - count(DISTINCT (trace_id, span_id)) FROM all_spans"
    ).fetchall()[0]
    if duplicates:
        connection.execute("CREATE TABLE spans AS SELECT DISTINCT ON (trace_id, span_id) * FROM all_spans")
    else:
        connection.execute("CREATE VIEW spans AS SELECT * FROM all_spans")
    return bool(duplicates)


def _work_dir(use_cache: bool, cache_dir: Optional[Path]) -> Path:
    if not use_cache:
        return Path(tempfile.mkdtemp(prefix="goodput-"))
    work_dir = (cache_dir or default_cache_dir()) / f"v{SCHEMA_VERSION}"
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GoodputError(f"{work_dir}: cannot create the cache folder: {exc.strerror or exc}") from None
    return work_dir


def _convert(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool,
    work_dir: Path,
    workers: Optional[int],
    runner: Optional[Runner],
    progress: Optional[Progress],
    schema: pa.Schema = SPAN_SCHEMA,
    connection=None,
    max_chunk_bytes: Optional[int] = None,
) -> list[FileEntry]:
    """Convert what the cache lacks. Given a `connection`, an uncached load of the accounting columns alone on this
    machine lets DuckDB read JSON Lines files straight into it (`fast_json`), the fastest way there is."""
    workers = workers or os.cpu_count() or 1
    direct = connection is not None and runner is None and not use_cache and accounting_only(schema)
    plan = plan_load(
        paths,
        use_cache=use_cache,
        work_dir=work_dir,
        workers=workers,
        schema=schema,
        direct_json=direct,
        max_chunk_bytes=max_chunk_bytes,
    )
    if plan.direct:
        load_direct(plan, connection, work_dir=work_dir, workers=workers, schema=schema, progress=progress)
    if runner is None:
        in_process = plan.total_bytes - plan.done_bytes < IN_PROCESS_BYTES and len(plan.jobs) < IN_PROCESS_JOBS
        runner = lambda jobs: run_in_processes(jobs, 1 if in_process else workers)  # noqa: E731
    execute_plan(plan, use_cache=use_cache, work_dir=work_dir, runner=runner, progress=progress)
    return plan.entries


def open_store(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool = True,
    cache_dir: Optional[Path] = None,
    workers: Optional[int] = None,
    runner: Optional[Runner] = None,
    progress: Optional[Progress] = None,
    schema: pa.Schema = SPAN_SCHEMA,
) -> SpanStore:
    """Load the spans of `paths` into a fresh in-memory DuckDB and return the store around it.

    `spans` has `schema`'s columns: SPAN_SCHEMA, or `schema.ACCOUNTING_SCHEMA` for a caller that only runs the
    accounting. Without the cache, only those columns are converted (the attribute maps, most of the work, are
    skipped); with it, files are converted whole, since the cache serves every command.

    Raises InputError for paths that name nothing readable and TraceFormatError for files that are not traces;
    truncated tails and empty files become `notices`, not errors.
    """
    import duckdb

    work_dir = _work_dir(use_cache, cache_dir)
    connection = duckdb.connect(":memory:", config={"preserve_insertion_order": False})
    try:
        entries = _convert(
            paths,
            use_cache=use_cache,
            work_dir=work_dir,
            workers=workers,
            runner=runner,
            progress=progress,
            schema=schema,
            connection=connection,
        )
        parts = [p for entry in entries for p in entry.parts]
        tables = list(dict.fromkeys(t for entry in entries for t in entry.tables))
        deduplicated = _create_spans_view(connection, parts, schema, tables)
    except BaseException:
        connection.close()
        if not use_cache:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    if not use_cache:
        # Spans that all sit in one `fast_json` table, each once, are already the lineage's nodes.
        nodes = tables[0] if len(tables) == 1 and not parts and not deduplicated else None
        return SpanStore(connection, entries, temp_dir=work_dir, nodes_table=nodes)
    file_set = "|".join(sorted(entry.cache_key for entry in entries))
    set_key = hashlib.sha256(file_set.encode()).hexdigest()[:32]
    return SpanStore(connection, entries, lineage_cache=work_dir / "sets" / f"{set_key}.lineage-v{LINEAGE_VERSION}.parquet")


def ingest(
    paths: Sequence[str | os.PathLike[str]],
    *,
    to_dir: Optional[Path] = None,
    cache_dir: Optional[Path] = None,
    workers: Optional[int] = None,
    runner: Optional[Runner] = None,
    progress: Optional[Progress] = None,
    max_chunk_bytes: Optional[int] = None,
) -> list[FileEntry]:
    """Convert `paths` without querying them: into the cache, or into `to_dir` as a flat Parquet dataset.

    Every other command then reads the cache entries (same paths) or the dataset folder (`goodput report DIR`).
    Into the cache, the lineage of this set of files (parent links across them) is built too, so the first report
    on the same paths reads it instead of walking the traces. `max_chunk_bytes` caps the chunks a large file is cut
    into (chunks are otherwise sized for this machine's cores: see `ray_ingest.RAY_CHUNK_BYTES`).
    """
    convert = functools.partial(
        _convert, workers=workers, runner=runner, progress=progress, max_chunk_bytes=max_chunk_bytes
    )
    if to_dir is None:
        work_dir = _work_dir(True, cache_dir)
        entries = convert(paths, use_cache=True, work_dir=work_dir)
        with open_store(paths, cache_dir=cache_dir) as store:
            ensure_lineage(store)
        return entries
    to_dir = Path(to_dir)
    try:
        to_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".goodput-staging-", dir=to_dir))
    except OSError as exc:
        raise GoodputError(f"{to_dir}: cannot write the dataset: {exc.strerror or exc}") from None
    try:
        entries = convert(paths, use_cache=False, work_dir=staging)
        for entry in entries:
            moved = []
            for part in entry.parts:
                if not part.startswith(str(staging)):
                    continue  # an input that already was a Parquet span file stays where it is
                target = to_dir / f"{entry.path.stem}-{entry.cache_key[:8]}-{os.path.basename(part)}"
                os.replace(part, target)
                moved.append(str(target))
            entry.parts = moved or entry.parts
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entries
