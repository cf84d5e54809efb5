"""GOODPUT_MEMORY_LIMIT: parsed, applied to every connection, spilling where it should, and out of core giving the
same answer; and what a small command does not pay for (imports, a second pass over cached spans)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from conftest import invoke
from rollup import build_report, open_store, report_json
from rollup.accounting.attribution import swept_spans_sql
from rollup.accounting.intervals import time_batches
from rollup.accounting.windows import iteration_windows
from rollup.base.connection import (
    DEFAULT_SHARE,
    ENV_MEMORY_LIMIT,
    MIN_LIMIT_BYTES,
    machine_memory_bytes,
    parse_memory_limit,
    spill_directory,
)
from rollup.base.memory import WORKER_BUDGET_BYTES, WORKER_LIMIT_BYTES, conversion_workers, sweep_batch_spans
from rollup.base.schema import SCHEMA_VERSION
from rollup.read.cache import SPILL_DIR, SUMMARY_SUFFIX
from rollup.read.formats.otlp_json import _thread_connection
from tracebuild import S, write_trace

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "grpo_sync"
GENERATED_SPANS = 150_000  # enough for DuckDB to spill under TINY_LIMIT (130_000 no longer is); seconds
TINY_LIMIT = "64MB"  # the least goodput takes


def duckdb_shows(limit: str) -> str:
    """How DuckDB itself shows a memory limit written as `limit`."""
    connection = duckdb.connect(config={"memory_limit": limit})
    return connection.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]


def setting(store, name: str) -> str:
    return store.connection.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


def steps(count: int) -> list[S]:
    spans = []
    for i in range(count):
        spans.append(S(f"step{i}", "rl.grpo.step", 10 * i, 10 * i + 8, iteration=i, group="step"))
        spans.append(S(f"gen{i}", "rl.grpo.generation", 10 * i, 10 * i + 5, parent=f"step{i}", bucket="productive"))
    return spans


@pytest.fixture(scope="module")
def generated_trace(tmp_path_factory) -> Path:
    """bench/tracegen's synthetic GRPO job, GENERATED_SPANS spans, as the Collector's framed protobuf."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tracegen
    finally:
        sys.path.remove(str(REPO / "bench"))
    path = tmp_path_factory.mktemp("generated") / "job.otlp"
    with open(path, "wb") as file:
        tracegen.framed_batches(GENERATED_SPANS, lambda record, _: file.write(record))
    return path


# --- the setting ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GB", 4 * 10**9), ("800MB", 800 * 10**6), ("800mb", 800 * 10**6), (" 1.5 GB ", 1_500_000_000),
        ("2GiB", 2 * 2**30), ("512MiB", 512 * 2**20), ("4G", 4 * 2**30), ("100000000", 100_000_000),
        ("25%", 8 * 10**9 // 4),
    ],
)  # fmt: skip
def test_a_limit_is_a_size_as_duckdb_writes_it_or_a_share_of_the_machine(text, expected):
    assert parse_memory_limit(text, machine_bytes=8 * 10**9) == expected


def test_the_store_runs_under_the_limit_with_insertion_order_off(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "run.otlp", steps(3))
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "300MB")
    with open_store([path], cache_dir=tmp_path / "cache") as store:
        assert setting(store, "memory_limit") == duckdb_shows("300MB")
        assert setting(store, "preserve_insertion_order") is False


def test_without_the_setting_the_store_gets_its_share_of_the_machine(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "run.otlp", steps(3))
    monkeypatch.delenv(ENV_MEMORY_LIMIT, raising=False)
    with open_store([path], cache_dir=tmp_path / "cache") as store:
        expected = int(DEFAULT_SHARE * machine_memory_bytes())
        assert setting(store, "memory_limit") == duckdb_shows(f"{expected}B")


def test_a_conversion_workers_connection_has_its_small_limit_whatever_the_stores(monkeypatch):
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "100GB")
    connection = _thread_connection()
    shown = connection.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchall()[0]
    assert shown == (duckdb_shows(f"{WORKER_LIMIT_BYTES}B"), 1)


def test_conversion_workers_fit_in_the_limit(monkeypatch):
    monkeypatch.setenv(ENV_MEMORY_LIMIT, TINY_LIMIT)
    assert conversion_workers(cores=8) == 1
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "1GB")
    assert conversion_workers(cores=8) == 1 * 10**9 // WORKER_BUDGET_BYTES
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "100GB")
    assert conversion_workers(cores=8) == 8


