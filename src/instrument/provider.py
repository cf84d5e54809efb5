"""`configure()` and `shutdown()`: the one place where the SDK, the exporter and the enabled groups are wired.

Call sites only ever use the span helpers; what those emit, and where it goes, is decided here. The enabled groups
and the tracer live in one module-level object so the hot path reads two attributes and nothing else.
"""

from __future__ import annotations

import atexit
import datetime
import os
import secrets
import socket
import threading
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

from ._log import logger, warn_once
from .gpus import GpuSpec, with_holdings
from .groups import EveryGroupBut, group_gate, resolve_span_groups
from .process_start import process_creation_time
from .processor import DEFAULT_MAX_QUEUE_SIZE, CountingBatchSpanProcessor
from .wire import (
    BAGGAGE_EXPORTER,
    BAGGAGE_RUN_ID,
    BAGGAGE_SPAN_GROUPS,
    BAGGAGE_TRACE_OWNER,
    BAGGAGE_TRACE_PATH,
    ENV_EXPORTER,
    ENV_RUN_ID,
    ENV_SPAN_GROUPS,
    ENV_TRACE_OWNER_PID,
    ENV_TRACE_PATH,
    OTEL_BSP_EXPORT_TIMEOUT,
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
    OTEL_BSP_MAX_QUEUE_SIZE,
    OTEL_BSP_SCHEDULE_DELAY,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_SERVICE_NAME,
    OTEL_TRACES_EXPORTER,
    RESOURCE_PROCESS_CREATION_TIME,
    RESOURCE_RUN_ID,
    RL_ITERATION_ATTR,
)

INSTRUMENTATION_SCOPE = "goodput.instrument"

FILE_EXPORTERS = ("otlp-file", "json-file")

DEFAULT_MAX_EXPORT_BATCH_SIZE = 4_096
DEFAULT_SCHEDULE_DELAY_MILLIS = 5_000  # the SDK's own defaults
DEFAULT_EXPORT_TIMEOUT_MILLIS = 30_000

_ITERATION: ContextVar[int | None] = ContextVar("goodput_iteration", default=None)


class _Telemetry:
    """What the span helpers read on every call: the enabled groups (as `gate`) and the tracer to open spans on."""

    __slots__ = ("enabled", "gate", "tracer", "provider", "processor", "carrier_refused", "handed_on")

    def __init__(self) -> None:
        self.enabled: frozenset[str] | EveryGroupBut = frozenset()
        # `group in enabled` as a dict, the span helpers' one lookup (see `groups.group_gate`). Always replaced
        # after `enabled`, so an entry learned from `enabled` on first sight is never older than the gate.
        self.gate: dict[str, bool] = group_gate(self.enabled)
        self.tracer: trace.Tracer | None = None
        self.provider: TracerProvider | None = None
        self.processor: CountingBatchSpanProcessor | None = None
        # Ray methods whose signature rejected the trace carrier once (`ray_dispatch._CARRIER_REFUSED`); a new
        # set-up may come with redefined actors, so configure() empties it again (in place: one set object).
        self.carrier_refused: set[str] = set()
        # The set-up a carrier hands on as W3C baggage (wire.BAGGAGE_*), so a worker that never called configure()
        # is configured like its caller (see `worker_setup`).
        self.handed_on: dict[str, str] = {}


STATE = _Telemetry()
_configure_lock = threading.Lock()


class _IterationStampProcessor(SpanProcessor):
    """Stamp the enclosing `iteration_scope` on every span this provider starts, auto-instrumented ones included.

    A span that passed `rl.iteration` itself keeps its value: the scope only fills what is missing.
    """

    def on_start(self, span: Span, parent_context: Any = None) -> None:
        iteration = _ITERATION.get()
        if iteration is not None and RL_ITERATION_ATTR not in (span.attributes or {}):
            span.set_attribute(RL_ITERATION_ATTR, iteration)


