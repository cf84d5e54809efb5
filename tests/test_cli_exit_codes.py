"""What `goodput` exits with: 2 for bad input, naming the file; 3 for a bug inside goodput, said in one line
(`--debug` or GOODPUT_DEBUG=1 prints the traceback first); and its own code when the reader of its output goes away.

Each test runs what a user runs: real trace files on disk, the real CLI in this process (CliRunner at 80 and at 200
columns), or `goodput` as a process of its own where the process matters (its exit code, its workers). A bug inside
goodput is planted honestly: a reader function replaced by one that raises, in this process or, for a real process,
from a `sitecustomize` on its PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import rollup.read.formats.otlp_proto
from conftest import GOODPUT, WIDTHS, invoke, one_error_line, python_path, run_goodput
from tracebuild import many_small_files, three_steps

# --- a bug inside goodput is not a bad file ---------------------------------------------------------------------------


def _plant_decoder_bug(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("decoder bug planted by the test")

    monkeypatch.setattr(rollup.read.formats.otlp_proto, "decode_records", broken)


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


@pytest.mark.slow
def test_a_real_process_exits_3_and_shows_the_traceback_with_goodput_debug(tmp_path):
    """A bug raised in a worker process (20 files: converted on the pool) reaches the user as exit 3."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(
        "import rollup.read.formats.otlp_proto as m\n"
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


# --- a reader that goes away ------------------------------------------------------------------------------------------


@pytest.mark.slow
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
