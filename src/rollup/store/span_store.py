"""The span store: trace files in, one deduplicated `spans` table in DuckDB out, with a Parquet cache in between.

Every command reads through here. Each input file is converted once into Parquet parts of the normalized schema
(`schema.SPAN_SCHEMA`), kept in the cache (`cache`); the next command on the same files reads the parts and skips
parsing. Conversion runs chunk by chunk on all cores, as many as the memory limit has room for (or on a Ray cluster,
see `runners.ray_ingest`), so memory is bounded by a chunk's batch, not by the file (`read.plan`). DuckDB then holds
no more than GOODPUT_MEMORY_LIMIT and spills the rest beside the cache (`memory`).

An uncached load for the accounting alone (`report`, `check`, `spans` with `--no-cache`) converts only the columns
the accounting reads, and lets DuckDB read plain JSON Lines files itself, straight into Parquet of its own
(`read.duckdb_json`), handing any file it is not sure of back to the conversion above.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from rollup.base.connection import (
    MIN_LIMIT_BYTES,
    ONE_THREAD_SPANS,
    SpillDirectory,
    connect,
    memory_limit_bytes,
    out_of_memory,
    release,
    spill_directory,
)
from rollup.base.errors import GoodputError
from rollup.base.memory import DIRECT_JSON_MIN_BYTES, conversion_workers, nodes_as_parquet
from rollup.base.schema import ACCOUNTING_SCHEMA, SPAN_SCHEMA, accounting_only
from rollup.base.tables import ATTEMPT_SPANS, SPANS
from rollup.read.cache import (
    cache_work_dir,
    lineage_cache_path,
    retire_older_lineage,
    set_summary_path,
    spill_root,
)
from rollup.read.plan import FileEntry, Progress, execute_plan, load_direct, plan_load, wants_processes
from rollup.read.sniff import CUT_BEFORE_FIRST
from rollup.read.workers import ProcessRunner, Runner, run_in_this_process

from .attempts import choose_attempt
from .lineage import LINEAGE_VERSION, ensure_lineage
from .spans_view import create_spans_view
from .spanset import SpanSet

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class ReadSummary:
    """What a load read: `spans` distinct spans (a span exported twice counts once, and once in `duplicates`) from
    `files` files, the `empty_files` beside them (of which `cut_files` were cut before their first complete record:
    a job killed as it first wrote), and how many spans carry `rl.bucket` and `rl.iteration` of their own."""

    files: int
    empty_files: int
    spans: int
    duplicates: int
    with_bucket: int
    with_iteration: int
    cut_files: int = 0


class SpanStore:
    """An open DuckDB connection whose SPANS table (`tables`) holds every span of the loaded files, each span once, and
    what the store derives from them: the spans with their lineage, of the whole run or of one attempt (`spans`)."""

    def __init__(
        self,
        connection: duckdb.DuckDBPyConnection,
        entries: list[FileEntry],
        temp_dir: Path | None = None,
        lineage_cache: Path | None = None,
        nodes_table: str | None = None,
        spill: SpillDirectory | None = None,
        limit_bytes: int | None = None,
        duplicates: int = 0,
    ) -> None:
        self.connection = connection
        self.duplicates = duplicates  # spans the files hold more than once (same trace and span id)
        self.entries = entries
        self._temp_dir = temp_dir  # an uncached load's parts, which the view reads until close()
        self._spill = spill  # where DuckDB spills beyond its memory limit (`connection`)
        self.lineage_cache = lineage_cache  # where the lineage of this set of files is kept (`lineage.ensure_lineage`)
        self.nodes_table = nodes_table  # a table `lineage.build_lineage` may walk as it is (see there)
        self._limit_bytes = limit_bytes  # its DuckDB's memory limit
        self._whole: SpanSet | None = None
        self._attempts: dict[str, SpanSet] = {}

    def spans(self, attempt: str | None = None) -> SpanSet:
        """The spans with their lineage (`lineage.build_lineage`), made on the first call and kept: every report,
        check and listing reads them. `attempt` (a run id, `""` for the unnamed attempt, or `latest`) gives that
        attempt's spans alone, as if the files held nothing else: a set of its own beside the whole run's, which
        stays as it was; an id the files do not hold is a GoodputError naming the ones they do."""
        if self._whole is None:
            self._whole = ensure_lineage(
                self.connection, cached=self.lineage_cache, nodes=self.nodes_table, scratch=self.scratch,
                on_cached=self.lineage_cached,
            )  # fmt: skip
        if attempt is None:
            return self._whole
        run_ids = [a.run_id for a in self._whole.attempts()]
        chosen = choose_attempt(run_ids, attempt)
        if chosen not in self._attempts:
            self._attempts[chosen] = self._one_attempt(run_ids, chosen)
        return self._attempts[chosen]

    def _one_attempt(self, run_ids: list[str], run_id: str) -> SpanSet:
        """Attempt `run_id`'s spans: the whole run's when it is the only attempt, else a table of its rows (read for
        every column: the accounting reads one attempt many times over)."""
        whole = self.spans()
        if len(run_ids) == 1:
            return SpanSet(whole.connection, whole.lineage, whole.own, run_id, whole.files)
        table = f"{ATTEMPT_SPANS}_{run_ids.index(run_id)}"
        self.connection.execute(
            f"CREATE TABLE {table} AS SELECT * FROM {whole.lineage} WHERE coalesce(run_id, '') = ?", [run_id]
        )
        return SpanSet(whole.connection, table, table, run_id, whole.files)

    def scratch(self) -> Path | None:
        """A folder of this command's own for the lineage's node table (`lineage.build_lineage`) when it holds more
        spans than the memory limit does as a DuckDB table (`memory.nodes_as_parquet`): the spill folder, removed
        when the store closes, or by the next command when this one was killed (`connection.spill_directory`). None
        when the spans fit (a table is then faster) or the folder cannot be made."""
        spans = sum(entry.spans for entry in self.entries)
        if self._spill is None or self._limit_bytes is None or not nodes_as_parquet(spans, self._limit_bytes):
            return None
        try:
            self._spill.path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        return self._spill.path

    def lineage_cached(self) -> None:
        """`lineage.ensure_lineage` wrote `lineage_cache`: the same files' older lineage tables can retire."""
        if self.lineage_cache is not None:
            retire_older_lineage(self.lineage_cache, (entry.path for entry in self.entries))

    @property
    def notices(self) -> list[str]:
        return [n for entry in self.entries for n in entry.notices]

    def read_summary(self) -> ReadSummary:
        """What this load read: so a command with nothing to show can say why (no span, or no RL attribute)."""
        files = [entry for entry in self.entries if not entry.skipped]
        (with_bucket, with_iteration) = self.connection.execute(
            f"SELECT count(bucket), count(iteration) FROM {SPANS}"
        ).fetchall()[0]
        return ReadSummary(
            files=sum(1 for entry in files if entry.spans),
            empty_files=sum(1 for entry in files if not entry.spans),
            spans=sum(entry.spans for entry in files) - self.duplicates,
            duplicates=self.duplicates,
            with_bucket=int(with_bucket),
            with_iteration=int(with_iteration),
            cut_files=sum(1 for entry in files if not entry.spans and entry.size and _cut_at_once(entry)),
        )

    def sql(self, query: str, params: Iterable[Any] | dict[str, Any] | None = None) -> pa.Table:
        """Run `query` and return an Arrow table; a DuckDB error becomes a GoodputError naming the query's problem."""
        import duckdb

        if params is not None and not isinstance(params, dict):
            params = list(params)
        try:
            return self.connection.sql(query, params=params).to_arrow_table()
        except duckdb.Error as exc:
            raise out_of_memory(exc) or GoodputError(f"SQL: {str(exc).splitlines()[0]}") from None

    def close(self) -> None:
        release(self.connection)
        if self._spill is not None:
            self._spill.remove()
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> SpanStore:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        """Close the store; DuckDB running out of memory under GOODPUT_MEMORY_LIMIT inside the block is raised as the
        GoodputError that says so (set the limit higher), not as DuckDB's own exception."""
        self.close()
        said = out_of_memory(error) if error is not None else None
        if said is not None:
            raise said from None


