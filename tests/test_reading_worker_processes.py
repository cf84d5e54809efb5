"""The worker processes that convert trace files: never forked beside DuckDB's threads, and reading what one
process reads.

A fork copies one thread only: forked beside a DuckDB connection's threads (which `threading` cannot see), a worker
may inherit a lock held by a thread that is not there. Each test runs what a user runs: `goodput` as a process of
its own where its forks matter, with a `sitecustomize` on its PYTHONPATH recording them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rollup
from conftest import python_path, run_goodput
from rollup.read.workers import ProcessRunner
from tracebuild import many_small_files

pytestmark = [pytest.mark.slow]


def test_fork_only_while_duckdb_has_not_been_imported():
    code = (
        "from rollup.read.workers import pool_start_method\n"
        "print(pool_start_method())\n"
        "import duckdb\n"
        "connection = duckdb.connect()\n"
        "print(pool_start_method())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == ["fork", "forkserver"]


def os_threads_after(code: str) -> list[int]:
    """The OS's thread count of a fresh Python (native threads included: /proc/self/task) after each line of
    `code`."""
    lines = "".join(f"{line}\nprint(len(os.listdir('/proc/self/task')))\n" for line in code.splitlines())
    result = subprocess.run([sys.executable, "-c", "import os\n" + lines], capture_output=True, text=True, check=True)
    return [int(n) for n in result.stdout.split()]


def test_the_cli_forks_its_workers_before_duckdb_has_a_thread(tmp_path):
    """Every fork `goodput` makes is recorded (os.register_at_fork, in the parent, just before it forks) with the
    threads the OS counts in it: no more than importing pyarrow and DuckDB start, so no DuckDB connection's (which
    `threading` cannot see, and which a connection does start: checked here too)."""
    imported, connected = os_threads_after("import pyarrow.parquet, duckdb\nconnection = duckdb.connect()")
    assert connected > imported
    probe = tmp_path / "probe"
    probe.mkdir()
    log = tmp_path / "forks.log"
    (probe / "sitecustomize.py").write_text(
        "import os\n"
        "def before():\n"
        "    with open(os.environ['FORK_LOG'], 'a') as log:\n"
        "        log.write(f\"{len(os.listdir('/proc/self/task'))}\\n\")\n"
        "os.register_at_fork(before=before)\n"
    )
    traces = many_small_files(tmp_path / "run")
    env = {"PYTHONPATH": python_path(probe), "FORK_LOG": str(log), "GOODPUT_CACHE_DIR": str(tmp_path / "cache")}
    for args in (["report", str(traces), "-f", "json"], ["report", str(traces), "-f", "json", "--no-cache"]):
        log.unlink(missing_ok=True)
        result = run_goodput(args, env=env)
        assert result.returncode == 0, result.stderr
        assert [row["iteration"] for row in json.loads(result.stdout)["iterations"]] == list(range(20))
        forks = [int(n) for n in log.read_text().split()]
        assert forks and max(forks) <= imported, (forks, imported)  # workers forked, none beside DuckDB's threads


def test_beside_duckdb_the_workers_come_from_a_forkserver_and_read_the_same(tmp_path):
    import duckdb  # noqa: F401 - this test process has DuckDB loaded, as any process that used it before

    traces = many_small_files(tmp_path / "run")
    runner = ProcessRunner(2)
    try:
        assert runner.start_method == "forkserver"
    finally:
        runner.close()
    query = "SELECT span_id, iteration, source_file FROM spans ORDER BY span_id"
    with rollup.open_store([traces], use_cache=False, workers=2) as on_workers:
        pooled = on_workers.sql(query).to_pylist()
    with rollup.open_store([traces], use_cache=False, workers=1) as in_process:
        assert in_process.sql(query).to_pylist() == pooled
    assert len(pooled) == 20 * 2
