"""`goodput ingest --ray`: chunks converted as tasks on the session's local Ray cluster give what a local load gives."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli
import instrument
from instrument import RLSpanGroup, iteration_scope, managed_span, umbrella_span
from rollup.base.errors import GoodputError, TraceFormatError
from rollup.base.schema import SCHEMA_VERSION
from rollup.runners.on_ray import RayRunner
from rollup.store.span_store import ingest, open_store

# Two files of each format, so one load is four Ray tasks (the store cuts nothing this small into several chunks).
WRITERS = [("otlp-file", ".otlp"), ("json-file", ".jsonl"), ("otlp-file", ".otlp"), ("json-file", ".jsonl")]
SPANS_PER_STEP = 1 + 3  # the step umbrella and its generation, reward and policy update
ALL_ROWS = "SELECT * FROM spans ORDER BY trace_id, span_id"


def run_steps(steps: int) -> None:
    """A training loop's spans, one export (one framed record, one JSON line) per step."""
    for step in range(1, steps + 1):
        with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.grpo.step"):
            with managed_span(RLSpanGroup.GENERATION, "rl.grpo.generation"):
                pass
            with managed_span(RLSpanGroup.REWARD, "rl.grpo.reward"):
                pass
            with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.grpo.policy_training"):
                pass
        instrument.force_flush()


def write_trace(path: Path, exporter: str, steps: int) -> Path:
    instrument.configure(exporter=exporter, path=path, span_groups="all", service_name=path.stem)
    run_steps(steps)
    instrument.shutdown()
    return path


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """Every load in these tests caches here, never in the user's cache."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(cache))
    monkeypatch.delenv("GOODPUT_TRACE_OWNER_PID", raising=False)  # these tests own the files they write
    return cache


@pytest.fixture
def traces(tmp_path, cache_dir) -> list[Path]:
    """Trace files written by the project's own exporters; file i holds 2 + i steps."""
    folder = tmp_path / "traces"
    folder.mkdir()
    return [write_trace(folder / f"job{i}{suffix}", exporter, 2 + i) for i, (exporter, suffix) in enumerate(WRITERS)]


@pytest.fixture
def corrupt_trace(tmp_path, cache_dir) -> tuple[Path, int]:
    """A framed-protobuf file of three records whose middle one starts with an invalid tag; and that record's offset."""
    path = write_trace(tmp_path / "corrupt.otlp", "otlp-file", 3)
    data = bytearray(path.read_bytes())
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 4 + struct.unpack_from(">I", data, offset)[0]
    assert len(offsets) == 3
    data[offsets[1] + 4 : offsets[1] + 8] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    return path, offsets[1]


def invoke(args: list[str]):
    """The `goodput` command in this process (so a `--ray` run reuses the session's connection), 200 columns wide."""
    return CliRunner().invoke(cli.app, cli.rewrite_ray_address(args), env={"COLUMNS": "200"}, terminal_width=200)


@pytest.mark.slow
@pytest.mark.ray
def test_ingest_on_ray_fills_the_cache_that_later_loads_read(ray_cluster, traces, cache_dir):
    runner = RayRunner(None)
    job_counts: list[int] = []
    progress: list[tuple[int, int]] = []

    def counted(jobs):
        job_counts.append(len(jobs))
        return runner(jobs)

    entries = ingest(
        traces, runner=counted, cache_dir=cache_dir, progress=lambda done, total: progress.append((done, total))
    )

    assert job_counts == [len(traces)]  # one task a file, so several ran side by side
    assert len(progress) == len(traces)  # the progress advanced as each task finished
    total_bytes = sum(path.stat().st_size for path in traces)
    assert progress[-1] == (total_bytes, total_bytes)
    spans_by_file = {entry.path: entry.spans for entry in entries}
    assert spans_by_file == {path: SPANS_PER_STEP * (2 + i) for i, path in enumerate(traces)}
    assert ray_cluster.is_initialized()  # the runner used the session's connection and left it open

    with open_store(traces, cache_dir=cache_dir) as cached, open_store(traces, use_cache=False) as fresh:
        assert all(entry.cached for entry in cached.entries)
        assert {entry.path: entry.spans for entry in cached.entries} == spans_by_file
        rows = cached.sql(ALL_ROWS)
        assert rows.num_rows == sum(spans_by_file.values())
        assert rows.equals(fresh.sql(ALL_ROWS))


@pytest.mark.slow
@pytest.mark.ray
def test_a_large_file_spreads_over_ray_tasks_whatever_the_driver_cores(ray_cluster, tmp_path, cache_dir):
    path = write_trace(tmp_path / "big.otlp", "otlp-file", 200)  # one framed record a step
    runner = RayRunner(None)
    job_counts: list[int] = []

    def counted(jobs):
        job_counts.append(len(jobs))
        return runner(jobs)

    cap = path.stat().st_size // 5
    (entry,) = ingest([path], runner=counted, cache_dir=cache_dir, workers=64, max_chunk_bytes=cap)
    # 64 cores would make one chunk of a file this small; the cap cuts it up for the cluster.
    assert job_counts[0] >= 5 and len(entry.parts) == job_counts[0]
    assert entry.spans == SPANS_PER_STEP * 200
    with open_store([path], cache_dir=cache_dir) as cached, open_store([path], use_cache=False) as fresh:
        assert cached.sql(ALL_ROWS).equals(fresh.sql(ALL_ROWS))