@pytest.mark.parametrize(
    ("value", "said"),
    [("lots", "expected a size such as 4GB"), ("4 GB RAM", "expected a size"), ("-1GB", "expected a size"),
     ("0%", "between 0% and 100%"), ("150%", "between 0% and 100%"),
     ("1MB", f"at least {MIN_LIMIT_BYTES // 10**6}MB")],
)  # fmt: skip
def test_a_bad_limit_is_a_one_line_error_exit_2(tmp_path, monkeypatch, value, said):
    path = write_trace(tmp_path / "run.otlp", steps(2))
    monkeypatch.setenv(ENV_MEMORY_LIMIT, value)
    for command in (["report", str(path)], ["check", "--no-cache", str(path)]):
        result = invoke(command)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(f"Error: {ENV_MEMORY_LIMIT}=") and said in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


# --- where it spills --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_cached_load_spills_beside_the_cache_in_a_folder_of_its_own_removed_at_close(tmp_path):
    path = write_trace(tmp_path / "run.otlp", steps(2))
    cache = tmp_path / "cache"
    with open_store([path], cache_dir=cache) as store:
        spill = Path(setting(store, "temp_directory"))
        assert spill.parent == cache / SPILL_DIR
        assert spill.name.startswith(f"{os.getpid()}-")
        store.connection.execute("SET memory_limit = '64MB'")  # force a spill: a table twice as large as that
        store.connection.execute("CREATE TEMP TABLE filler AS SELECT md5(i::VARCHAR) AS s FROM range(4000000) t(i)")
        assert spill.is_dir() and any(spill.iterdir())
    assert not spill.exists()


def test_an_uncached_load_spills_into_its_temporary_folder(tmp_path):
    path = write_trace(tmp_path / "run.otlp", steps(2))
    cache = tmp_path / "cache"
    with open_store([path], use_cache=False, cache_dir=cache) as store:
        spill = Path(setting(store, "temp_directory"))
        assert not spill.is_relative_to(cache)
        temporary = spill.parent
        assert temporary.name.startswith("goodput-")
    assert not temporary.exists()


def test_a_spill_folder_left_by_a_process_that_died_is_cleared(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f"{dead.stdout.strip()}-0badf00d"
    (left / "inner").mkdir(parents=True)
    mine = tmp_path / f"{os.getpid()}-cafe0001"
    mine.mkdir()
    spill_directory(tmp_path)
    assert not left.exists() and mine.exists()


# --- out of core ------------------------------------------------------------------------------------------------


@pytest.mark.xdist_group("generated-trace")  # one worker makes the trace for both (under --dist loadgroup)
@pytest.mark.slow
def test_a_report_under_a_tiny_limit_spills_and_gives_the_same_json(generated_trace, monkeypatch):
    monkeypatch.setenv(ENV_MEMORY_LIMIT, TINY_LIMIT)
    with open_store([generated_trace], use_cache=False) as store:
        limited = json.dumps(report_json(build_report(store)))
        spilled = Path(setting(store, "temp_directory")).is_dir()  # DuckDB makes the folder on its first spill
        spans = store.spans()
        windows = [(w.start_ns, w.end_ns) for w in iteration_windows(spans)]
        sweeps = time_batches(spans, windows, swept_spans_sql(spans), sweep_batch_spans(spans.limit_bytes))
    assert spilled
    assert len(sweeps) > 1  # the windows were charged in several sweeps, each within the limit
    monkeypatch.delenv(ENV_MEMORY_LIMIT)
    with open_store([generated_trace], use_cache=False) as store:
        assert json.dumps(report_json(build_report(store))) == limited


@pytest.mark.xdist_group("generated-trace")  # one worker makes the trace for both (under --dist loadgroup)
@pytest.mark.slow
def test_check_under_a_tiny_limit_prints_the_same_findings(generated_trace, monkeypatch):
    command = ["check", "--format", "json", "--no-cache", str(generated_trace)]
    free = invoke(command)
    monkeypatch.setenv(ENV_MEMORY_LIMIT, TINY_LIMIT)
    tight = invoke(command)
    assert tight.exit_code == free.exit_code and free.exit_code in (0, 1), free.output
    assert tight.stdout == free.stdout


@pytest.mark.slow
def test_json_lines_under_a_limit_too_small_for_duckdbs_own_read_go_through_the_careful_reader(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "run.jsonl", steps(20), "jsonl", batches=4)
    free = invoke(["report", "--format", "json", "--no-cache", str(path)])
    monkeypatch.setenv(ENV_MEMORY_LIMIT, TINY_LIMIT)
    tight = invoke(["report", "--format", "json", "--no-cache", str(path)])
    assert free.exit_code == tight.exit_code == 0 and tight.stdout == free.stdout, tight.stderr


# --- what a small command does not pay ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_cached_rerun_keeps_what_it_learnt_of_the_set_of_files(tmp_path):
    spans = steps(3)
    first = write_trace(tmp_path / "a.otlp", spans)
    write_trace(tmp_path / "b.otlp", spans[:2])  # the same two spans exported again in another file
    cache = tmp_path / "cache"
    with open_store([tmp_path], cache_dir=cache) as store:
        expected = json.dumps(report_json(build_report(store)))
    (summary,) = (cache / f"v{SCHEMA_VERSION}" / "sets").glob(f"*{SUMMARY_SUFFIX}")
    assert json.loads(summary.read_text()) == {"duplicates": 2, "shared": []}
    with open_store([tmp_path], cache_dir=cache) as store:
        assert json.dumps(report_json(build_report(store))) == expected
    summary.write_text("not json")  # a damaged record is worked out again
    with open_store([tmp_path], cache_dir=cache) as store:
        assert json.dumps(report_json(build_report(store))) == expected
    with open_store([first], use_cache=False) as store:
        assert store.connection.execute("SELECT count(*) FROM spans").fetchall()[0][0] == len(spans)


def _modules_after(code: str, modules: tuple[str, ...], env: dict[str, str] | None = None) -> list[str]:
    probe = f"{code}\nimport sys\nprint([m for m in {list(modules)!r} if m in sys.modules])"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, cwd=REPO
    )
    return json.loads(result.stdout.strip().splitlines()[-1].replace("'", '"'))