def _work_dir(use_cache: bool, cache_dir: Path | None) -> Path:
    return cache_work_dir(cache_dir) if use_cache else Path(tempfile.mkdtemp(prefix="goodput-"))


def _convert(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool,
    work_dir: Path,
    workers: int | None,
    runner: Runner | None,
    progress: Progress | None,
    schema: pa.Schema = SPAN_SCHEMA,
    connect: _Connection | None = None,
    max_chunk_bytes: int | None = None,
    keep_going: bool = False,
) -> list[FileEntry]:
    """Convert what the cache lacks. Given `connect` (the store's connection, opened on first call), an uncached
    load of the accounting columns alone on this machine lets DuckDB read JSON Lines files straight into it
    (`read.duckdb_json`), the fastest way there is.

    Worker processes, when the jobs are worth them, are started before the connection is opened: DuckDB's threads
    would make forking them unsafe (`read.workers.pool_start_method`)."""
    workers = workers or conversion_workers()
    direct = connect is not None and runner is None and not use_cache and accounting_only(schema)
    direct = direct and connect is not None and connect.limit_bytes >= DIRECT_JSON_MIN_BYTES
    plan = plan_load(
        paths,
        use_cache=use_cache,
        work_dir=work_dir,
        workers=workers,
        schema=schema,
        direct_json=direct,
        max_chunk_bytes=max_chunk_bytes,
        keep_going=keep_going,
    )
    pool: ProcessRunner | None = None
    try:
        if runner is None and wants_processes(plan, workers):
            pool = ProcessRunner(min(workers, len(plan.jobs)))
        if plan.direct and connect is not None:  # only set aside when there is a connection (see `direct`)
            load_direct(
                plan, connect(), work_dir=work_dir, workers=workers, schema=schema, progress=progress,
                limit_bytes=connect.limit_bytes,
            )  # fmt: skip
            if runner is None and pool is None and wants_processes(plan, workers):  # files DuckDB handed back
                pool = ProcessRunner(min(workers, len(plan.jobs)))
        execute_plan(
            plan, use_cache=use_cache, work_dir=work_dir, runner=runner or pool or run_in_this_process,
            progress=progress, keep_going=keep_going,
        )  # fmt: skip
    finally:
        if pool is not None:
            pool.close()
    return plan.entries