def test_nothing_to_convert_does_not_touch_ray(traces, cache_dir):
    ingest(traces, cache_dir=cache_dir)  # cached locally first

    def refuse(jobs):
        assert not jobs  # the store hands the runner no work ...
        return RayRunner("127.0.0.1:1")(jobs)  # ... so not even an unreachable address is tried

    entries = ingest(traces, runner=refuse, cache_dir=cache_dir)
    assert all(entry.cached for entry in entries)


@pytest.mark.slow
@pytest.mark.ray
def test_ingest_to_a_folder_on_ray_is_a_dataset_query_reads_like_the_traces(ray_cluster, traces, cache_dir, tmp_path):
    dataset = tmp_path / "dataset"
    ingested = invoke(["ingest", "--ray", *map(str, traces), "--to", str(dataset), "--format", "json"])
    assert ingested.exit_code == 0, ingested.output
    assert {row["state"] for row in json.loads(ingested.stdout)} == {"converted"}
    assert len(list(dataset.glob("*.parquet"))) == len(traces)
    assert not list(cache_dir.glob(f"v{SCHEMA_VERSION}/*"))  # --to writes the dataset, not the cache

    sql = (
        "SELECT iteration, bucket, count(*) AS spans, sum(duration_ns) AS duration_ns"
        " FROM spans GROUP BY ALL ORDER BY ALL"
    )
    from_dataset = invoke(["query", str(dataset), sql])
    from_traces = invoke(["query", *map(str, traces), sql, "--no-cache"])
    assert from_dataset.exit_code == 0 and from_traces.exit_code == 0, from_dataset.output + from_traces.output
    assert from_dataset.stdout == from_traces.stdout
    assert "productive" in from_dataset.stdout

    every_row = invoke(["query", str(dataset), ALL_ROWS, "--format", "json"])
    assert every_row.stdout == invoke(["query", *map(str, traces), ALL_ROWS, "--format", "json", "--no-cache"]).stdout
    assert len(json.loads(every_row.stdout)) == SPANS_PER_STEP * sum(2 + i for i in range(len(traces)))


@pytest.mark.ray
def test_corrupt_record_on_ray_is_the_same_one_line_error_as_locally(ray_cluster, corrupt_trace, traces, cache_dir):
    path, record_offset = corrupt_trace
    with pytest.raises(TraceFormatError) as local:
        open_store([path], use_cache=False)
    assert str(local.value).startswith(f"{path}: byte {record_offset}: ")

    with pytest.raises(TraceFormatError) as on_ray:
        ingest([*traces, path], runner=RayRunner(None), cache_dir=cache_dir)
    assert type(on_ray.value) is TraceFormatError  # the original exception, not Ray's wrapper around it
    assert str(on_ray.value) == str(local.value)
    assert not list(cache_dir.glob(f"v{SCHEMA_VERSION}/*"))  # nothing published, no staging folder left behind

    result = invoke(["ingest", str(path), "--ray"])
    assert result.exit_code == 2
    assert result.stderr == f"Error: {local.value}\n"
    assert "Traceback" not in result.output
    assert ray_cluster.is_initialized()


@pytest.mark.slow
@pytest.mark.ray
def test_cli_ingest_with_ray_fills_the_cache_end_to_end(ray_cluster, traces, cache_dir):
    result = invoke(["ingest", *map(str, traces), "--ray"])
    assert result.exit_code == 0, result.output
    for path in traces:
        assert path.name in result.stdout
    assert result.stdout.count("converted") == len(traces)
    assert ray_cluster.is_initialized()

    with open_store(traces) as store:  # GOODPUT_CACHE_DIR: where the CLI put it
        assert all(entry.cached for entry in store.entries)
        (count,) = store.sql("SELECT count(*) AS n FROM spans").column("n").to_pylist()
    assert count == SPANS_PER_STEP * sum(2 + i for i in range(len(traces)))

    again = invoke(["ingest", *map(str, traces), "--ray", "--format", "json"])
    assert {row["state"] for row in json.loads(again.stdout)} == {"cached"}


@pytest.mark.ray
def test_parts_the_driver_cannot_see_name_the_shared_filesystem_assumption(ray_cluster, traces, cache_dir, monkeypatch):
    # What a cluster without a shared filesystem looks like from the driver: the workers' parts are not there.
    monkeypatch.setattr("rollup.runners.ray_ingest._part_visible", lambda out_path: False)
    with pytest.raises(GoodputError, match="must be on a filesystem every Ray node shares"):
        ingest(traces, runner=RayRunner(None), cache_dir=cache_dir)
    assert not list(cache_dir.glob(f"v{SCHEMA_VERSION}/*"))


def test_missing_ray_is_an_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets when Ray is not installed
    with pytest.raises(GoodputError, match=r"pip install 'goodput\[ray\]'"):
        RayRunner(None)


@pytest.mark.slow
@pytest.mark.ray
def test_unreachable_cluster_is_an_error_naming_the_address(traces, cache_dir):
    # In a fresh process: this one is connected to the session's cluster, and a connected runner ignores the address.
    result = subprocess.run(
        [sys.executable, "-m", "cli", "ingest", str(traces[0]), "--ray", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: cannot connect to the Ray cluster at 127.0.0.1:1: ")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_importing_the_rollup_does_not_import_ray():
    code = (
        "import sys, rollup.store.span_store, rollup.runners.ray_ingest, cli; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
