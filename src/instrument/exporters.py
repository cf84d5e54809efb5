"""Span exporters that write the two trace-file formats the rollup reads, one file per process.

A training job spreads over a driver, Ray workers and forked helpers; if they shared one file their records would
interleave and the file would not parse. So each process resolves its own file at its first export (`trace_file_path`),
opens it only then (a process that exports nothing leaves no file), and writes each batch as one record under a lock.
Write failures are logged once, counted and reported as FAILURE, never raised: a full disk must not stop the training
loop, nor fill its log.
"""

from __future__ import annotations

import abc
import contextlib
import json
import os
import pathlib
import re
import socket
import struct
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import IO

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

from ._log import logger
from .wire import ENV_TRACE_OWNER_PID, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL

DEFAULT_TRACE_DIR = "goodput_traces"
EXPORTER_KINDS = ("otlp-file", "json-file", "otlp", "console")

_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def _spans(count: int) -> str:
    return f"{count} span" + ("" if count == 1 else "s")


def _safe_name_part(text: str, fallback: str) -> str:
    """`text` with every character outside `[A-Za-z0-9._-]` replaced, so it can sit in a file name on any system."""
    return _UNSAFE_NAME_CHARS.sub("_", text) or fallback


def trace_file_path(
    path: str | os.PathLike[str] | None, suffix: str, service_name: str, *, owner_pid: int | None = None
) -> pathlib.Path:
    """The file this process writes, given the user's `path` (a directory or a file) and the format's `suffix`.

    A directory (existing, ending in a separator, or a name without a suffix) gets `<service>-<host>-<pid><suffix>`,
    so a directory of traces says which process wrote what. A file path is used as given, except in a process that
    inherited it from another one (`owner_pid`, default the `GOODPUT_TRACE_OWNER_PID` environment variable, names a
    different process): that process writes the sibling `<stem>.<host>-<pid><suffix>` so two writers never share a file.
    """
    raw = os.fspath(path) if path is not None else DEFAULT_TRACE_DIR
    target = pathlib.Path(raw)
    host = _safe_name_part(socket.gethostname(), "host")
    pid = os.getpid()
    separators = tuple(sep for sep in (os.sep, os.altsep) if sep)
    if target.is_dir() or raw.endswith(separators) or not target.suffix:
        return target / f"{_safe_name_part(service_name, 'unknown_service')}-{host}-{pid}{suffix}"
    if owner_pid is None:
        owner_env = os.environ.get(ENV_TRACE_OWNER_PID, "").strip()
        owner_differs = bool(owner_env) and owner_env != str(pid)
    else:
        owner_differs = owner_pid != pid
    if owner_differs:
        return target.with_name(f"{target.stem}.{host}-{pid}{target.suffix}")
    return target


# Exporters alive in this process, so a forked child can drop the parent's open file and lock (see _reset_after_fork).
_live_exporters: weakref.WeakSet[_LazyFileExporter] = weakref.WeakSet()


