"""Fixtures, command-line helpers and trace-file readers shared by the test modules, and the markers' rule."""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import typer.main
import typer.testing
from hypothesis import HealthCheck, settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import instrument
from tracebuild import S, write_trace

# The suite starts about two hundred Python processes (its workers, `goodput` commands, jobs, Ray's workers), and
# each compiles the sources it imports unless their bytecode is cached. Where PYTHONDONTWRITEBYTECODE is set (a
# container's usual setting, to keep bytecode out of the tree) it is cached outside the tree instead, in the
# temporary folder, as PYTHONPYCACHEPREFIX does (a prefix the user set is kept). Measured on 2 cores: the whole
# suite from a cold cache, 604 busy core-seconds without, 564 with.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / f"goodput-pycache-{os.getuid()}"))
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    sys.dont_write_bytecode = False

# What every property test shares: no deadline and no too-slow check (a shared CI machine is slow at times), and
# function-scoped fixtures such as tmp_path are fine (each example writes its own files in it).
PROPERTY_TESTS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


# typer's CliRunner builds the click command from the app on every invoke, about 40 ms each of the suite's thousands
# of commands: build it once per app. It is the command `goodput` runs, built by typer's own `get_command`.
typer.testing._get_command = functools.cache(typer.main.get_command)  # type: ignore[attr-defined]


def invoke(args: list[str], width: int = 160, env: dict[str, str] | None = None):
    """`goodput ARGS` in this process through typer's CliRunner, at a fixed terminal width (and with `env` set)."""
    from typer.testing import CliRunner

    from cli import app

    return CliRunner().invoke(app, args, terminal_width=width, env=env)


GOODPUT = Path(sys.executable).with_name("goodput")
WIDTHS = [80, 200]  # a narrow terminal and a wide one: what a command says must hold at both


