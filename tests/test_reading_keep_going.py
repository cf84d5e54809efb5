"""`--keep-going`: one corrupt file among many no longer fails the whole command. Each file that cannot be read is
skipped, its one-line error said as a warning; exit 2 only when no file could be read. Without it, the first
corrupt record is the command's error, as ever."""

from __future__ import annotations

import json
import struct

import pytest

from conftest import invoke
from tracebuild import S, step, write_trace


def a_job_with_one_corrupt_file(tmp_path):
    """Two good files and one whose second record is garbage (a corrupt record in the middle, not a torn tail)."""
    run = tmp_path / "run"
    write_trace(run / "driver.otlp", [step("s1", 1, 0, 10), step("s2", 2, 10, 20)])
    write_trace(
        run / "worker.otlp",
        [S("g1", "rl.grpo.generation", 1, 9, parent="s1", bucket="productive", process="worker")],
    )
    bad = write_trace(
        run / "other.otlp",
        [S(f"x{i}", "rl.grpo.generation", 11, 19, parent="s2", bucket="productive", process="other")
         for i in range(4)],
        batches=2,
    )  # fmt: skip
    data = bytearray(bad.read_bytes())
    second = 4 + struct.unpack(">I", data[:4])[0]
    data[second + 4 : second + 24] = b"\xff" * 20
    bad.write_bytes(bytes(data))
    return run, bad


@pytest.mark.parametrize("cache", [[], ["--no-cache"]], ids=["cached", "no-cache"])
def test_without_keep_going_one_corrupt_file_fails_the_command(tmp_path, cache):
    run, bad = a_job_with_one_corrupt_file(tmp_path)
    result = invoke(["report", str(run), *cache])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {bad}: byte ") and "Traceback" not in result.output


@pytest.mark.parametrize("cache", [[], ["--no-cache"]], ids=["cached", "no-cache"])
@pytest.mark.parametrize("command", [["report"], ["check"], ["spans", "--iteration", "1"], ["query"]])
def test_keep_going_skips_the_corrupt_file_with_a_warning_and_reads_the_rest(tmp_path, cache, command):
    run, bad = a_job_with_one_corrupt_file(tmp_path)
    query = command == ["query"]
    command = ["query", str(run), "SELECT count(*) AS n FROM spans"] if query else [*command, str(run)]
    result = invoke([*command, *cache, "--keep-going", "--format", "json"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {bad}: byte ")
    assert warnings[0].endswith("(skipped: --keep-going)")
    if command[0] == "query":
        assert json.loads(result.stdout) == [{"n": 3}]  # the good files' spans


def test_keep_going_gives_the_report_of_the_readable_files_alone(tmp_path):
    run, bad = a_job_with_one_corrupt_file(tmp_path)
    kept = json.loads(invoke(["report", str(run), "--keep-going", "--format", "json"]).stdout)
    bad.unlink()
    alone = json.loads(invoke(["report", str(run), "--format", "json"]).stdout)
    assert kept == alone


def test_a_skipped_file_is_read_again_next_time_not_cached_as_broken(tmp_path):
    """A file may be corrupt only while its job is still writing it: nothing about it is cached."""
    run, bad = a_job_with_one_corrupt_file(tmp_path)
    assert invoke(["report", str(run), "--keep-going"]).exit_code == 0
    write_trace(bad, [S("x", "rl.grpo.generation", 11, 19, parent="s2", bucket="productive", process="other")])
    again = invoke(["report", str(run), "--format", "json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["total"]["productive_s"] == (9 - 1) + (19 - 11)


def test_keep_going_is_exit_2_when_no_file_could_be_read(tmp_path):
    run, bad = a_job_with_one_corrupt_file(tmp_path)
    result = invoke(["report", str(bad), "--keep-going"])
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [errors[0]] and errors[0].startswith(f"Error: no trace file could be read: {bad}: byte ")


def test_keep_going_skips_a_named_file_that_is_no_trace(tmp_path):
    run, _ = a_job_with_one_corrupt_file(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("not a trace\n")
    assert invoke(["report", str(run / "driver.otlp"), str(notes)]).exit_code == 2
    result = invoke(["report", str(run / "driver.otlp"), str(notes), "--keep-going"])
    assert result.exit_code == 0, result.output
    assert f"warning: {notes}: " in result.stderr


def test_a_path_that_names_nothing_stays_an_error_with_keep_going(tmp_path):
    """A typo must not read as a smaller run."""
    run, _ = a_job_with_one_corrupt_file(tmp_path)
    result = invoke(["report", str(run), str(tmp_path / "no-such-run"), "--keep-going"])
    assert result.exit_code == 2 and "no-such-run" in result.stderr