class _LazyFileExporter(SpanExporter, abc.ABC):
    """Shared life cycle of the file exporters: resolve and open on the first non-empty batch, one record per batch.

    Subclasses say how to encode one batch as one record (`_encode`); this class owns the file, the lock, the error
    handling and shutdown. A batch that fails part-way is cut off the file again, so a write error leaves no torn
    record in the middle of a file (readers only tolerate a torn *final* record).

    A write that fails (a full disk, a folder that cannot be made) is logged once, with its cause and no traceback,
    and the spans of every batch not written are counted (`spans_not_written`, logged by `shutdown()`): a job that
    fills its disk would otherwise log a line per batch for the rest of its run. Later batches are still tried, so
    a trace goes on once there is room again.
    """

    suffix = ""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, service_name: str = "unknown_service") -> None:
        self._target = path if path is not None else DEFAULT_TRACE_DIR
        self._service_name = service_name
        self._created_pid = os.getpid()
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._file_path: pathlib.Path | None = None
        self._is_shut_down = False
        self.spans_not_written = 0
        self._first_failure: str | None = None
        self._prepared: tuple[int, pathlib.Path] | None = None  # (pid, the file `prepare` resolved for it)
        _live_exporters.add(self)

    @property
    def file_path(self) -> pathlib.Path | None:
        """The file this process writes, or None until the first span has been exported."""
        return self._file_path

    def prepare(self, resource: Resource | None = None) -> None:
        """Pay now what the first export would pay on the job's clock (configure() calls this): importing and first
        using the encoder (tens of milliseconds: `bench/instrument.py`), on a span of `resource`, and resolving the
        file's name. The folder and the file are still made by the first export, so a process that exports nothing
        leaves nothing on disk. Never raises: what fails here fails again at the first export, reported there."""
        try:
            self._encode([_sample_span(resource)])
            self._prepared = (os.getpid(), self._resolve_path())
        except Exception:
            logger.debug("goodput: preparing the %s exporter failed", self.suffix, exc_info=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append `spans` as one record; FAILURE (counted, logged once, never raised) after shutdown or on an error."""
        if not spans:
            return SpanExportResult.SUCCESS
        with self._lock:
            if self._is_shut_down:
                logger.debug("goodput: %d spans exported after shutdown were dropped", len(spans))
                return SpanExportResult.FAILURE
            try:
                record = self._encode(spans)
            except Exception as error:  # an encoding bug must not reach the training loop either
                self._not_written(len(spans), f"could not encode them ({type(error).__name__}: {error})", error)
                return SpanExportResult.FAILURE
            if not record:
                return SpanExportResult.SUCCESS
            size_before = None
            try:
                if self._file is None:
                    self._open_file()
                assert self._file is not None
                size_before = os.fstat(self._file.fileno()).st_size
                self._file.write(record)
                self._file.flush()
            except OSError as error:
                self._not_written(len(spans), str(error))
                if size_before is not None:
                    self._discard_file(size_before)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file and say how many spans were not written; later exports return FAILURE. Safe twice."""
        with self._lock:
            if self._is_shut_down:
                return
            self._is_shut_down = True
            self._close_file()
            if self.spans_not_written:
                count = self.spans_not_written
                logger.warning(
                    "goodput: %s of this process %s not written to %s (%s)",
                    _spans(count), "was" if count == 1 else "were", self._where(), self._first_failure,
                )  # fmt: skip

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Nothing to do: every record is flushed as it is written."""
        return True

    def _not_written(self, count: int, cause: str, error: BaseException | None = None) -> None:
        """Count `count` spans lost; the first loss is logged with its cause (with the traceback only for an encoding
        bug, which is ours), later ones only at debug level."""
        self.spans_not_written += count
        if self._first_failure is not None:
            logger.debug("goodput: %s not written to %s: %s", _spans(count), self._where(), cause)
            return
        self._first_failure = cause
        logger.warning(
            "goodput: could not write %s to %s: %s; the job goes on, and spans that cannot be written are dropped "
            "and counted (shutdown() says how many)",
            _spans(count), self._where(), cause, exc_info=error,
        )  # fmt: skip

    def _where(self) -> pathlib.Path | str | os.PathLike[str]:
        return self._file_path or self._target

    def _resolve_path(self) -> pathlib.Path:
        forked = os.getpid() != self._created_pid
        return trace_file_path(
            self._target, self.suffix, self._service_name, owner_pid=self._created_pid if forked else None
        )

    def _open_file(self) -> None:
        prepared, self._prepared = self._prepared, None  # once: a reopen after a failed write resolves it again
        path = prepared[1] if prepared is not None and prepared[0] == os.getpid() else self._resolve_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab")  # noqa: SIM115 - closed by shutdown() or after a failed write
        self._file_path = path

    def _discard_file(self, size_before: int) -> None:
        """Close the file and cut it back to `size_before`, dropping whatever part of the failed record got out."""
        path = self._file_path
        self._close_file(quiet=True)  # its flush may fail again on the bytes we are about to cut off
        if path is not None:
            with contextlib.suppress(OSError):
                os.truncate(path, size_before)

    def _close_file(self, quiet: bool = False) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as error:
                if not quiet:
                    logger.warning("goodput: closing %s failed, its last spans may be lost: %s", self._file_path, error)

    def _reset_after_fork(self) -> None:
        """In a forked child: forget the parent's file, lock and losses, so the child resolves and opens a file of
        its own and counts only what it loses itself."""
        self._lock = threading.Lock()
        self._file = None  # the parent's file object; every record was flushed, so dropping it loses nothing
        self._file_path = None
        self.spans_not_written = 0
        self._first_failure = None

    @abc.abstractmethod
    def _encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """`spans` as one record of the format, ready to append; empty when there is nothing to write."""


def _sample_span(resource: Resource | None) -> ReadableSpan:
    """A finished span of `resource` shaped as a job's are (a group, an iteration, a bucket), for `prepare`."""
    context = SpanContext(trace_id=1, span_id=1, is_remote=False)
    attributes: dict[str, AttributeValue] = {"rl.span_group": "step", "rl.iteration": 0, "rl.bucket": "productive"}
    return ReadableSpan(
        name="goodput.prepare", context=context, resource=resource or Resource.get_empty(), attributes=attributes,
        start_time=1, end_time=2, instrumentation_scope=InstrumentationScope("goodput.prepare"),
    )  # fmt: skip


def _reset_exporters_after_fork() -> None:
    for exporter in list(_live_exporters):
        exporter._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_exporters_after_fork)


