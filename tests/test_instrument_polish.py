"""Issue 11, instrumentation: what a new user and a code review tripped over, each hit the way a user hits it.

Real OTel SDK throughout: files on disk, a bare child process as a Ray worker is, or the SDK's in-memory exporter
handed to configure(); logging read with caplog on the "instrument" logger.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import instrument
from conftest import read_framed_spans
from instrument import RLSpanGroup, managed_span, umbrella_span
from instrument.provider import STATE


def instrument_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "instrument" and r.levelno >= logging.WARNING]


class BatchRecorder(SpanExporter):
    """Keeps every span and the size of every batch the processor handed over."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.names: list[str] = []

    def export(self, spans):
        self.batches.append(len(spans))
        self.names.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS


# --- OTEL_BSP_*: read as the SDK reads them, never a reason for configure() to raise --------------------------------


def test_the_sdks_own_default_queue_size_works(tmp_path, monkeypatch):
    """OTEL_BSP_MAX_QUEUE_SIZE=2048 is what the SDK uses by default; goodput's larger batch default gives way."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "2048")
    instrument.configure(span_groups="all", exporter="otlp-file", path=tmp_path / "run.otlp")
    with umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"), managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
        pass
    instrument.shutdown()
    assert {s.name for s in read_framed_spans(tmp_path / "run.otlp")} == {"rl.grpo.step", "rl.grpo.generation"}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "1e4"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "0"),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
        ("OTEL_BSP_EXPORT_TIMEOUT", "never"),
    ],
)
def test_a_value_the_sdk_would_refuse_is_logged_and_ignored(tmp_path, monkeypatch, caplog, variable, value):
    monkeypatch.setenv(variable, value)
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter="otlp-file", path=tmp_path / "run.otlp")
    with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
        pass
    instrument.shutdown()
    assert [s.name for s in read_framed_spans(tmp_path / "run.otlp")] == ["rl.grpo.reward"]
    (message,) = [m for m in instrument_warnings(caplog) if variable in m]
    assert repr(value) in message or value in message


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_variable_counts_as_unset(monkeypatch, caplog, value):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", value)
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    assert STATE.processor is not None and STATE.processor._capacity == 65_536
    assert instrument_warnings(caplog) == []


def test_what_the_sdk_accepts_is_used(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5")
    caplog.set_level(logging.WARNING, logger="instrument")
    recorder = BatchRecorder()
    instrument.configure(span_groups="all", exporter=recorder)
    for i in range(12):
        with managed_span(RLSpanGroup.REWARD, f"rl.grpo.reward.{i}"):
            pass
    instrument.force_flush()
    assert len(recorder.names) == 12
    assert max(recorder.batches) <= 5
    assert instrument_warnings(caplog) == []


def test_a_batch_larger_than_the_queue_is_cut_to_the_queue_with_one_message(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    caplog.set_level(logging.WARNING, logger="instrument")
    recorder = BatchRecorder()
    instrument.configure(span_groups="all", exporter=recorder)
    for i in range(8):
        with managed_span(RLSpanGroup.REWARD, f"rl.grpo.reward.{i}"):
            pass
    instrument.force_flush()
    assert len(recorder.names) == 8 and max(recorder.batches) <= 8
    (message,) = instrument_warnings(caplog)
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=64" in message and "OTEL_BSP_MAX_QUEUE_SIZE=8" in message


def test_a_batch_larger_than_goodputs_default_queue_grows_the_queue(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100000")
    caplog.set_level(logging.WARNING, logger="instrument")
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    assert STATE.processor is not None and STATE.processor._capacity == 100_000
    assert instrument_warnings(caplog) == []


@pytest.mark.parametrize("queue", ["2048", "lots"])
def test_a_worker_that_calls_configure_bare_survives_a_cluster_wide_variable(tmp_path, queue):
    """Ray workers call configure() bare: a variable set for the whole cluster must not stop any of them."""
    trace_dir = tmp_path / "run"
    instrument.configure(service_name="driver", span_groups="all", exporter="otlp-file", path=trace_dir)
    instrument.shutdown()
    child = """
        import instrument
        from instrument import RLSpanGroup, managed_span
        instrument.configure(service_name="worker")
        with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
            pass
    """
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(child)],
        env={**os.environ, "OTEL_BSP_MAX_QUEUE_SIZE": queue},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (written,) = trace_dir.iterdir()
    assert written.name.startswith("worker-")
    assert [s.name for s in read_framed_spans(written)] == ["rl.grpo.generation"]