class _Connection:
    """The store's DuckDB connection, opened (and DuckDB imported) on first call, held to the memory limit and
    spilling into `spill` (`connection.connect`)."""

    def __init__(self, spill: SpillDirectory, limit_bytes: int) -> None:
        self.spill = spill
        self.limit_bytes = limit_bytes
        self.connection: duckdb.DuckDBPyConnection | None = None

    def __call__(self) -> duckdb.DuckDBPyConnection:
        if self.connection is None:
            self.connection = connect(self.spill, limit_bytes=self.limit_bytes, lent=True)
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            release(self.connection)
        self.spill.remove()


def open_store(
    paths: Sequence[str | os.PathLike[str]],
    *,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    workers: int | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    accounting: bool = False,
    memory_share: float = 1.0,
    keep_going: bool = False,
) -> SpanStore:
    """Load the spans of `paths` into a fresh in-memory DuckDB and return the store around it.

    SPANS has every column of `schema.SPAN_SCHEMA`, or with `accounting` those of `schema.ACCOUNTING_SCHEMA` alone,
    for a caller that only runs the accounting (a report, a check, a listing: not `query`). Without the cache, only
    those columns are converted (the attribute maps, most of the work, are skipped); with it, files are converted
    whole, since the cache serves every command. The store's DuckDB holds `memory_share` of GOODPUT_MEMORY_LIMIT
    (`connection`): stores that work at the same time share the limit (a diff's two sides each get half), so a
    command's peak stays the limit and a margin. Used as a context manager, the store closes on leaving.

    Raises InputError for paths that name nothing readable and TraceFormatError for files that are not traces;
    truncated tails and empty files become `notices`, not errors. With `keep_going`, a file that cannot be read (a
    corrupt record, no trace, no access) is skipped, its error a warning among the notices; InputError only when
    no file could be read. A path that names nothing stays an error: a typo must not read as a smaller run.
    """
    if not 0 < memory_share <= 1:
        raise ValueError(f"memory_share is a share of the limit, not {memory_share}")
    schema = ACCOUNTING_SCHEMA if accounting else SPAN_SCHEMA
    limit = max(MIN_LIMIT_BYTES, int(memory_share * memory_limit_bytes()))  # a bad setting is said before any work
    work_dir = _work_dir(use_cache, cache_dir)
    connect = _Connection(spill_directory(spill_root(cache_dir) if use_cache else work_dir), limit)
    try:
        entries = _convert(
            paths,
            use_cache=use_cache,
            work_dir=work_dir,
            workers=workers,
            runner=runner,
            progress=progress,
            schema=schema,
            connect=connect,
            keep_going=keep_going,
        )
        connection = connect()
        if sum(entry.spans for entry in entries) <= ONE_THREAD_SPANS:
            connection.execute("SET threads = 1")
        parts = [p for entry in entries for p in entry.parts]
        tables = list(dict.fromkeys(t for entry in entries for t in entry.tables))
        keys = [entry.cache_key for entry in entries]
        summary = set_summary_path(work_dir, keys) if use_cache else None
        rewritten, duplicates = create_spans_view(connection, parts, schema, tables, summary)
    except BaseException as exc:
        connect.close()
        if not use_cache:
            shutil.rmtree(work_dir, ignore_errors=True)
        error = out_of_memory(exc)
        if error is not None:
            raise error from None
        raise
    if not use_cache:
        # Spans that all sit in one `read.duckdb_json` view, each once, are already the lineage's nodes.
        nodes = tables[0] if len(tables) == 1 and not parts and not rewritten else None
        return SpanStore(
            connection, entries, temp_dir=work_dir, nodes_table=nodes, spill=connect.spill, limit_bytes=limit,
            duplicates=duplicates,
        )  # fmt: skip
    lineage = lineage_cache_path(work_dir, keys, LINEAGE_VERSION)
    return SpanStore(
        connection, entries, lineage_cache=lineage, spill=connect.spill, limit_bytes=limit, duplicates=duplicates
    )


