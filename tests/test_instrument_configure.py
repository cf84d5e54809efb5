"""configure() end to end: real files, real child processes inheriting the choice through GOODPUT_* variables; the
process's start on its resource and the exporter prepared; and the SDK's OTEL_BSP_* variables, read as the SDK reads
them and never a reason for configure() to raise.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest

import instrument
from conftest import BatchRecorder, instrument_warnings, read_framed_spans, read_json_lines_spans
from instrument import RLSpanGroup, managed_span, process_start, umbrella_span
from instrument.provider import STATE
from instrument.wire import RESOURCE_PROCESS_CREATION_TIME

IMPORTED_AT_S = time.time()  # this test process started before this module was imported


def run_child(code: str) -> subprocess.CompletedProcess:
    """A fresh Python process with this process's environment, as a Ray worker or a forked launcher would have."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


CHILD_JOB = """
    import instrument
    from instrument import RLSpanGroup, managed_span, umbrella_span
    instrument.configure(service_name="worker")
    with umbrella_span(RLSpanGroup.U_JOB, "rl.grpo.worker_job"):
        with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
            pass
    # no shutdown(): the exporter must flush at exit on its own
"""


@pytest.mark.slow
def test_a_directory_gets_one_file_per_process_and_a_bare_child_inherits_the_choice(tmp_path):
    trace_dir = tmp_path / "run"
    instrument.configure(service_name="driver", span_groups=["job", "generation"], exporter="json-file", path=trace_dir)
    with (
        umbrella_span(RLSpanGroup.U_JOB, "rl.grpo.job"),
        managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"),  # not enabled: absent from the file
    ):
        pass
    run_child(CHILD_JOB)
    instrument.shutdown()

    files = sorted(trace_dir.iterdir())
    host = socket.gethostname()
    assert [f.name for f in files if f.name.startswith("driver-")] == [f"driver-{host}-{os.getpid()}.jsonl"]
    (child_file,) = [f for f in files if f.name.startswith("worker-")]
    assert child_file.suffix == ".jsonl"
    assert [s["name"] for s in read_json_lines_spans(files[0])] == ["rl.grpo.job"]
    child_spans = {s["name"]: s for s in read_json_lines_spans(child_file)}
    assert set(child_spans) == {"rl.grpo.worker_job", "rl.grpo.generation"}
    assert child_spans["rl.grpo.generation"]["attributes"]["rl.bucket"] == "productive"


def test_a_single_file_path_gives_an_inheriting_child_a_sibling_file(tmp_path):
    path = tmp_path / "run.otlp"
    instrument.configure(span_groups="all", exporter="otlp-file", path=path)
    with umbrella_span(RLSpanGroup.U_JOB, "rl.grpo.job"):
        pass
    run_child(CHILD_JOB)
    instrument.shutdown()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "run.otlp" in names and len(names) == 2
    sibling = tmp_path / next(n for n in names if n != "run.otlp")
    assert sibling.name.startswith(f"run.{socket.gethostname()}-") and sibling.suffix == ".otlp"
    assert [s.name for s in read_framed_spans(path)] == ["rl.grpo.job"]
    assert {s.name for s in read_framed_spans(sibling)} == {"rl.grpo.worker_job", "rl.grpo.generation"}


def test_a_process_that_exports_nothing_leaves_no_file(tmp_path):
    instrument.configure(span_groups="default", exporter="otlp-file", path=tmp_path / "traces")
    with managed_span(RLSpanGroup.GENERATION, "off by default"):
        pass
    instrument.shutdown()
    assert not (tmp_path / "traces").exists()


def test_explicit_arguments_win_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GOODPUT_SPAN_GROUPS", "all")
    monkeypatch.setenv("GOODPUT_EXPORTER", "json-file")
    monkeypatch.setenv("GOODPUT_TRACE_PATH", str(tmp_path / "from_env"))
    instrument.configure(span_groups="default", exporter="otlp-file", path=tmp_path / "explicit")
    with managed_span(RLSpanGroup.GENERATION, "off") as off:
        assert off is None
    with managed_span(RLSpanGroup.CHECKPOINT, "rl.grpo.checkpointing"):
        pass
    instrument.shutdown()
    (written,) = (tmp_path / "explicit").iterdir()
    assert written.suffix == ".otlp"
    assert not (tmp_path / "from_env").exists()
    assert os.environ["GOODPUT_SPAN_GROUPS"] == "default"