class FramedProtobufFileExporter(_LazyFileExporter):
    """OTLP protobuf as the OpenTelemetry Collector `file` exporter writes it with `format: proto`.

    Each batch is one `ExportTraceServiceRequest` (the official OTLP encoder's message, encoded faster by
    `otlp_encode`) preceded by its length as a 4-byte big-endian unsigned int, so the files are interchangeable with
    a Collector's and readable without us.
    """

    suffix = ".otlp"

    def _encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        from .otlp_encode import encode_request

        message = encode_request(spans)
        return struct.pack(">I", len(message)) + message


class JsonLinesFileExporter(_LazyFileExporter):
    """OTLP JSON Lines: one `{"resourceSpans": ...}` object per line, ids in hex, as the OTLP file exporter spec says.

    The line is the official `opentelemetry-exporter-otlp-json-file` exporter's: its encoder
    (`opentelemetry-exporter-otlp-json-common`, which it depends on) and its compact `json.dumps`. The write is ours,
    as for the framed files: that exporter logs a traceback for every batch a full disk refuses, and its package
    imports its metrics exporter too, a tenth of a second of a first export (`bench/instrument.py`).
    """

    suffix = ".jsonl"

    def _encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

        data = encode_spans(spans)
        if not data.resource_spans:
            return b""
        return (json.dumps(data.to_dict(), separators=(",", ":")) + "\n").encode("utf-8")


def _otlp_collector_exporter() -> SpanExporter:
    """The official OTLP exporter for a Collector; gRPC unless the standard OTEL_* protocol variables ask for HTTP."""
    protocol = (
        os.environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) or os.environ.get(OTEL_EXPORTER_OTLP_PROTOCOL) or "grpc"
    ).strip()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        elif protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
        else:
            raise ValueError(f"goodput: OTLP protocol {protocol!r} is not supported; use 'grpc' or 'http/protobuf'")
    except ImportError as error:
        raise ImportError(
            f"goodput: exporter 'otlp' ({protocol}) needs the OpenTelemetry OTLP exporter: pip install 'goodput[otlp]'"
        ) from error
    return OTLPSpanExporter()


def make_span_exporter(kind: str, path: str | os.PathLike[str] | None, service_name: str) -> SpanExporter:
    """The exporter `configure(exporter=kind)` installs: one of `EXPORTER_KINDS`.

    `path` only matters to the file kinds (None means the directory `./goodput_traces`); the Collector exporter takes
    its endpoint, headers and protocol from the standard `OTEL_EXPORTER_OTLP_*` variables.
    """
    if kind == "otlp-file":
        return FramedProtobufFileExporter(path, service_name=service_name)
    if kind == "json-file":
        return JsonLinesFileExporter(path, service_name=service_name)
    if kind == "otlp":
        return _otlp_collector_exporter()
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # Today's stdout, not the one bound when the SDK module was imported (a redirect since then must count).
        return ConsoleSpanExporter(service_name=service_name, out=sys.stdout)
    raise ValueError(f"goodput: unknown exporter {kind!r}; expected one of {', '.join(map(repr, EXPORTER_KINDS))}")
