"""Where a load's conversion jobs run: one after another in this process, or on a pool of worker processes started
before anything starts a thread (`pool_start_method`). Either is a `Runner`: jobs in, their results as they finish.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from .chunks import Chunk, ChunkResult, convert_chunk

ConvertJob = tuple[Chunk, str, pa.Schema]  # a chunk, the Parquet part it becomes, the columns it keeps
Runner = Callable[[Sequence[ConvertJob]], Iterator[ChunkResult]]


def pool_start_method() -> str:
    """How conversion workers started now are made: `fork` (cheapest: a worker has the decoders already imported)
    while this process runs no thread but its main one, else `forkserver` (`spawn` where there is none).

    A child forked beside other threads inherits their locks but not the threads that would release them, and can
    hang on one. `threading` sees only Python threads; DuckDB's are native, started by its first connection and
    kept by any still open (ours, or a caller's in the same process), so fork is used only while DuckDB has not
    been imported at all: nothing can have connected. `store.open_store` starts its workers before it imports
    DuckDB, and `ProcessRunner` imports it just before forking (an import starts no thread; checked), so the CLI
    forks and its workers inherit the import.
    """
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1 and "duckdb" not in sys.modules:
        return "fork"
    return _without_fork()


def _without_fork() -> str:
    import multiprocessing

    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _imported_without_threads(module: str) -> bool:
    """Import `module` for forked workers to inherit (the JSON reader's DuckDB: ~0.1 s a worker otherwise), and
    say whether that started no thread, as the OS counts them: importing DuckDB starts none (its first connection
    does), and where that cannot be seen (no /proc) or is no longer so, the caller does not fork."""
    try:
        before = len(os.listdir("/proc/self/task"))
        importlib.import_module(module)
        return len(os.listdir("/proc/self/task")) == before
    except OSError:
        return False


def run_in_this_process(jobs: Sequence[ConvertJob]) -> Iterator[ChunkResult]:
    """Convert chunks one after another in this process: for few and small jobs, cheaper than starting workers."""
    for chunk, out_path, schema in jobs:
        yield convert_chunk(chunk, out_path, schema=schema, report_faults=True)


class ProcessRunner:
    """A runner converting chunks on `workers` processes, which start when it is made (see `pool_start_method`):
    make it before anything starts threads, `close()` it when done."""

    def __init__(self, workers: int) -> None:
        self.start_method = pool_start_method()
        if self.start_method == "fork" and not _imported_without_threads("duckdb"):
            self.start_method = _without_fork()
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":  # the server imports the decoders once; each worker forks from it
            context.set_forkserver_preload([convert_chunk.__module__, "duckdb"])
        self._pool = ProcessPoolExecutor(max_workers=max(1, workers), mp_context=context)
        if self.start_method == "fork":  # the pool forks every worker on its first task: have it do so now
            self._pool.submit(os.getpid).result()

    def __call__(self, jobs: Sequence[ConvertJob]) -> Iterator[ChunkResult]:
        futures = [
            self._pool.submit(convert_chunk, chunk, out_path, schema=schema, report_faults=True)
            for chunk, out_path, schema in jobs
        ]
        try:
            from concurrent.futures import as_completed

            for future in as_completed(futures):
                yield future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
