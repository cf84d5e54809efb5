"""The command line where a newcomer and a code review tripped over it (issue 11, "Reading and the CLI").

Each test runs what a user runs: real trace files on disk, the real CLI in this process (CliRunner at 80 and at 200
columns), or `goodput` as a process of its own where the process matters (its exit code, its forks, its environment).
A bug inside goodput is planted honestly: a reader function replaced by one that raises, in this process or, for a
real process, from a `sitecustomize` on its PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import rollup
import rollup.lineage
import rollup.read.otlp_proto
import rollup.read.plan
from conftest import invoke
from rollup.read.plan import ProcessRunner
from tracebuild import S, span_id_of, step, write_trace

GOODPUT = Path(sys.executable).with_name("goodput")
WIDTHS = [80, 200]


def three_steps(tmp_path: Path, name: str = "run.otlp") -> Path:
    return write_trace(
        tmp_path / name,
        [
            S("job", "rl.grpo.job", 0, 12, group="job"),
            step("s1", 1, 0, 4, parent="job"),
            S("g1", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive", group="generation"),
            step("s2", 2, 4, 8, parent="job"),
            S("l2", "rl.grpo.logprob", 4, 5, parent="s2", bucket="overhead", group="logprob"),
            step("s3", 3, 8, 12, parent="job"),
            S("w3", "rl.idle.buffer_starvation", 8, 9, parent="s3", bucket="idle", group="efficiency"),
        ],
    )


def many_small_files(folder: Path, count: int = 20) -> Path:
    """`count` files of one step each: enough jobs for the worker processes (IN_PROCESS_JOBS)."""
    for index in range(count):
        start = 10.0 * index
        write_trace(
            folder / f"worker-{index:02d}.otlp",
            [
                step(f"s{index}", index, start, start + 4, trace=f"t{index}"),
                S(f"g{index}", "rl.grpo.generation", start, start + 3, parent=f"s{index}", bucket="productive",
                  trace=f"t{index}"),
            ],
        )  # fmt: skip
    return folder


def run_goodput(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120):
    """`goodput ARGS` as a process of its own, with this session's private cache."""
    return subprocess.run(
        [str(GOODPUT), *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def python_path(*folders: Path) -> str:
    """PYTHONPATH with `folders` first (a `sitecustomize` there runs at start-up), keeping the session's own."""
    return os.pathsep.join([*map(str, folders), *filter(None, [os.environ.get("PYTHONPATH")])])


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: "), stderr
    return lines[0]


# --- 1. a bug inside goodput is not a bad file ---------------------------------------------------------------------


def _plant_decoder_bug(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("decoder bug planted by the test")

    monkeypatch.setattr(rollup.read.otlp_proto, "decode_records", broken)


@pytest.mark.parametrize("width", WIDTHS)
def test_an_internal_error_says_so_in_one_line_and_exits_3(tmp_path, monkeypatch, width):
    path = three_steps(tmp_path)
    _plant_decoder_bug(monkeypatch)
    monkeypatch.delenv("GOODPUT_DEBUG", raising=False)
    result = invoke(["report", str(path), "--no-cache"], width=width)
    assert result.exit_code == 3, result.output
    line = one_error_line(result.stderr)
    assert "internal error" in line and "a bug in goodput" in line
    assert "RuntimeError: decoder bug planted by the test" in line
    assert "could not be decoded" not in line and str(path) not in line  # the file is not blamed
    assert "--debug" in line and "GOODPUT_DEBUG=1" in line
    assert "Traceback" not in result.output and result.stdout == ""


@pytest.mark.parametrize("how", [["--debug"], ["GOODPUT_DEBUG=1"]])
def test_debug_prints_the_traceback_before_the_line(tmp_path, monkeypatch, how):
    path = three_steps(tmp_path)
    _plant_decoder_bug(monkeypatch)
    args = ["report", str(path), "--no-cache"]
    if how == ["--debug"]:
        monkeypatch.delenv("GOODPUT_DEBUG", raising=False)
        args += how  # after the command, where a user types it
    else:
        monkeypatch.setenv("GOODPUT_DEBUG", "1")
    result = invoke(args, width=200)
    assert result.exit_code == 3
    assert "Traceback (most recent call last)" in result.stderr
    assert "decode_records" not in result.stderr.splitlines()[-1]
    assert result.stderr.splitlines()[-1].startswith("Error: internal error")
    assert "RuntimeError: decoder bug planted by the test" in result.stderr


def test_an_internal_error_in_the_parquet_check_is_exit_3(tmp_path, monkeypatch):
    dataset = tmp_path / "dataset"
    assert invoke(["ingest", str(three_steps(tmp_path)), "--to", str(dataset)]).exit_code == 0

    def changed_api(*args, **kwargs):
        raise TypeError("read_schema() got an unexpected keyword argument")  # what a pyarrow API change raises

    monkeypatch.setattr(pq, "read_schema", changed_api)  # rollup.read.plan imports pyarrow.parquet where it checks
    result = invoke(["report", str(dataset)], width=80)
    assert result.exit_code == 3
    assert "TypeError" in one_error_line(result.stderr)


def _framed_garbage(path: Path) -> Path:
    body = b"\x0a\x05hello-not-a-resource-spans"
    path.write_bytes(len(body).to_bytes(4, "big") + body)
    return path


def _parquet_with_a_column_name_not_utf8(tmp_path: Path) -> Path:
    dataset = tmp_path / "dataset"
    assert invoke(["ingest", str(three_steps(tmp_path)), "--to", str(dataset)]).exit_code == 0
    (part,) = dataset.glob("*.parquet")
    data = part.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")  # the file ends: footer, its length, PAR1
    name = data.index(b"trace_id", footer)  # the footer's schema names each column first
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data[:name] + b"\xff" + data[name + 1 :])
    return bad


@pytest.mark.parametrize("make", [_framed_garbage, None], ids=["framed-garbage", "parquet-name-not-utf8"])
def test_a_hostile_file_still_exits_2_naming_it(tmp_path, monkeypatch, make):
    path = make(tmp_path / "hostile.otlp") if make else _parquet_with_a_column_name_not_utf8(tmp_path)
    for args in (["report", str(path)], ["report", str(path), "--no-cache"], ["check", str(path)]):
        result = invoke(args, width=80)
        assert result.exit_code == 2, (args, result.output)
        line = one_error_line(result.stderr)
        assert path.name in line and "internal error" not in line
        assert "Traceback" not in result.output


def test_a_real_process_exits_3_and_shows_the_traceback_with_goodput_debug(tmp_path):
    """A bug raised in a worker process (20 files: converted on the pool) reaches the user as exit 3."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(
        "import rollup.read.otlp_proto as m\n"
        "def broken(*args, **kwargs):\n"
        "    raise RuntimeError('decoder bug planted by the test')\n"
        "m.decode_records = broken\n"
    )
    traces = many_small_files(tmp_path / "run")
    env = {"PYTHONPATH": python_path(probe), "GOODPUT_DEBUG": ""}
    quiet = run_goodput(["report", str(traces), "--no-cache"], env=env)
    assert quiet.returncode == 3, quiet.stderr
    assert "RuntimeError: decoder bug planted by the test" in one_error_line(quiet.stderr)
    loud = run_goodput(["report", str(traces), "--no-cache"], env={**env, "GOODPUT_DEBUG": "1"})
    assert loud.returncode == 3
    assert "Traceback (most recent call last)" in loud.stderr and "in broken" in loud.stderr
    assert loud.stderr.strip().splitlines()[-1].startswith("Error: internal error (a bug in goodput")


def test_the_help_documents_the_exit_codes_and_debug():
    result = invoke(["--help"], width=200)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "3 an internal error in goodput itself" in text
    assert "--debug" in text and "GOODPUT_DEBUG=1" in text and "--version" in text


def test_version_is_the_installed_one():
    result = invoke(["--version"], width=80)
    assert result.exit_code == 0
    assert result.stdout == f"goodput {version('goodput')}\n"


# --- 2. worker processes are never forked beside DuckDB's threads --------------------------------------------------


def test_fork_only_while_duckdb_has_not_been_imported():
    code = (
        "from rollup.read.plan import pool_start_method\n"
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


# --- 3. --output's extension, spans' filters, iterations that are not there, every span ----------------------------


@pytest.mark.parametrize(
    ("name", "expect"),
    [("r.csv", "csv"), ("r.CSV", "csv"), ("r.json", "json"), ("r.md", "markdown"), ("r.txt", "table"), ("r", "table")],
)
def test_the_output_format_follows_the_extension(tmp_path, name, expect):
    path = str(three_steps(tmp_path))
    out = tmp_path / name
    result = invoke(["report", path, "-o", str(out)], width=80)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    if expect == "csv":
        assert text.splitlines()[0].startswith("iteration,wall_s,productive_s")
    elif expect == "json":
        assert [row["iteration"] for row in json.loads(text)["iterations"]] == [1, 2, 3]
    elif expect == "markdown":
        assert text.startswith("| iteration | wall_s |")
    else:
        assert "┃" in text and "Wall clock by iteration" in text


def test_an_explicit_format_wins_over_the_extension(tmp_path):
    out = tmp_path / "r.csv"
    assert invoke(["report", str(three_steps(tmp_path)), "-f", "json", "-o", str(out)]).exit_code == 0
    assert json.loads(out.read_text())["iterations"]


@pytest.mark.parametrize("command", [["check"], ["spans", "-i", "1"], ["query", "SELECT 1"]])
@pytest.mark.parametrize("suffix", [".html", ".jsonl"])
def test_the_reports_own_formats_are_refused_by_other_commands_naming_those_they_write(tmp_path, command, suffix):
    out = tmp_path / f"r{suffix}"
    trace = str(three_steps(tmp_path))
    args = [command[0], trace, *command[1:], "-o", str(out)]
    result = invoke(args, width=80)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "format of `goodput report` only" in text and "table, json, csv, markdown" in text
    assert not out.exists()
    by_flag = invoke([command[0], trace, *command[1:], "--format", suffix[1:]], width=80)
    assert by_flag.exit_code == 2 and "--format" in by_flag.stderr
    diff = invoke(["diff", trace, trace, "-o", str(out)], width=80)
    assert diff.exit_code == 2


@pytest.mark.parametrize("suffix", [".html", ".jsonl"])
def test_the_report_writes_its_own_formats_by_extension(tmp_path, suffix):
    out = tmp_path / f"r{suffix}"
    result = invoke(["report", str(three_steps(tmp_path)), "-o", str(out)], width=80)
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>" if suffix == ".html" else '{"kind": "iteration"')


@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_bucket_is_refused_naming_the_four(tmp_path, width):
    result = invoke(["spans", str(three_steps(tmp_path)), "-i", "2", "--bucket", "prod"], width=width)
    assert result.exit_code == 2
    text = " ".join(result.stderr.split())
    assert "'prod' is not a bucket" in text and "productive, overhead, idle, wasted" in text
    assert result.stdout == ""


def test_a_bucket_in_capitals_is_the_bucket(tmp_path):
    result = invoke(["spans", str(three_steps(tmp_path)), "-i", "2", "--bucket", "Overhead", "-f", "json"])
    assert [row["span_id"] for row in json.loads(result.stdout)] == [span_id_of("l2")]


def service_processes(tmp_path: Path) -> Path:
    """A driver and two generation workers named as SPEC section 1 shows processes without an instance id
    (`service.name@host:pid`), and a nemo-lens rank that shares its name with the driver's."""

    def resource(service: str, pid: int, instance: str | None = None) -> dict:
        attributes = {"service.name": service, "host.name": "vm", "process.pid": pid}
        return {**attributes, "service.instance.id": instance} if instance else attributes

    resources = {
        "driver": resource("grpo-driver", 10),
        "gen-a": resource("grpo-generation", 11),
        "gen-b": resource("grpo-generation", 12),
        "rank-a": resource("lens", 20, "run7-rank0"),
        "rank-b": resource("lens", 21, "run7-rank0"),
    }
    spans = [
        step("s1", 1, 0, 10, process="driver"),
        S("ga", "rl.grpo.generation", 1, 5, parent="s1", bucket="productive", process="gen-a"),
        S("gb", "rl.grpo.generation", 2, 6, parent="s1", bucket="productive", process="gen-b"),
        S("ra", "rl.grpo.policy_training", 6, 8, parent="s1", bucket="productive", process="rank-a"),
        S("rb", "rl.grpo.policy_training", 6, 9, parent="s1", bucket="productive", process="rank-b"),
    ]
    return write_trace(tmp_path / "run.otlp", spans, resources=resources)


@pytest.mark.parametrize(
    ("process", "expected"),
    [
        ("grpo-generation", ["ga", "gb"]),  # the service name: every process of it
        ("grpo-generation@vm:12", ["gb"]),  # the name as listed
        ("run7-rank0", ["rb", "ra"]),  # a name two processes share, listed with [host:pid] appended
        ("run7-rank0 [vm:21]", ["rb"]),
    ],
)
def test_process_is_matched_as_listed_or_by_its_service_name(tmp_path, process, expected):
    path = str(service_processes(tmp_path))
    for extra in (["-i", "1"], []):
        result = invoke(["spans", path, *extra, "--process", process, "-f", "json"], width=200)
        assert result.exit_code == 0, result.output
        assert [row["span_id"] for row in json.loads(result.stdout)] == [span_id_of(label) for label in expected]


@pytest.mark.parametrize("width", WIDTHS)
def test_an_unknown_process_is_an_error_naming_the_processes(tmp_path, width):
    result = invoke(["spans", str(service_processes(tmp_path)), "--process", "grpo-gen"], width=width)
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "no process 'grpo-gen'" in line
    assert "grpo-driver@vm:10, grpo-generation@vm:11, grpo-generation@vm:12" in line


@pytest.mark.parametrize(
    "args",
    [["report", "-i", "99"], ["spans", "-i", "99"], ["check", "-i", "99"], ["report", "-f", "json", "-i", "99"]],
)
def test_an_iteration_asked_for_that_is_not_there_is_exit_2_everywhere_naming_those_there_are(tmp_path, args):
    result = invoke([args[0], str(three_steps(tmp_path)), *args[1:]], width=80)
    assert result.exit_code == 2, result.output
    assert one_error_line(result.stderr) == "Error: no iteration 99 in these traces; they hold iterations 1-3"
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["report", "check"])
def test_a_range_that_holds_no_iteration_is_an_empty_result_with_a_note_naming_those_there_are(tmp_path, command):
    spans = [step(f"s{i}", i, i, i + 1) for i in (1, 2, 3, 7, 9, 10)]
    path = str(write_trace(tmp_path / "run.otlp", spans))
    result = invoke([command, path, "--iterations", "4:6", "-f", "json"], width=80)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iterations" if command == "report" else "findings"] == []
    assert result.stderr == "note: no iteration in the range 4:6 in these traces; they hold iterations 1-3, 7, 9-10\n"
    result = invoke([command, path, "--iterations", "11:", "-f", "json"], width=80)
    assert result.exit_code == 0 and "no iteration in the range 11: in these traces" in result.stderr
    result = invoke([command, path, "--iterations", "3:7", "-f", "json"], width=80)
    assert result.exit_code == 0 and result.stderr == ""


def test_many_iterations_are_named_by_their_first_runs_and_their_last(tmp_path):
    spans = [step(f"s{i}", i, i, i + 1) for i in range(0, 40, 2)]  # 0, 2, ..., 38: twenty runs of one
    result = invoke(["spans", str(write_trace(tmp_path / "run.otlp", spans)), "-i", "5"], width=80)
    assert one_error_line(result.stderr) == (
        "Error: no iteration 5 in these traces; they hold iterations 0, 2, 4, 6, 8, 10, ..., 38 (20 in all)"
    )


def test_no_iteration_at_all_is_named_as_such(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("a", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["spans", str(path), "-i", "1"], width=80)
    assert result.exit_code == 2
    assert "they hold no iteration" in one_error_line(result.stderr)


@pytest.mark.parametrize("width", WIDTHS)
def test_spans_without_iteration_lists_every_span_in_a_table(tmp_path, width):
    result = invoke(["spans", str(three_steps(tmp_path))], width=width)
    assert result.exit_code == 0, result.output
    assert "every span: 12.000s from the first start to the last end, 7 spans" in result.stdout
    for name in ("rl.grpo.job", "rl.grpo.logprob", "rl.idle.buffer_starvation"):
        assert name in result.stdout


def test_spans_without_iteration_filter_by_bucket(tmp_path):
    result = invoke(["spans", str(three_steps(tmp_path)), "--bucket", "productive", "-f", "csv"])
    rows = result.stdout.splitlines()
    assert rows[0].startswith("start_offset_s,duration_s,process,bucket")
    assert len(rows) == 2 and span_id_of("g1") in rows[1]


# --- 4. nothing to show, said as such ------------------------------------------------------------------------------


def clean_run(tmp_path: Path) -> Path:
    return write_trace(
        tmp_path / "clean.otlp",
        [step("s1", 1, 0, 4), S("g", "rl.grpo.generation", 0, 3, parent="s1", bucket="productive")],
    )


CHECK_COLUMNS = ["severity", "rule", "iteration", "name", "span_id", "related_span_id", "message"]


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", [",".join(CHECK_COLUMNS)]),
        ("markdown", ["| " + " | ".join(CHECK_COLUMNS) + " |", "|---|---|---|---|---|---|---|"]),
        ("json", None),
    ],
)
def test_check_without_findings_still_writes_its_header(tmp_path, fmt, expected):
    result = invoke(["check", str(clean_run(tmp_path)), "-f", fmt], width=80)
    assert result.exit_code == 0, result.output
    if expected is None:
        assert json.loads(result.stdout) == {"findings": [], "summary": {"errors": 0, "warnings": 0}}
    else:
        assert result.stdout.splitlines() == expected


