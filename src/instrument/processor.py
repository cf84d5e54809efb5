"""The batch span processor goodput installs: the SDK's, plus a count of dropped spans, the end-of-call guarantee and
the end-of-step one.

Ray ends actor processes without running atexit handlers, so a span still waiting in the batch queue when the
driver exits or kills the actor is lost. Spans that end inside a dispatched Ray call (`ray_dispatch`) are therefore
written before the call returns (`flush_ended_spans`). To keep that off the caller's clock, they are also handed to
a writer thread as they end: while the call does work that releases the GIL (a GPU kernel, I/O, a sleep), the
thread encodes and writes what has ended, and the return only writes the rest.

A job killed mid-step (SIGKILL, a node lost) runs no exit handler either, and the SDK holds ended spans for up to
`OTEL_BSP_SCHEDULE_DELAY` (5 s): the steps that had finished would be lost with the one in progress. So when a step
span ends (`rl.span_group = step`), it and every span ended before it are written to the process's file at once,
in the thread that ended it (`flush_on_step`, for the file exporters): a crash loses at most the step in progress.
As in a dispatched call, the spans ended during the step are handed to the writer thread as they end, so the step's
end writes only the last few. Without a file to write, spans are batched as the SDK batches them.
"""

from __future__ import annotations

import os
import threading
import time
from contextvars import ContextVar
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from ._log import logger
from .wire import RL_SPAN_GROUP_ATTR

# A burst of short spans (per-prompt work, a fast data plane) must not overflow the queue between two exports.
DEFAULT_MAX_QUEUE_SIZE = 65_536

_SETTLE_S = 0.001

IN_DISPATCHED_CALL: ContextVar[bool] = ContextVar("goodput_in_dispatched_call", default=False)

# The span group of a step span: ending one writes what has ended (`flush_on_step`).
_STEP_GROUP = "step"


class CountingBatchSpanProcessor(BatchSpanProcessor):
    """A batch processor that counts the spans it drops when its queue is full, so a lossy trace says so, that
    writes the spans of a dispatched call as they end and, with `flush_on_step`, everything ended so far when a step
    span ends (module docstring)."""

    def __init__(self, exporter: SpanExporter, *, flush_on_step: bool = False, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self.flush_on_step = flush_on_step
        self._span_exporter = exporter
        self.dropped = 0
        self._capacity = kwargs.get("max_queue_size") or DEFAULT_MAX_QUEUE_SIZE
        self._queue = getattr(self._batch_processor, "_queue", None)
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._writer_pid = 0
        self._stopping = False

    def on_end(self, span: ReadableSpan) -> None:
        if self._queue is not None and len(self._queue) >= self._capacity:
            self.dropped += 1
        super().on_end(span)
        if self.flush_on_step:
            if span.attributes and span.attributes.get(RL_SPAN_GROUP_ATTR) == _STEP_GROUP:
                flush_ended_spans(self)
            else:
                self._wake_writer()
        elif IN_DISPATCHED_CALL.get():
            self._wake_writer()

    @property
    def not_written(self) -> int:
        """Spans the exporter could not write (the file exporters count them: `exporters`); 0 for another one."""
        count = getattr(self._span_exporter, "spans_not_written", 0)
        return count if isinstance(count, int) else 0

    def _wake_writer(self) -> None:
        if self._writer is None or self._writer_pid != os.getpid():  # none yet, or the parent's before a fork
            self._writer_pid = os.getpid()
            self._wake = threading.Event()
            self._writer = threading.Thread(target=self._write_as_they_end, name="goodput-span-writer", daemon=True)
            self._writer.start()
        self._wake.set()

    def _write_as_they_end(self) -> None:
        while True:
            self._wake.wait()
            # Let the call go on first: spans that end back to back, with no GIL-free work between them, are left
            # to the call's own flush, which writes them in one batch; the thread only writes what ends before work.
            time.sleep(_SETTLE_S)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.export_pending()
            except Exception:
                logger.exception("goodput: writing the spans of a dispatched call failed")

    def export_pending(self) -> None:
        """Export what waits in the queue, in this thread, as one batch: `force_flush` without its per-batch context
        switch and bookkeeping. Falls back to `force_flush` where the SDK's internals are not as expected."""
        batch_processor = self._batch_processor
        lock, queue = getattr(batch_processor, "_export_lock", None), self._queue
        exporter = getattr(batch_processor, "_exporter", None)
        if lock is None or queue is None or exporter is None:
            self.force_flush()
            return
        with lock:  # every writer exports under the SDK's lock: never two at once, never a span twice
            batch = [queue.pop() for _ in range(len(queue))]  # the oldest are at the right
            if batch:
                metrics = getattr(batch_processor, "_metrics", None)
                if metrics is not None:
                    metrics.finish_items(len(batch))
                exporter.export(batch)

    def shutdown(self) -> None:
        self._stopping = True
        self._wake.set()
        super().shutdown()


def flush_ended_spans(processor: CountingBatchSpanProcessor | None) -> None:
    """Hand every span ended so far to the exporter, in this thread, now, and return once they are written: also
    those the writer thread (or the SDK's) took from the queue and is still writing, so an empty queue is not
    enough; nearly free when none waits (an uncontended lock). Logs, never raises."""
    if processor is None:
        return
    try:
        processor.export_pending()
    except Exception:
        logger.exception("goodput: writing the spans ended so far failed")