def ingest(
    paths: Sequence[str | os.PathLike[str]],
    *,
    to_dir: Path | None = None,
    cache_dir: Path | None = None,
    workers: int | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    max_chunk_bytes: int | None = None,
    keep_going: bool = False,
) -> list[FileEntry]:
    """Convert `paths` without querying them: into the cache, or into `to_dir` as a flat Parquet dataset.

    Every other command then reads the cache entries (same paths) or the dataset folder (`goodput report DIR`).
    Into the cache, the lineage of this set of files (parent links across them) is built too, so the first report
    on the same paths reads it instead of walking the traces. `max_chunk_bytes` caps the chunks a large file is cut
    into (chunks are otherwise sized for this machine's cores: see `on_ray.RayRunner.max_chunk_bytes`).
    `keep_going`: skip the files that cannot be read, as `open_store` does.
    """
    convert = functools.partial(
        _convert, workers=workers, runner=runner, progress=progress, max_chunk_bytes=max_chunk_bytes,
        keep_going=keep_going,
    )  # fmt: skip
    if to_dir is None:
        work_dir = _work_dir(True, cache_dir)
        entries = convert(paths, use_cache=True, work_dir=work_dir)
        with open_store(paths, cache_dir=cache_dir, keep_going=keep_going) as store:
            store.spans()
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


def _cut_at_once(entry: FileEntry) -> bool:
    """Whether `entry`, holding no span, was cut before its first complete record (its notice says so)."""
    return any(CUT_BEFORE_FIRST in notice for notice in entry.notices)
