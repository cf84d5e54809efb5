"""What a load does before DuckDB sees a span: which files the cache holds, which chunks to convert, running them.

`plan_load` expands the paths, reuses cached entries and cuts the rest into conversion jobs (a chunk, the Parquet part
it becomes, the columns it keeps); `load_direct` lets DuckDB read plain JSON Lines itself when only the accounting
columns are wanted; `execute_plan` runs the jobs (on all cores with a `ProcessRunner`, in this process, or through
any runner such as `on_ray.RayRunner`) and publishes each converted file to the cache.

A file that is not a trace (`signals.NotATrace`) is an error when named on the command line, and skipped with a note
when found in a directory or by a glob; a load where every file is skipped is an error. The verdict is cached with
the file's entry, so a large metrics file beside the traces is read once, not by every command.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rollup.base.errors import GoodputError, InputError, TraceFormatError
from rollup.base.memory import nodes_as_parquet
from rollup.base.schema import SPAN_SCHEMA
from rollup.base.tables import DIRECT_SPANS

from .cache import file_cache_key, publish_entry, read_manifest
from .chunks import Chunk, ChunkResult, plan_chunks
from .parquet_parts import parquet_problem
from .paths import expand_paths
from .signals import NotATrace, not_a_trace_error, skip_notice, skipped_notice
from .sniff import compression_of, sniff_format
from .workers import ConvertJob, Runner

if TYPE_CHECKING:
    import duckdb

# Below this many bytes in all and this many files or chunks, converting in this process beats starting workers;
# past it, the per-file cost of many small files is worth spreading over the cores (bench/ingest.py).
IN_PROCESS_BYTES = 8 << 20
IN_PROCESS_JOBS = 16
SEPARATE_PROCESS_BYTES = 64 << 20
MIN_CHUNK_BYTES = 4 << 20
MAX_CHUNK_BYTES = 256 << 20
NOT_A_TRACE_MARK = "not-a-trace.json"  # in a cache entry: the file is no trace, and why

Progress = Callable[[int, int], None]


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
    tables: list[str] = field(default_factory=list)  # DuckDB tables holding its spans, when `duckdb_json` read it
    named: bool = True  # named on the command line, not found in a directory or by a glob (`paths.InputFile`)
    skipped: bool = False  # not a trace, found in a directory (or unreadable, with --keep-going): skipped with a note
    unreadable: bool = False  # skipped by --keep-going: a corrupt record, no trace though named, or no access

    @property
    def cache_key(self) -> str:
        return file_cache_key(self.path, self.size, self.mtime_ns)

    def manifest(self) -> dict[str, Any]:
        """What its cache entry records of it (`cache.publish_entry`)."""
        return {"path": str(self.path), "size": self.size, "mtime_ns": self.mtime_ns, "spans": self.spans,
                "notices": self.notices, "parts": self.parts}  # fmt: skip


def _stat_entry(path: Path, named: bool = True) -> FileEntry:
    try:
        stat = path.stat()
    except OSError as exc:
        raise GoodputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not os.access(path, os.R_OK):
        raise GoodputError(f"{path}: cannot read: permission denied")
    return FileEntry(path=path, size=stat.st_size, mtime_ns=stat.st_mtime_ns, named=named)


def _skip(entry: FileEntry, error: NotATrace, keep_going: bool = False) -> None:
    """`entry` is not a trace: an error when it was named (unless `keep_going`), else skipped with a note."""
    if entry.named and not keep_going:
        raise error
    if entry.named:
        _give_up(entry, error)
        return
    entry.skipped = True
    entry.parts, entry.spans, entry.notices = [], 0, [skip_notice(error)]


def _give_up(entry: FileEntry, error: GoodputError) -> None:
    """With `--keep-going`: `entry` cannot be read (`error`, its one line), so it is skipped with a warning."""
    entry.skipped = entry.unreadable = True
    entry.parts, entry.spans, entry.notices = [], 0, [f"warning: {error} (skipped: --keep-going)"]


def _unreadable_entry(path: Path, named: bool, error: GoodputError) -> FileEntry:
    entry = FileEntry(path=path, size=0, mtime_ns=0, named=named)
    _give_up(entry, error)
    return entry


def _cached_verdict(entry_dir: Path, path: Path) -> NotATrace | None:
    """The NotATrace a cache entry recorded for its file, if it did."""
    try:
        mark = json.loads((entry_dir / NOT_A_TRACE_MARK).read_text(encoding="utf-8"))
        return NotATrace(str(path), str(mark["where"]), str(mark["problem"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def wants_processes(plan: Plan, workers: int) -> bool:
    """Whether the plan's jobs are worth worker processes: more than a few small jobs (IN_PROCESS_BYTES,
    IN_PROCESS_JOBS), and more than one core; or, with one worker, a large conversion (SEPARATE_PROCESS_BYTES),
    whose batches and decoders would otherwise stay in this process's memory beside the accounting's."""
    many = plan.job_bytes >= IN_PROCESS_BYTES or len(plan.jobs) >= IN_PROCESS_JOBS
    return many and (workers > 1 and len(plan.jobs) > 1 or plan.job_bytes >= SEPARATE_PROCESS_BYTES)


@dataclass
class Plan:
    """What a load has to do: the entries already cached and the chunks still to convert."""

    entries: list[FileEntry]
    jobs: list[ConvertJob]
    staging: dict[Path, Path]  # entry path -> folder its parts are being written to
    total_bytes: int
    direct: list[FileEntry] = field(default_factory=list)  # JSON Lines files DuckDB is to read itself first
    done_bytes: int = 0  # of total_bytes, read before the jobs run
    kinds: dict[Path, str] = field(default_factory=dict)  # entry path -> its format, for the files converted

    @property
    def job_bytes(self) -> int:
        """The size of the files the jobs convert."""
        return sum(entry.size for entry in self.entries if entry.path in self.staging)


def plan_load(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool,
    work_dir: Path,
    workers: int,
    schema: pa.Schema = SPAN_SCHEMA,
    direct_json: bool = False,
    max_chunk_bytes: int | None = None,
    keep_going: bool = False,
) -> Plan:
    """Expand the paths, reuse what the cache holds, and cut the rest into conversion jobs keeping `schema`'s
    columns (always all of them when they go to the cache). With `direct_json`, JSON Lines files are set aside for
    `load_direct` instead. Chunks are sized for `workers`, and at most `max_chunk_bytes` when given. With
    `keep_going`, a file that cannot be read, or is no trace, is skipped with a warning (see `execute_plan`)."""
    schema = SPAN_SCHEMA if use_cache else schema
    files = expand_paths(paths)
    entries = []
    for path, named in files:
        try:
            entries.append(_stat_entry(path, named))
        except GoodputError as error:
            if not keep_going:
                raise
            entries.append(_unreadable_entry(path, named, error))
    jobs: list[ConvertJob] = []
    staging: dict[Path, Path] = {}
    pending: list[tuple[FileEntry, str]] = []  # with the format sniffed once, here
    for entry in entries:
        if entry.skipped:
            continue
        if use_cache:
            manifest = read_manifest(work_dir / entry.cache_key)
            if manifest is not None:
                entry.parts, entry.spans, entry.notices = manifest["parts"], manifest["spans"], manifest["notices"]
                entry.cached = True
                verdict = _cached_verdict(work_dir / entry.cache_key, entry.path)
                if verdict is not None:
                    _skip(entry, verdict, keep_going)
                continue
        try:
            kind = sniff_format(str(entry.path)) if entry.size else "empty"
            if kind == "parquet":
                _check_parquet_spans(entry)
                continue
        except NotATrace as error:
            _skip(entry, error, keep_going)
            continue
        except GoodputError as error:  # unreadable, or a Parquet file that is damaged
            if not keep_going:
                raise
            _give_up(entry, error)
            continue
        pending.append((entry, kind))
    direct = [entry for entry, kind in pending if direct_json and kind == "json-lines"]
    pending = [(entry, kind) for entry, kind in pending if not (direct_json and kind == "json-lines")]
    converted = sum(e.size for e, _ in pending)
    plan = Plan(entries, jobs, staging, total_bytes=converted + sum(e.size for e in direct), direct=direct)
    target = _chunk_target(converted, workers, max_chunk_bytes)
    for entry, kind in pending:
        _add_jobs(plan, entry, kind, target, work_dir, schema)
    return plan


def _chunk_target(total_bytes: int, workers: int, max_chunk_bytes: int | None = None) -> int:
    """Chunks of about this size give every worker two, so a slow one does not hold up the end; never more than
    MAX_CHUNK_BYTES (or `max_chunk_bytes`), so a huge file is many chunks in a row rather than a few huge ones
    (progress moves, a failure costs one chunk). Capped, the chunks are as many as a multiple of the workers, of
    equal size: 4 GB on two workers is 16 chunks of 250 MB, not 15 of 256 MiB and a last round for one worker."""
    workers = max(1, workers)
    target = max(MIN_CHUNK_BYTES, total_bytes // (workers * 2))
    most = max_chunk_bytes or MAX_CHUNK_BYTES
    if target <= most:
        return target
    rounds = -(-total_bytes // (most * workers))  # rounds of one chunk per worker
    return min(most, max(MIN_CHUNK_BYTES, -(-total_bytes // (rounds * workers))))


def _add_jobs(plan: Plan, entry: FileEntry, kind: str, target: int, work_dir: Path, schema: pa.Schema) -> None:
    folder = work_dir / f"{entry.cache_key}.staging-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    plan.staging[entry.path] = folder
    plan.kinds[entry.path] = kind
    for chunk in plan_chunks(str(entry.path), target_bytes=target, kind=kind):
        plan.jobs.append((chunk, str(folder / f"part-{chunk.index:05d}.parquet"), schema))


def load_direct(
    plan: Plan,
    connection: duckdb.DuckDBPyConnection,
    *,
    work_dir: Path,
    workers: int,
    schema: pa.Schema,
    progress: Progress | None,
    limit_bytes: int,
) -> None:
    """Let DuckDB read the plan's JSON Lines files itself (`duckdb_json`), all into one table of `connection`
    (DIRECT_SPANS), in one query per kind of compression; a file it gives back becomes conversion jobs for the
    careful reader. For more spans than `limit_bytes` holds as a table (`memory.nodes_as_parquet`), DIRECT_SPANS is
    a view of Parquet files DuckDB writes into `work_dir` instead."""
    from .formats import duckdb_json

    by_compression: dict[str | None, list[FileEntry]] = {}
    for entry in plan.direct:
        by_compression.setdefault(compression_of(str(entry.path)), []).append(entry)
    estimate = sum(
        duckdb_json.spans_estimate(sum(entry.size for entry in entries), compression)
        for compression, entries in by_compression.items()
    )
    folder = work_dir if nodes_as_parquet(estimate, limit_bytes) else None
    for compression, entries in by_compression.items():
        size = sum(entry.size for entry in entries)

        def on_progress(fraction: float, before: int = plan.done_bytes, size: int = size) -> None:
            if progress is not None:
                progress(before + int(fraction * size), plan.total_bytes)

        paths = [str(entry.path) for entry in entries]
        claimed = duckdb_json.load_json_lines(connection, paths, compression, DIRECT_SPANS, folder, on_progress)
        plan.done_bytes += size
        for entry in entries:
            if str(entry.path) in claimed:
                entry.tables, entry.spans = [DIRECT_SPANS], claimed[str(entry.path)]
            else:
                plan.total_bytes += entry.size
                _add_jobs(plan, entry, "json-lines", _chunk_target(entry.size, workers), work_dir, schema)
        if progress is not None:
            progress(plan.done_bytes, plan.total_bytes)


def _check_parquet_spans(entry: FileEntry) -> None:
    """A Parquet file among the inputs (an `ingest --to` dataset) is used as it is, if it holds goodput spans."""
    try:
        import pyarrow.parquet as pq

        schema = pq.read_schema(entry.path)
        rows = pq.read_metadata(entry.path).num_rows
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:  # what a damaged file raises; else a bug of ours
        raise TraceFormatError(str(entry.path), "", f"unreadable Parquet file ({exc})") from None
    problem = parquet_problem(schema.names)
    if problem:
        raise NotATrace(str(entry.path), "", problem)
    entry.parts, entry.spans = [str(entry.path)], rows


def execute_plan(
    plan: Plan,
    *,
    use_cache: bool,
    work_dir: Path,
    runner: Runner,
    progress: Progress | None = None,
    keep_going: bool = False,
) -> None:
    """Run the plan's jobs, then publish each converted file (to the cache, or in place for an uncached load).

    Raises the first corrupt record met (a TraceFormatError) as soon as it is met, NotATrace for a named file that
    is not a trace, and InputError when every file was skipped as none. With `keep_going`, a file with a corrupt
    record, or not a trace, is skipped with a warning instead (and not cached: it may be a file still being
    written); InputError only when nothing could be read."""
    by_path = {entry.path: entry for entry in plan.entries}
    part_of = {(chunk.path, chunk.index): out_path for chunk, out_path, _ in plan.jobs}
    done_bytes = plan.done_bytes
    results: dict[Path, list[ChunkResult]] = {path: [] for path in plan.staging}
    try:
        for result in runner(plan.jobs):
            if result.corrupt is not None and not keep_going:
                raise result.corrupt
            results[Path(result.chunk.path)].append(result)
            done_bytes += _chunk_bytes(result.chunk, by_path[Path(result.chunk.path)].size)
            if progress is not None:
                progress(min(done_bytes, plan.total_bytes), plan.total_bytes)
        for path in plan.staging:
            entry = by_path[path]
            ordered = sorted(results[path], key=lambda r: r.chunk.index)
            entry.spans = sum(r.spans for r in ordered)
            entry.notices = [n for r in ordered for n in r.notices]
            entry.parts = [part_of[(r.chunk.path, r.chunk.index)] for r in ordered if r.spans]
            corrupt = next((r.corrupt for r in ordered if r.corrupt is not None), None)
            if corrupt is not None:
                _give_up(entry, corrupt)
                continue
            _file_verdict(entry, ordered, plan.kinds[path], plan.staging[path] if use_cache else None, keep_going)
    except BaseException:
        for folder in plan.staging.values():
            shutil.rmtree(folder, ignore_errors=True)
        raise
    for path in [path for path in plan.staging if by_path[path].unreadable]:
        shutil.rmtree(plan.staging.pop(path), ignore_errors=True)
    if use_cache:
        for path, folder in plan.staging.items():
            entry = by_path[path]
            entry.parts = publish_entry(entry.manifest(), folder, work_dir / entry.cache_key)
    skipped = [entry for entry in plan.entries if entry.skipped]
    if skipped and len(skipped) == len(plan.entries):
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        first = skipped[0].notices[0].removeprefix("warning: ").removesuffix(" (skipped: --keep-going)")
        what = "no trace file could be read" if any(entry.unreadable for entry in skipped) else "no trace file found"
        raise InputError(f"{what}: {first}{more}")


def _file_verdict(
    entry: FileEntry, results: list[ChunkResult], kind: str, cache_entry: Path | None, keep_going: bool = False
) -> None:
    """Whether a converted file is a trace, from its chunks' results: a note for the other signals skipped in it;
    for one that is not, `_skip` (recorded in `cache_entry` as NOT_A_TRACE_MARK). A chunk that found no trace in a
    file whose other chunks hold spans met a corrupt record: TraceFormatError."""
    counts: dict[str, int] = {}
    for result in results:
        for signal, count in result.other_signals.items():
            counts[signal] = counts.get(signal, 0) + count
    failures = [result.not_a_trace for result in results if result.not_a_trace is not None]
    error = failures[0] if failures else None
    if error is not None and entry.spans:
        corrupt = TraceFormatError(error.path, error.where, error.problem)
        if not keep_going:
            raise corrupt
        _give_up(entry, corrupt)
        return
    if error is None and not entry.spans and len(results) > 1 and (counts or not entry.notices):
        error = not_a_trace_error(str(entry.path), kind, counts)  # a large file cut into chunks, none with a span
    if error is None:
        if counts:
            entry.notices.append(skipped_notice(str(entry.path), counts))
        return
    _skip(entry, error, keep_going)
    if cache_entry is not None and not entry.unreadable:
        mark = {"where": error.where, "problem": error.problem}
        (cache_entry / NOT_A_TRACE_MARK).write_text(json.dumps(mark), encoding="utf-8")


def _chunk_bytes(chunk: Chunk, file_size: int) -> int:
    return (file_size if chunk.end < 0 else chunk.end) - chunk.start
