"""Telling a trace from what is not one: records of other OTLP signals in a trace file, and files with no trace.

A Collector whose metrics or logs pipeline shares the traces' `file` exporter writes their records into the trace
file. In JSON they are told by their top-level key (`resourceMetrics`, `resourceLogs`); in protobuf, where a record
is only a length and bytes, a metrics or logs message parsed as traces has "spans" that cannot be spans (a metric's
name where the trace id would be, no span id). Such records are skipped, with one note per file; a file with no span
at all is not a trace, and is called what it is ("an OTLP metrics file, not a trace"), never a corrupt trace.

`NotATrace` is the error for a file that holds no trace at all, as against a trace with a damaged record: inside a
directory named on the command line such a file is skipped with a note (a README beside the traces), while a file
named directly is still an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rollup.base.errors import TraceFormatError

# Top-level keys of the other signals' OTLP JSON records, in either naming proto3 JSON allows.
JSON_SIGNAL_KEYS = {
    "resourceMetrics": "metrics",
    "resource_metrics": "metrics",
    "resourceLogs": "logs",
    "resource_logs": "logs",
    "resourceProfiles": "profiles",
    "resource_profiles": "profiles",
}
UNKNOWN_SIGNAL = ""  # a protobuf record whose spans cannot be spans, of no signal recognised


class NotATrace(TraceFormatError):
    """A file that holds no trace (a text file, a JSON document that is not OTLP, another signal alone), as against
    a trace with a corrupt record. Named directly it is an error; found in a directory it is skipped with a note."""


def skip_notice(error: TraceFormatError) -> str:
    """The note that a file found in a directory was skipped for `error`."""
    return f"{error.path}: skipped: {error.where + ': ' if error.where else ''}{error.problem}"


def json_record_signal(keys: Iterable[str] | None) -> str | None:
    """What a JSON record without a span list is, by its top-level keys: "" for `{}` (an empty batch), the signal
    ("metrics", "logs", "profiles") of another signal's record, None for anything else (not an OTLP record)."""
    if keys is None:
        return None
    keys = list(keys)
    if not keys:
        return ""
    signals = {JSON_SIGNAL_KEYS[key] for key in keys if key in JSON_SIGNAL_KEYS}
    return signals.pop() if len(signals) == 1 else None


def plausible_span(span: Any) -> bool:
    """Whether a span parsed from protobuf has the ids a span has (16-byte trace id, 8-byte span id)."""
    return len(span.trace_id) == 16 and len(span.span_id) == 8


def proto_signal(data: bytes) -> str | None:
    """The signal, "metrics" or "logs", when `data` reads as that signal's OTLP message (every metric named, every
    log record timed: a message of one signal parsed as the other has neither), else None."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.logs.v1.logs_pb2 import LogsData
    from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData

    def parsed(message_class: Any) -> Any:
        try:
            return message_class.FromString(data)
        except (DecodeError, RecursionError, ValueError):
            return None

    metrics = parsed(MetricsData)
    if metrics is not None:
        names = [m.name for rm in metrics.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]
        if names and all(names):
            return "metrics"
    logs = parsed(LogsData)
    if logs is not None:
        times = [
            r.time_unix_nano or r.observed_time_unix_nano
            for rl in logs.resource_logs
            for sl in rl.scope_logs
            for r in sl.log_records
        ]
        if times and all(times):
            return "logs"
    return None


def _signal_words(counts: Mapping[str, int]) -> str:
    named = sorted(signal for signal in counts if signal)
    return " and ".join(named) if named else "another signal"


def skipped_notice(path: str, counts: Mapping[str, int]) -> str:
    """The one note for a file in which `counts` records of other signals (by signal) were skipped."""
    total = sum(counts.values())
    what = f"{total} OTLP {_signal_words(counts)} record{'s' if total != 1 else ''}"
    if UNKNOWN_SIGNAL in counts and len(counts) == 1:
        what += " (spans without a 16-byte trace id and an 8-byte span id)"
    return f"{path}: {what} skipped: other signals than traces share this file"


def not_a_trace_error(path: str, kind: str, counts: Mapping[str, int]) -> NotATrace:
    """The error for a file of `kind` (`sniff.FORMATS`) from which no span was read, `counts` being the other
    signals' records skipped in it."""
    if not counts:
        return NotATrace(path, "", f"not a trace file: no span could be read from it ({kind})")
    if UNKNOWN_SIGNAL in counts and len(counts) == 1:
        problem = "not a trace file: its records hold no span with a 16-byte trace id and an 8-byte span id"
    else:
        problem = f"an OTLP {_signal_words(counts)} file, not a trace"
    return NotATrace(path, "", problem)
