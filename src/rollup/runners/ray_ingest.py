"""Convert trace chunks as Ray tasks: what `goodput ingest --ray` runs (through `on_ray.RayRunner`), for traces too
large for one machine; and how goodput connects to Ray at all.

The store plans the work (which chunks, which Parquet part each becomes) and publishes the result; this module only
runs `chunks.convert_chunk` once per chunk on the cluster and hands back each `ChunkResult` as its task finishes, so
the caller's progress advances while the rest still run.

Assumption: the driver names where every part goes and the workers write it there, so the cache (or the `--to`
folder) must be on a filesystem every node sees: true for a local cluster, a shared filesystem on a real one. The
workers must also be able to import `rollup` (goodput installed on every node, or shipped in the job's runtime env).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from typing import Any

from rollup.base.errors import GoodputError
from rollup.read.chunks import DEFAULT_CHUNK_BYTES, Chunk, ChunkResult, convert_chunk
from rollup.read.workers import ConvertJob

# Ray's CPUs are not known before connecting, which happens only when there is work: `ingest --ray` caps chunks at
# this size instead, so a large file spreads over a whole cluster, not over as many tasks as the driver has cores.
RAY_CHUNK_BYTES = DEFAULT_CHUNK_BYTES
# How long a failed load waits for the tasks it cancelled, so none is still writing when the store removes the parts.
_CANCEL_GRACE_S = 10.0
# Ray retries an unreachable head for many minutes; a plain TCP connect says "nothing listens there" in seconds.
_PROBE_TIMEOUT_S = 5.0


def import_ray() -> Any:
    """Ray, or a GoodputError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise GoodputError("converting on Ray needs Ray: pip install 'goodput[ray]'") from None
    return ray


def convert_on_ray(ray: Any, address: str | None, jobs: Sequence[ConvertJob]) -> Iterator[ChunkResult]:
    """Convert each chunk as a Ray task (one CPU each), yielding results as tasks finish.

    A process already connected to Ray (`ray.init()` done by the caller) keeps and reuses its connection, whatever
    `address` says. Otherwise it connects when it has work, with `ray.init(address=address)`: None honours
    `RAY_ADDRESS`, else starts a local cluster; a connection it made is shut down when its results are consumed.
    Raises GoodputError when the cluster cannot be reached.
    """
    if not jobs:  # everything was cached: no reason to reach, let alone start, a cluster
        return
    started = connect_ray(ray, address)
    try:
        convert = ray.remote(num_cpus=1)(convert_chunk)
        job_of = {
            convert.remote(chunk, out_path, schema=schema, report_faults=True): (chunk, out_path)
            for chunk, out_path, schema in jobs
        }
        pending = list(job_of)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    chunk, out_path = job_of[ref]
                    result = task_result(ray, ref, f"{chunk.path}: the Ray task converting {_span_text(chunk)}")
                    if result.spans and not _part_visible(out_path):
                        raise GoodputError(
                            f"{out_path}: a Ray worker wrote this part but this machine cannot see it: the cache "
                            f"(GOODPUT_CACHE_DIR) or --to folder must be on a filesystem every Ray node shares"
                        )
                    yield result
        except BaseException:  # a failed chunk, or the caller gave up (Ctrl-C, closed the iterator): stop the rest
            _cancel(ray, pending)
            raise
    finally:
        if started:
            ray.shutdown()


def connect_ray(ray: Any, address: str | None) -> bool:
    """Connect unless this process already is; True when this call made the connection (and so must close it)."""
    if ray.is_initialized():
        return False
    where = address or os.environ.get("RAY_ADDRESS") or "local"
    _probe(where)
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except Exception as error:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError, ...: all mean "not there"
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        target = "start a local Ray cluster" if where == "local" else f"connect to the Ray cluster at {where}"
        raise GoodputError(f"cannot {target}: {detail}") from None
    return True


def _probe(where: str) -> None:
    """Fail fast when nothing listens at a `host:port` (or `ray://host:port`) address; other forms go to Ray."""
    host, colon, port = where.split("://", 1)[-1].rpartition(":")
    if not colon or not port.isdigit():
        return  # "auto", "local": Ray looks the cluster up itself
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_TIMEOUT_S):
            pass
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise GoodputError(f"cannot connect to the Ray cluster at {where}: {reason}") from None


def task_result(ray: Any, ref: Any, failed: str) -> Any:
    """A Ray task's result; its GoodputError as the original exception, not wrapped in Ray's RayTaskError.

    Ray re-raises a task's exception as a RayTaskError whose text is the worker's whole traceback; the user needs
    the library's one-line message (file and offset), and the CLI catches GoodputError by type. Any other exception
    in the task is a bug and keeps Ray's traceback; a lost worker or node becomes a GoodputError, `failed` (what the
    task was doing) followed by Ray's first line.
    """
    from ray.exceptions import RayError, RayTaskError

    try:
        return ray.get(ref)
    except RayTaskError as error:
        if isinstance(error.cause, GoodputError):
            raise error.cause from None
        raise
    except RayError as error:  # the worker died (out of memory, node lost), not the work
        detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GoodputError(f"{failed} failed: {detail}") from None


def _part_visible(out_path: str) -> bool:
    """Whether the driver sees a part a worker wrote: on a cluster without a shared filesystem, it does not."""
    return os.path.exists(out_path)


def _span_text(chunk: Chunk) -> str:
    return "the file" if chunk.whole_file else f"bytes {chunk.start}-{chunk.end}"


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Cancel the tasks still out and wait briefly for them to stop (a cancelled task removes its partial part), so
    none still writes when the store cleans up; their errors are read, so Ray does not log them as unhandled."""
    if not refs:
        return
    try:
        for ref in refs:
            ray.cancel(ref)
        stopped, _ = ray.wait(refs, num_returns=len(refs), timeout=_CANCEL_GRACE_S)
        for ref in stopped:
            with contextlib.suppress(Exception):  # cancelled, or failed too: the first error is the one to report
                ray.get(ref)
    except Exception:  # noqa: BLE001 - best effort while the cluster may be going away
        pass