def run_goodput(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120):
    """`goodput ARGS` as a process of its own, with this session's private cache."""
    return subprocess.run(
        [str(GOODPUT), *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def python_path(*folders: Path) -> str:
    """PYTHONPATH with `folders` first (a `sitecustomize` there runs at start-up), keeping the session's own."""
    return os.pathsep.join([*map(str, folders), *filter(None, [os.environ.get("PYTHONPATH")])])


def one_error_line(stderr: str) -> str:
    """The one line a failed command writes to stderr: `Error: ...`."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0]


# --- commands whose JSON a test reads -------------------------------------------------------------------------------


def run_json(args: list[str], expect_exit: int | None = None):
    """`goodput ARGS --format json`, parsed; it exits 0, or 1 where findings fail it, or exactly `expect_exit`."""
    result = invoke([*args, "--format", "json"])
    if expect_exit is None:
        assert result.exit_code in (0, 1), result.output
    else:
        assert result.exit_code == expect_exit, result.output
    return json.loads(result.stdout)


def json_report(path: Path, *extra: str) -> dict:
    """`goodput report PATH --format json`, which must succeed."""
    return run_json(["report", str(path), *extra], expect_exit=0)


# The rules about iteration windows (tests/test_checks_gates.py) flag tiny timelines too: their steps are mostly time
# that no bucketed span covers. A test about the span rules reads their findings alone.
WINDOW_RULES = {"no-iterations", "mostly-unaccounted", "missing-group"}


def span_rules_only(payload: dict) -> dict:
    """`check --format json`'s payload without the window rules' findings, which its summary no longer counts."""
    kept = [f for f in payload["findings"] if f["rule"] not in WINDOW_RULES]
    left_out = len(payload["findings"]) - len(kept)
    return {"findings": kept, "summary": {**payload["summary"], "warnings": payload["summary"]["warnings"] - left_out}}


def check(tmp_path, spans: list[S], *extra: str, expect_exit: int | None = None, shape: str = "framed") -> dict:
    """`goodput check --format json` on `spans` written as one file; the exit code is 1 exactly when errors exist."""
    path = write_trace(tmp_path / "run.trace", spans, shape)
    result = invoke(["check", str(path), "--format", "json", *extra], width=160)
    assert result.exit_code in (0, 1), result.output
    payload = json.loads(result.stdout)
    assert result.exit_code == (1 if payload["summary"]["errors"] else 0)
    if expect_exit is not None:
        assert result.exit_code == expect_exit
    return span_rules_only(payload)


def only_finding(payload: dict, rule: str) -> dict:
    """The single finding of `payload`, which must be of `rule`: the trace triggers that rule and nothing else."""
    assert [f["rule"] for f in payload["findings"]] == [rule], payload["findings"]
    return payload["findings"][0]


def span_rule_findings(path: Path, *extra: str, expect_exit: int = 0) -> list[dict]:
    """The span rules' findings of `goodput check PATH`, which must exit `expect_exit`."""
    findings = run_json(["check", str(path), *extra], expect_exit=expect_exit)["findings"]
    return [f for f in findings if f["rule"] not in WINDOW_RULES]


# --- fixtures -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """Every command in the session caches under a temporary folder, never in the user's cache."""
    os.environ["GOODPUT_CACHE_DIR"] = str(tmp_path_factory.mktemp("goodput-cache"))
    yield


@pytest.fixture(scope="session")
def ray_inherited_trace_dir(tmp_path_factory) -> Path:
    """Where workers of the session's Ray cluster write when they call configure() bare (see `ray_cluster`)."""
    return tmp_path_factory.mktemp("ray-inherited-traces")


@pytest.fixture(scope="session")
def ray_cluster(ray_inherited_trace_dir):
    """One local Ray cluster for the whole session: starting one costs seconds, and the CI machine has 2 cores.

    Started the way a job starts it: configure() first, then ray.init(), so the raylet and every worker it spawns
    inherit the GOODPUT_* choice (JSON Lines files in `ray_inherited_trace_dir`, every group). The driver's own
    set-up is shut down again and its variables removed; tests configure the driver as they need. Four GPUs are
    declared (none need exist): Ray places actors that ask for GPUs and gives them ids, as on a GPU node.
    Ray is a test dependency, so a missing Ray fails the tests that need it rather than skipping them. It is imported
    here, not at the top, so test modules that never touch Ray do not pay for importing it.
    """
    import ray

    saved = {k: v for k, v in os.environ.items() if k.startswith("GOODPUT_")}
    instrument.configure(exporter="json-file", path=ray_inherited_trace_dir, span_groups="all", service_name="driver")
    try:
        ray.init(num_cpus=2, num_gpus=4, include_dashboard=False)
    finally:
        instrument.shutdown()
        for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
            del os.environ[key]
        os.environ.update(saved)
    try:
        yield ray
    finally:
        ray.shutdown()


# --- the toy job's runs (examples/grpo_toy), shared by the modules that read them ----------------------------------

TOY_STEPS, TOY_SEED = 3, 0  # step 1 plain, step 2 the failed one with a checkpoint, step 3 validation


def run_toy_job(out: Path, *args: str) -> Path:
    """`job.main` (TOY_STEPS steps, TOY_SEED) inside the session's cluster, writing into the folder `out`, leaving
    the GOODPUT_* environment as it found it."""
    from examples.grpo_toy import job

    saved = {key: value for key, value in os.environ.items() if key.startswith("GOODPUT_")}
    try:
        job.main(["--steps", str(TOY_STEPS), "--seed", str(TOY_SEED), "--out", f"{out}/", *args], log=lambda _: None)
    finally:
        instrument.shutdown()
        for key in [key for key in os.environ if key.startswith("GOODPUT_")]:
            del os.environ[key]
        os.environ.update(saved)
    return out


# Each run starts four actors (seconds on two cores): the modules about the job's goodput, its GPUs and its
# regressions read the same three runs.
@pytest.fixture(scope="session")
def toy_sync_run(ray_cluster, tmp_path_factory) -> Path:
    """Sync mode, the fleets apart: four actors, a GPU each."""
    return run_toy_job(tmp_path_factory.mktemp("toy") / "sync", "--mode", "sync")


@pytest.fixture(scope="session")
def toy_async_run(ray_cluster, tmp_path_factory) -> Path:
    """Async mode: a streaming generation actor, a validation actor, two training ranks."""
    return run_toy_job(tmp_path_factory.mktemp("toy") / "async", "--mode", "async")


@pytest.fixture(scope="session")
def toy_buggy_colocated_run(ray_cluster, tmp_path_factory) -> Path:
    """Sync, `--buggy --colocated`, as examples/regenerate_sample_traces.py runs the buggy sample: where the actors
    run adds no finding, and generation rank i shares its GPU with training rank i."""
    return run_toy_job(tmp_path_factory.mktemp("toy") / "buggy", "--mode", "sync", "--buggy", "--colocated")


@pytest.fixture(autouse=True)
def _restore_goodput_environment():
    """configure() leaves its choice in os.environ for child processes; keep tests from leaking it."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GOODPUT_")}
    yield
    instrument.shutdown()
    for key in [k for k in os.environ if k.startswith("GOODPUT_")]:
        del os.environ[key]
    os.environ.update(saved)


class Memory:
    """The SDK's in-memory exporter as configure() was handed it; `spans()` flushes first."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def spans(self):
        instrument.force_flush()
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def memory_with():
    """Call with the span groups to enable: configure() with a fresh in-memory exporter, returned as a `Memory`."""

    def make(span_groups):
        exporter = InMemorySpanExporter()
        instrument.configure(exporter=exporter, span_groups=span_groups, service_name="test")
        return Memory(exporter)

    yield make
    instrument.shutdown()


@pytest.fixture
def memory(memory_with):
    """Every span group enabled, read back through `memory.spans()`."""
    return memory_with("all")


def instrument_warnings(caplog) -> list[str]:
    """What the "instrument" logger said at WARNING or above."""
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


# --- trace files, read the way the formats are specified ------------------------------------------------------------


def read_framed_records(path: Path) -> list[ExportTraceServiceRequest]:
    """Walk the 4-byte big-endian length prefixes, as the Collector's file receiver does; no byte may be left over."""
    data = Path(path).read_bytes()
    records, offset = [], 0
    while offset < len(data):
        assert offset + 4 <= len(data), f"length prefix at byte {offset} runs past the end"
        (length,) = struct.unpack_from(">I", data, offset)
        offset += 4
        assert offset + length <= len(data), f"record at byte {offset - 4} runs past the end"
        records.append(ExportTraceServiceRequest.FromString(data[offset : offset + length]))
        offset += length
    return records


def read_framed_spans(path: Path) -> list[trace_pb2.Span]:
    """Every span of a length-prefixed protobuf trace file, in file order."""
    return [
        span
        for record in read_framed_records(path)
        for resource_spans in record.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def read_json_lines_records(path: Path) -> list[dict]:
    """One OTLP JSON `ExportTraceServiceRequest` per line; the last line must be complete (newline-terminated)."""
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} does not end with a complete line"
    return [json.loads(line) for line in text.splitlines()]


def _any_value(value: dict):
    """An OTLP JSON `AnyValue` as the Python value it encodes (int64 arrives as a string in OTLP JSON)."""
    if not value:
        return None
    ((kind, raw),) = value.items()
    if kind == "stringValue":
        return raw
    if kind == "boolValue":
        return raw
    if kind == "intValue":
        return int(raw)
    if kind == "doubleValue":
        return float(raw)  # a number, or "NaN" / "Infinity" / "-Infinity"
    if kind == "bytesValue":
        return base64.b64decode(raw)
    if kind == "arrayValue":
        return [_any_value(item) for item in raw.get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: _any_value(kv.get("value", {})) for kv in raw.get("values", [])}
    raise AssertionError(f"unknown OTLP JSON value kind {kind!r}")


def read_json_lines_spans(path: Path) -> list[dict]:
    """Every span of an OTLP JSON-lines trace file, in file order, with `attributes` flattened to {key: value}."""
    spans = []
    for record in read_json_lines_records(path):
        for resource_spans in record["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    attributes = {a["key"]: _any_value(a.get("value", {})) for a in span.get("attributes", [])}
                    spans.append({**span, "attributes": attributes})
    return spans


# --- markers --------------------------------------------------------------------------------------------------------
# `ray`: the test starts or uses a Ray cluster. `slow`: it takes more than about 0.3 s on a 2-core machine, all its
# cases together (`pytest --durations=0`). One `goodput` command on a small trace already costs 0.15-0.3 s there, so
# the fast half (`pytest -m "not ray and not slow"`, about 45 s) keeps what runs a command about once or runs none, and
# leaves property tests, real processes and jobs, generated traces and headless Chromium to the whole run.


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """A test that uses the session's Ray cluster must say so (`ray`), so that `-m "not ray"` never starts one.

    Under pytest-xdist (`-n 2 --dist loadgroup`, as the README runs the suite), every `ray` test is in one group, so
    one worker starts the session's cluster and runs them all while the other runs the rest: two clusters on two
    cores would each be slower than one."""
    unmarked = [
        item.nodeid for item in items if "ray_cluster" in item.fixturenames and not item.get_closest_marker("ray")
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the ray_cluster fixture without the ray marker: " + ", ".join(unmarked)
        )
    for item in items:
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))


# An idle Ray cluster still costs about a tenth of a core (its raylet, GCS and workers): under `--dist loadgroup`
# the Ray tests run one after another on one worker (above), so the session's cluster ends after the last of them
# rather than at the end of the session, and leaves the CPU to the tests still running.
_ray_cluster_ended: list[bool] = []


def pytest_runtest_teardown(item, nextitem):
    if not item.get_closest_marker("ray") or not getattr(item.config.option, "loadgroup", False):
        return
    if (nextitem is None or not nextitem.get_closest_marker("ray")) and "ray" in sys.modules:
        ray = sys.modules["ray"]
        if ray.is_initialized():
            ray.shutdown()
            _ray_cluster_ended.append(True)


def pytest_runtest_setup(item):
    if _ray_cluster_ended and item.get_closest_marker("ray"):
        pytest.fail("the session's Ray cluster was ended after what should have been the last Ray test of this worker")


def pytest_configure(config):
    """pytest 9.2 and pytest-xdist 3.8 together run `--dist loadgroup` as if no test had a group
    (pytest-dev/pytest-xdist#1386): say so before any worker starts."""
    if config.getoption("dist", "no") != "loadgroup" or pytest.version_tuple[:2] < (9, 2):
        return
    from importlib.metadata import version

    if tuple(int(part) for part in version("pytest-xdist").split(".")[:2]) <= (3, 8):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} and pytest-xdist {version('pytest-xdist')} do not group tests "
            "(pytest-dev/pytest-xdist#1386): pip install 'pytest<9.2'"
        )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist sends the collection (it names the groups before)
def pytest_collection_finish(session):
    """Refuse to run two Ray clusters on two cores when pytest-xdist's grouping has silently stopped working."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    ungrouped = [item.nodeid for item in session.items if item.get_closest_marker("ray") and "@" not in item.nodeid]
    if ungrouped:
        raise pytest.UsageError(
            f"pytest-xdist did not group the Ray tests ({ungrouped[0]} and {len(ungrouped) - 1} more); "
            "this pytest and pytest-xdist do not work together (pytest-dev/pytest-xdist#1386): "
            "install the versions pyproject.toml names"
        )