class _SwappableTracerProvider(trace.TracerProvider):
    """The global provider: a stable object whose tracers follow whatever `configure` installed last.

    OpenTelemetry lets the global provider be set once per process; routing through this proxy lets a later
    `configure` (a test, a notebook) replace the set-up without the SDK's "overriding" refusal, and keeps spans of
    auto-instrumented libraries in the same trace as ours.
    """

    def get_tracer(self, instrumenting_module_name: str, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwappableTracer(instrumenting_module_name, args, kwargs)


class _SwappableTracer(trace.Tracer):
    def __init__(self, name: str, args: tuple, kwargs: dict) -> None:
        self._name, self._args, self._kwargs = name, args, kwargs
        self._provider: TracerProvider | None = None
        self._tracer: trace.Tracer = trace.NoOpTracer()

    def _current(self) -> trace.Tracer:
        provider = STATE.provider
        if provider is not self._provider:
            self._provider = provider
            self._tracer = (
                provider.get_tracer(self._name, *self._args, **self._kwargs) if provider else trace.NoOpTracer()
            )
        return self._tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._current().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._current().start_as_current_span(*args, **kwargs)


_GLOBAL_PROXY = _SwappableTracerProvider()


def _install_global_proxy() -> None:
    current = trace.get_tracer_provider()
    if current is _GLOBAL_PROXY:
        return
    if isinstance(current, trace.ProxyTracerProvider):
        trace.set_tracer_provider(_GLOBAL_PROXY)
        return
    warn_once(
        "global-provider",
        "goodput: a global TracerProvider (%s) was set before configure(); goodput's spans go to its own provider "
        "and auto-instrumented libraries keep the existing one",
        type(current).__name__,
    )


def _default_exporter_kind(path: str | None) -> str:
    """With neither argument nor GOODPUT_EXPORTER: what the path or the standard OTEL_* variables imply."""
    standard = os.environ.get(OTEL_TRACES_EXPORTER, "").strip().lower()
    if path is None and standard in ("otlp", "console"):
        return standard
    if path is None and (
        os.environ.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or os.environ.get(OTEL_EXPORTER_OTLP_ENDPOINT)
    ):
        return "otlp"
    return _file_exporter_kind(path)


def _file_exporter_kind(path: str | None) -> str:
    if path is not None and str(path).endswith((".jsonl", ".json", ".ndjson")):
        return "json-file"
    return "otlp-file"


def _resource(service_name: str | None, resource_attributes: Mapping[str, Any] | None) -> Resource:
    host, pid = socket.gethostname(), os.getpid()
    attributes: dict[str, Any] = {"host.name": host, "process.pid": pid}
    if service_name:
        attributes["service.name"] = service_name
    elif not os.environ.get(OTEL_SERVICE_NAME):
        # A Ray actor or task that calls configure() bare is named for its class or function, not for this tool.
        from .ray_worker import ray_worker_name

        attributes["service.name"] = ray_worker_name() or "goodput"
    attributes.update(resource_attributes or {})
    resource = Resource.create(attributes)
    if RESOURCE_PROCESS_CREATION_TIME not in resource.attributes:  # the job's own value (argument or OTEL_*) wins
        resource = resource.merge(Resource({RESOURCE_PROCESS_CREATION_TIME: process_creation_time()}))
    if "service.instance.id" not in (resource_attributes or {}) and "service.instance.id=" not in os.environ.get(
        OTEL_RESOURCE_ATTRIBUTES, ""
    ):
        # The SDK's default is a random UUID; a reader of `goodput report --by process` wants to see which process.
        instance = f"{resource.attributes.get('service.name')}@{host}:{pid}"
        resource = resource.merge(Resource({"service.instance.id": instance}))
    return resource


def _run_id(run_id: str | None, resource_attributes: Mapping[str, Any] | None, service: str) -> str:
    """The attempt this process belongs to (SPEC section 7): the argument, else `GOODPUT_RUN_ID`, else a new one,
    `<service>-<UTC yyyymmddThhmmss>-<6 hex>`, made once: it goes into the environment for every process started
    from here on."""
    chosen = run_id or str((resource_attributes or {}).get(RESOURCE_RUN_ID) or "") or os.environ.get(ENV_RUN_ID)
    if not chosen:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        chosen = f"{service}-{stamp}-{secrets.token_hex(3)}"
    os.environ[ENV_RUN_ID] = chosen
    return chosen


def _bsp_variable(name: str, default: int, *, positive: bool = True) -> tuple[int, bool]:
    """`(value, whether the environment chose it)` for one `OTEL_BSP_*` variable, read as the SDK reads it (an
    integer), except that a value the SDK would refuse later is logged and replaced by the default here."""
    raw = os.environ.get(name, "").strip()
    if not raw:  # unset, or set to nothing: the OTel specification treats an empty value as unset
        return default, False
    try:
        value = int(raw)
    except ValueError:
        logger.warning("goodput: %s=%r is not an integer; using %d", name, raw, default)
        return default, False
    if positive and value <= 0:
        logger.warning("goodput: %s=%d must be positive; using %d", name, value, default)
        return default, False
    return value, True


def _batch_settings() -> dict[str, int]:
    """The batch processor's settings from the `OTEL_BSP_*` variables. Never raises: a Ray worker calls configure()
    bare, so one bad cluster-wide variable must not stop every worker. A batch never exceeds the queue: a default
    gives way to the value the environment set, and where both are set the batch is cut to the queue."""
    queue, queue_set = _bsp_variable(OTEL_BSP_MAX_QUEUE_SIZE, DEFAULT_MAX_QUEUE_SIZE)
    batch, batch_set = _bsp_variable(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, DEFAULT_MAX_EXPORT_BATCH_SIZE)
    if batch > queue:
        if batch_set and not queue_set:
            queue = batch
        else:
            if batch_set:
                logger.warning(
                    "goodput: %s=%d exceeds %s=%d; exporting batches of at most %d spans",
                    OTEL_BSP_MAX_EXPORT_BATCH_SIZE, batch, OTEL_BSP_MAX_QUEUE_SIZE, queue, queue,
                )  # fmt: skip
            batch = queue
    delay, _ = _bsp_variable(OTEL_BSP_SCHEDULE_DELAY, DEFAULT_SCHEDULE_DELAY_MILLIS)
    # The SDK accepts any integer as the export timeout (it does not use it), so only a non-integer is replaced.
    timeout, _ = _bsp_variable(OTEL_BSP_EXPORT_TIMEOUT, DEFAULT_EXPORT_TIMEOUT_MILLIS, positive=False)
    return {
        "max_queue_size": queue,
        "max_export_batch_size": batch,
        "schedule_delay_millis": delay,
        "export_timeout_millis": timeout,
    }


def _handed_on(groups: str, exporter_kind: str | None, path: str | None, run_id: str) -> dict[str, str]:
    """What a carrier hands on of this set-up: the run id, the groups, and the exporter and path where a worker
    can build the same (a SpanExporter object cannot travel)."""
    out = {BAGGAGE_RUN_ID: run_id, BAGGAGE_SPAN_GROUPS: groups}
    if exporter_kind in (*FILE_EXPORTERS, "otlp", "console"):
        out[BAGGAGE_EXPORTER] = exporter_kind
    if path is not None and exporter_kind in FILE_EXPORTERS:
        out[BAGGAGE_TRACE_PATH] = os.path.abspath(path)
        out[BAGGAGE_TRACE_OWNER] = os.environ.get(ENV_TRACE_OWNER_PID) or str(os.getpid())
    return out


def _export_choice_to_environment(groups: str, exporter_kind: str | None, path: str | None) -> None:
    """Leave the choice in os.environ, so a process started afterwards (a Ray worker) inherits it bare."""
    os.environ[ENV_SPAN_GROUPS] = groups
    if exporter_kind is not None:
        os.environ[ENV_EXPORTER] = exporter_kind
    if path is not None and exporter_kind in FILE_EXPORTERS:
        os.environ[ENV_TRACE_PATH] = os.path.abspath(path)
        # The first process to choose a single file owns it; a worker that inherits it writes a sibling instead.
        os.environ.setdefault(ENV_TRACE_OWNER_PID, str(os.getpid()))


def configure(
    *,
    service_name: str | None = None,
    span_groups: str | Iterable[str] | None = None,
    exporter: str | SpanExporter | None = None,
    path: str | os.PathLike[str] | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    gpus: GpuSpec | None = None,
    fleet: str | None = None,
) -> TracerProvider:
    """Wire the SDK: which span groups are on, which exporter writes them, and the process's resource.

    Arguments left out come from `GOODPUT_SPAN_GROUPS`, `GOODPUT_EXPORTER` and `GOODPUT_TRACE_PATH`, then from the
    defaults (`span_groups="default"`; a file exporter when a path is given, the OTLP exporter when an
    `OTEL_EXPORTER_OTLP_*ENDPOINT` is set, else framed protobuf files in `./goodput_traces/`). The choice is written
    back to the environment so Ray workers that call `configure()` bare follow the driver, and handed on with every
    trace carrier so a worker that never calls it is configured like its caller. `run_id` names the attempt
    (SPEC section 7): the argument, else `GOODPUT_RUN_ID`, else generated once. `gpus` (a count, ids, or text read
    as `GOODPUT_GPUS`) and `fleet` say what this process holds (SPEC section 12, `gpus.py`): else `GOODPUT_GPUS` and
    `GOODPUT_FLEET`, else in a Ray actor or task the GPUs Ray assigned it; a process told nothing holds none. They
    are this process's own, so neither is written to the environment nor handed on. Calling it again
    replaces the earlier set-up, flushing what that one held. An unknown or uninstallable `exporter` argument raises;
    the same named only by the environment gets a warning and the file exporter, since the job did not ask for it.
    """
    from .exporters import FramedProtobufFileExporter, JsonLinesFileExporter, make_span_exporter

    groups_spec: str | list[str] = (
        (span_groups if isinstance(span_groups, str) else list(span_groups) if span_groups is not None else "")
        or os.environ.get(ENV_SPAN_GROUPS)
        or "default"
    )
    enabled = resolve_span_groups(groups_spec)
    trace_path = os.fspath(path) if path is not None else os.environ.get(ENV_TRACE_PATH) or None
    exporter_kind: str | None = None
    from_environment = exporter is None
    if exporter is None:
        exporter = exporter_kind = os.environ.get(ENV_EXPORTER) or _default_exporter_kind(trace_path)
    elif isinstance(exporter, str):
        exporter_kind = exporter
    resource = with_holdings(_resource(service_name, resource_attributes), gpus, fleet)
    service = str(resource.attributes.get("service.name"))
    run = _run_id(run_id, resource_attributes, service)
    resource = resource.merge(Resource({RESOURCE_RUN_ID: run}))
    if isinstance(exporter, str):
        try:
            span_exporter = make_span_exporter(exporter, trace_path, service)
        except (ValueError, ImportError) as error:
            if not from_environment:
                raise  # a mistake in the job's own code: say so at once
            # A variable the job did not set must not stop it: keep the spans in files instead.
            exporter_kind = _file_exporter_kind(trace_path)
            logger.warning("goodput: %s (from the environment); writing %s files instead", error, exporter_kind)
            span_exporter = make_span_exporter(exporter_kind, trace_path, service)
    else:
        span_exporter = exporter

    provider = TracerProvider(resource=resource)
    provider.add_span_processor(_IterationStampProcessor())
    # A file is written in this process, at the cost of an encode and a write a step: a crash then loses at most the
    # step in progress. An exporter to a Collector keeps the SDK's batching (a network round trip a step is not).
    on_step = False
    if isinstance(span_exporter, (FramedProtobufFileExporter, JsonLinesFileExporter)):
        on_step = True
        span_exporter.prepare(provider.resource)  # what the first step's end would pay (the encoder), paid here
    processor = CountingBatchSpanProcessor(span_exporter, flush_on_step=on_step, **_batch_settings())
    provider.add_span_processor(processor)

    with _configure_lock:
        _shutdown_locked()
        STATE.provider = provider
        STATE.processor = processor
        STATE.tracer = provider.get_tracer(INSTRUMENTATION_SCOPE)
        STATE.enabled = enabled
        STATE.gate = group_gate(enabled)
        STATE.carrier_refused.clear()  # the same set `ray_dispatch._CARRIER_REFUSED` is
    _install_global_proxy()
    groups_text = groups_spec if isinstance(groups_spec, str) else ",".join(str(name) for name in groups_spec)
    _export_choice_to_environment(groups_text, exporter_kind, trace_path)
    STATE.handed_on = _handed_on(groups_text, exporter_kind, trace_path, run)
    return provider


def _shutdown_locked() -> None:
    provider, processor = STATE.provider, STATE.processor
    STATE.enabled = frozenset()
    STATE.gate = group_gate(STATE.enabled)
    STATE.handed_on = {}
    STATE.tracer = None
    STATE.provider = None
    STATE.processor = None
    if provider is None:
        return
    try:
        provider.shutdown()
    except Exception:
        logger.exception("goodput: the span exporter failed while shutting down")
    if processor is not None and processor.dropped:
        logger.warning("goodput: %d spans were dropped because the export queue was full", processor.dropped)


def shutdown() -> None:
    """Flush every pending span and close the exporter; later spans are not recorded. Also runs at exit."""
    with _configure_lock:
        _shutdown_locked()


def force_flush(timeout_millis: int = 30_000) -> bool:
    """Export every span ended so far without closing anything (for a worker about to report back)."""
    provider = STATE.provider
    return provider.force_flush(timeout_millis) if provider is not None else True


def dropped_spans() -> int:
    """Spans lost since the last `configure`: dropped by a full export queue, or not written (a write that failed:
    a full disk; the file exporters count them)."""
    processor = STATE.processor
    return processor.dropped + processor.not_written if processor is not None else 0


atexit.register(shutdown)