@pytest.mark.parametrize("width", WIDTHS)
def test_check_table_without_findings_is_the_summary_line(tmp_path, width):
    result = invoke(["check", str(clean_run(tmp_path))], width=width)
    assert result.exit_code == 0 and result.stdout == "0 errors, 0 warnings\n"


@pytest.mark.parametrize("width", WIDTHS)
def test_a_trace_of_no_rl_job_says_what_was_read(tmp_path, width):
    write_trace(tmp_path / "api.otlp", [S("a", "http.request", 0, 1), S("b", "db.query", 0.2, 0.5, parent="a")])
    write_trace(tmp_path / "web.otlp", [S("c", "http.request", 2, 3, process="web")])
    for fmt in ("table", "json"):
        result = invoke(["report", str(tmp_path), "-f", fmt], width=width)
        assert result.exit_code == 0
        assert result.stderr.strip() == (
            "note: no iterations: read 3 spans from 2 files, and none carries rl.bucket or rl.iteration (nothing to "
            "charge)"
        )


def test_spans_without_an_iteration_are_named_for_what_they_lack(tmp_path):
    path = write_trace(tmp_path / "run.otlp", [S("a", "rl.grpo.generation", 0, 1, bucket="productive")])
    result = invoke(["report", str(path)], width=80)
    assert result.exit_code == 0
    assert result.stderr.strip() == (
        "note: no iterations: read 1 span from 1 file, and none carries rl.iteration (on a step span or an ancestor)"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_a_folder_of_empty_files_has_no_spans_not_no_iterations(tmp_path, width):
    (tmp_path / "driver.otlp").write_bytes(b"")
    (tmp_path / "worker.jsonl").write_bytes(b"")
    result = invoke(["report", str(tmp_path), "-f", "json"], width=width)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["iterations"] == []
    notes = result.stderr.strip().splitlines()
    assert notes[-1] == "note: no spans in these traces (2 files, all empty)"
    assert sum("empty file skipped" in note for note in notes) == 2
    assert "no iterations" not in result.stderr


# --- 5. the cache where its folder's name has a quote ----------------------------------------------------------------


def test_a_quote_in_the_cache_folder_is_written_and_reused(tmp_path, monkeypatch):
    cache = tmp_path / "it's a cache"
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(cache))
    path = str(three_steps(tmp_path))
    first = invoke(["report", path, "-f", "json"], width=80)
    assert first.exit_code == 0, first.output
    assert list(cache.glob("v*/sets/*.lineage-v*.parquet")), "the lineage table was not cached"
    assert list(cache.glob("v*/*/manifest.json")), "the spans were not cached"

    def must_not_run(*args, **kwargs):
        raise AssertionError("the cache was not reused")

    monkeypatch.setattr(rollup.read.plan, "convert_chunk", must_not_run)
    monkeypatch.setattr(rollup.lineage, "build_lineage", must_not_run)
    again = invoke(["report", path, "-f", "json"], width=80)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    lineage_table = next(cache.glob("v*/sets/*.lineage-v*.parquet"))
    assert pq.read_metadata(lineage_table).num_rows == 7


def test_a_reader_that_stops_early_ends_the_command_quietly_with_its_exit_code(tmp_path):
    """`goodput ... | head`: output larger than a pipe holds, the reader gone after one line: no traceback, no
    message, and the command's own exit code (0), not Python's 1 for a broken pipe."""
    env = dict(os.environ, GOODPUT_CACHE_DIR=str(tmp_path / "cache"))
    for args in (["query", "--format", "csv", "sample_traces/grpo_sync/", "SELECT * FROM range(300000)"],
                 ["report", "--format", "json", "sample_traces/grpo_sync/"]):  # fmt: skip
        run = subprocess.Popen([str(GOODPUT), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert run.stdout is not None and run.stderr is not None
        assert run.stdout.readline()
        run.stdout.close()
        assert run.wait(timeout=120) == 0
        with run.stderr:
            assert run.stderr.read() == b""