def test_the_resource_names_the_process(tmp_path):
    path = tmp_path / "one.jsonl"
    instrument.configure(service_name="trainer", span_groups="all", path=path, resource_attributes={"team": "rl"})
    with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
        pass
    instrument.shutdown()
    record = json.loads(path.read_text().splitlines()[0])
    resource = {a["key"]: a["value"] for a in record["resourceSpans"][0]["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "trainer"}
    assert resource["process.pid"]["intValue"] in (os.getpid(), str(os.getpid()))
    assert resource["host.name"] == {"stringValue": socket.gethostname()}
    assert resource["team"] == {"stringValue": "rl"}
    assert "service.instance.id" in resource


def test_importing_instrument_imports_neither_ray_nor_an_exporter():
    code = (
        "import sys, instrument; "
        "print(sorted(m for m in ('ray', 'grpc', 'opentelemetry.exporter.otlp.proto.grpc') if m in sys.modules))"
    )
    assert run_child(code).stdout.strip() == "[]"


def test_a_relative_path_reaches_children_made_absolute(tmp_path, monkeypatch):
    # Children may start in another working directory (Ray workers do), so the driver hands on an absolute path.
    monkeypatch.chdir(tmp_path)
    instrument.configure(span_groups="all", exporter="otlp-file", path="rel")
    assert os.environ["GOODPUT_TRACE_PATH"] == str(tmp_path / "rel")


def test_the_standard_otel_traces_exporter_variable_is_honoured_when_nothing_else_chooses(monkeypatch, capsys):
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    instrument.configure(span_groups="all", service_name="console-job")
    with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
        pass
    instrument.shutdown()
    assert '"name": "rl.grpo.reward"' in capsys.readouterr().out
    assert os.environ["GOODPUT_EXPORTER"] == "console"


def test_an_unusable_exporter_named_by_the_environment_falls_back_to_files(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GOODPUT_EXPORTER", "zipkin")
    monkeypatch.delenv("GOODPUT_TRACE_PATH", raising=False)
    with caplog.at_level("WARNING", logger="instrument"):
        instrument.configure(span_groups="all", service_name="fallback")
    with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
        pass
    instrument.shutdown()
    assert "unknown exporter 'zipkin'" in caplog.text and "writing otlp-file files instead" in caplog.text
    (written,) = (tmp_path / "goodput_traces").iterdir()
    assert [span.name for span in read_framed_spans(written)] == ["rl.grpo.reward"]
    assert os.environ["GOODPUT_EXPORTER"] == "otlp-file"  # workers inherit what works


def test_an_unusable_exporter_the_job_asks_for_is_an_error_at_once(tmp_path):
    with pytest.raises(ValueError, match="unknown exporter 'zipkin'"):
        instrument.configure(span_groups="all", exporter="zipkin", path=tmp_path / "t.otlp")


# --- process.creation.time, and the exporter prepared by configure() ---------------------------------------------

ISO_8601_UTC_MS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def creation_time_s(value: str) -> float:
    assert ISO_8601_UTC_MS.fullmatch(value), value
    return datetime.datetime.fromisoformat(value).timestamp()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the start is read from Linux's /proc")
def test_the_resource_says_when_the_process_started():
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    assert STATE.provider is not None
    started_s = creation_time_s(STATE.provider.resource.attributes[RESOURCE_PROCESS_CREATION_TIME])
    assert IMPORTED_AT_S - 3600 < started_s < IMPORTED_AT_S  # when pytest started, not when configure() ran


def test_where_the_os_cannot_say_the_first_configure_stands_in(monkeypatch):
    monkeypatch.setattr(process_start, "_started_from_proc", lambda: None)
    monkeypatch.setattr(process_start, "_answer", None)
    before_s = time.time()
    instrument.configure(span_groups="all", exporter=BatchRecorder())
    after_s = time.time()
    assert STATE.provider is not None
    first = STATE.provider.resource.attributes[RESOURCE_PROCESS_CREATION_TIME]
    assert before_s - 0.001 <= creation_time_s(str(first)) <= after_s
    instrument.configure(span_groups="all", exporter=BatchRecorder())  # again: the process did not start again
    assert STATE.provider.resource.attributes[RESOURCE_PROCESS_CREATION_TIME] == first


@pytest.mark.parametrize("through", ["argument", "OTEL_RESOURCE_ATTRIBUTES"])
def test_the_jobs_own_creation_time_wins(monkeypatch, through):
    if through == "argument":
        instrument.configure(exporter=BatchRecorder(), resource_attributes={"process.creation.time": "2020-01-01"})
    else:
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=rl,process.creation.time=2020-01-01")
        instrument.configure(exporter=BatchRecorder())
    assert STATE.provider is not None
    assert STATE.provider.resource.attributes[RESOURCE_PROCESS_CREATION_TIME] == "2020-01-01"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the start is read from Linux's /proc")
def test_a_process_that_configures_late_is_written_with_its_start_not_its_configure(tmp_path):
    path = tmp_path / "late.jsonl"
    child = f"""
        import time
        time.sleep(0.5)  # a job's imports and model loading, before it configures
        import instrument
        from instrument import RLSpanGroup, managed_span
        instrument.configure(service_name="late", span_groups="all", path={str(path)!r})
        with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
            pass
    """
    spawned_s = time.time()
    run_child(child)
    record = json.loads(path.read_text().splitlines()[0])
    resource = {a["key"]: a["value"] for a in record["resourceSpans"][0]["resource"]["attributes"]}
    started_s = creation_time_s(resource[RESOURCE_PROCESS_CREATION_TIME]["stringValue"])
    assert spawned_s - 0.02 <= started_s < spawned_s + 0.5  # a clock tick (10 ms) each side of when it was spawned


@pytest.mark.slow
@pytest.mark.parametrize(
    ("exporter", "encoder"),
    [("otlp-file", "instrument.otlp_encode"), ("json-file", "opentelemetry.exporter.otlp.json.common.trace_encoder")],
)
def test_configure_prepares_the_encoder_and_a_process_that_exports_nothing_still_leaves_nothing(
    tmp_path, exporter, encoder
):
    # The first export would import the encoder (tens of ms of a first step's end: bench/instrument.py); a fresh
    # process, so that nothing imported it before configure().
    trace_dir = tmp_path / "run"
    child = f"""
        import sys
        import instrument
        assert {encoder!r} not in sys.modules
        instrument.configure(service_name="idle", span_groups="all", exporter={exporter!r}, path={str(trace_dir)!r})
        print({encoder!r} in sys.modules)
    """
    assert run_child(child).stdout.strip() == "True"
    assert not trace_dir.exists()  # nor a folder: the first export makes both


# --- OTEL_BSP_*: read as the SDK reads them, never a reason for configure() to raise ----------------------------------


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


@pytest.mark.slow
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