HEAVY = ("numpy", "duckdb", "pyarrow", "opentelemetry.sdk", "google.protobuf", "ray")


@pytest.mark.slow
def test_goodput_help_imports_nothing_heavy():
    code = "from cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _modules_after(code, HEAVY) == []


def test_the_memory_setting_imports_nothing_heavy():
    assert _modules_after("import rollup.base.memory", HEAVY) == []


@pytest.mark.slow
def test_a_cached_rerun_reads_no_trace_so_imports_no_decoder_nor_worker_pool(tmp_path):
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(tmp_path / "cache"))
    code = f"from cli import main\ntry:\n    main(['report', {str(SAMPLE)!r}])\nexcept SystemExit:\n    pass"
    decoders = ("opentelemetry", "google.protobuf", "pyarrow.parquet", "multiprocessing")
    _modules_after(code, decoders, env)  # the first run fills the cache
    assert _modules_after(code, decoders, env) == []


@pytest.mark.slow
def test_the_command_runs_without_numpy_and_prints_what_it_prints_with_it(tmp_path):
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(tmp_path / "cache"))
    code = (
        "from cli.lean_imports import skip_numpy_for_pyarrow\nskip_numpy_for_pyarrow()\n"
        f"from cli import main\ntry:\n    main(['report', '--format', 'json', {str(SAMPLE)!r}])\n"
        "except SystemExit:\n    pass"
    )
    probe = f"{code}\nimport sys\nprint(json.dumps('numpy' in sys.modules))"
    lean = subprocess.run(
        [sys.executable, "-c", f"import json\n{probe}"], capture_output=True, text=True, check=True, env=env, cwd=REPO
    )
    *report, numpy_loaded = lean.stdout.strip().splitlines()
    assert json.loads(numpy_loaded) is False
    assert json.loads("\n".join(report)) == json.loads(invoke(["report", "--format", "json", str(SAMPLE)]).stdout)


def test_stores_open_at_once_share_the_limit(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "run.otlp", steps(2))
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "1GB")
    with open_store([path], cache_dir=tmp_path / "cache", memory_share=0.5) as store:
        assert setting(store, "memory_limit") == duckdb_shows("500MB")


@pytest.mark.slow
def test_the_goodput_command_itself_imports_no_numpy_and_with_ray_it_does_not_hide_it(tmp_path):
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(tmp_path / "cache"))
    code = (
        f"from cli import main\ntry:\n    main(['report', '--format', 'json', {str(SAMPLE)!r}])\n"
        "except SystemExit:\n    pass"
    )
    assert _modules_after(code, ("numpy",), env) == []
    # With --ray the finder is not installed (Ray converts through pyarrow's numpy interop): numpy stays visible.
    probe = (
        "from cli import main\nimport sys\ntry:\n    main(['report', '--ray', '--help'])\nexcept SystemExit:\n    pass"
    )
    hidden = f"{probe}\nprint(any(type(f).__name__ == '_PyarrowWithoutNumpy' for f in sys.meta_path))"
    result = subprocess.run([sys.executable, "-c", hidden], capture_output=True, text=True, env=env, cwd=REPO)
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr
