"""`goodput watch` and its incremental accounting (SPEC section 13): files written a record at a time (a record torn in
two halves now and then, a file replaced under the watcher) while a watcher refreshes; at every checkpoint its report
must be the JSON `goodput report` gives of the files as they stand, read afresh.
"""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import GOODPUT, invoke, json_report
from rollup.base.errors import GoodputError
from rollup.report.as_json import report_json
from rollup.watch import LiveRun, watch_json
from tracebuild import ORIGIN_NS, S, ns, step, write_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def span_count(path: Path) -> int:
    """The spans `goodput query` reads at `path`."""
    result = invoke(["query", str(path), "--format", "json", "SELECT count(*) AS n FROM spans"])
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)[0]["n"])


def young_run(at_s: float = 0.0, job: bool = True) -> list[S]:
    """A job 10 s old from `at_s` (seconds from tracebuild's origin): two steps [1, 5) and [5, 9) s in, each with
    3 s of productive generation. The windows' goodput is 6 / 8 = 75.0%; the run's, its whole 10 s, 6 / 10 = 60.0%.
    Without its `job` span, each step names a parent not read (a job still running has not written it)."""
    spans = [
        step("s1", 1, at_s + 1, at_s + 5, parent="job"),
        S("g1", "rl.grpo.generation", at_s + 1, at_s + 4, parent="s1", bucket="productive", group="generation"),
        step("s2", 2, at_s + 5, at_s + 9, parent="job"),
        S("g2", "rl.grpo.generation", at_s + 5, at_s + 8, parent="s2", bucket="productive", group="generation"),
    ]
    return [S("job", "rl.grpo.job", at_s, at_s + 10, group="job"), *spans] if job else spans


def records(path: Path) -> list[bytes]:
    """The file's records as written: framed protobuf's length-prefixed messages, or JSON Lines' lines."""
    data = path.read_bytes()
    if path.suffix == ".jsonl":
        return [line + b"\n" for line in data.split(b"\n") if line]
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        out.append(data[at : at + 4 + length])
        at += 4 + length
    return out


# Records each file gains between two refreshes (the last of them torn now and then).
RECORDS_PER_ROUND = 5


def fresh_report(folder: Path) -> dict:
    return json_report(folder, "--no-cache")


def assert_same_report(run: LiveRun, folder: Path) -> dict:
    got = report_json(run.refresh().report)
    assert json.dumps(got, sort_keys=True) == json.dumps(fresh_report(folder), sort_keys=True)
    return got


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy"])
def test_a_run_written_a_record_at_a_time_reads_as_the_report_of_the_files_at_every_checkpoint(tmp_path, sample):
    written = {f.name: records(f) for f in sorted((SAMPLES / sample).iterdir()) if f.is_file()}
    folder = tmp_path / "run"
    folder.mkdir()
    run = LiveRun([folder])
    rounds = -(-max(len(r) for r in written.values()) // RECORDS_PER_ROUND)
    try:
        for k in range(rounds):
            for number, (name, held) in enumerate(written.items()):
                batch = held[k * RECORDS_PER_ROUND : (k + 1) * RECORDS_PER_ROUND]
                if not batch:
                    continue
                *whole, last = batch
                with open(folder / name, "ab") as out:
                    out.write(b"".join(whole))
                    if (k + number) % 4 == 0:  # torn: the first half now, the rest after the refresh
                        out.write(last[: len(last) // 2])
                        out.flush()
                        run.refresh()
                        out.write(last[len(last) // 2 :])
                    else:
                        out.write(last)
            if k % 4 == 2:
                assert_same_report(run, folder)
            else:
                run.refresh()
        final = assert_same_report(run, folder)
        assert final["iterations"]
    finally:
        run.close()


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["grpo_sync", "grpo_restart"])
def test_late_batches_of_the_processes_holding_gpus_charge_their_windows_gpus_again(tmp_path, sample):
    """The driver's records first (every window there), then the GPU workers' records but their last few, then
    each worker's last records a file at a time: the windows those land in were charged, and kept; each late batch
    makes their wall clock and GPU charges the report's again (`live_kept`: what new spans landed in is asked
    again)."""
    written = {f.name: records(f) for f in sorted((SAMPLES / sample).iterdir()) if f.is_file()}
    folder = tmp_path / "run"
    folder.mkdir()
    late = {name: held[-3:] for name, held in written.items() if "driver" not in name}
    for name, held in written.items():
        (folder / name).write_bytes(b"".join(held[:-3] if name in late else held))
    run = LiveRun([folder])
    try:
        first = assert_same_report(run, folder)
        assert first["gpus"] and first["iterations"]
        for name, held in late.items():
            with open(folder / name, "ab") as out:
                out.write(b"".join(held))
            got = assert_same_report(run, folder)
        assert got["gpus"] != first["gpus"]
    finally:
        run.close()


def test_an_attempts_extent_is_its_job_spans_when_it_has_one_as_report_says(tmp_path):
    """The watcher reads the attempts off its summary (`Summary.attempts`): an attempt with a job span spans the job
    span (a worker's span before it or after it is outside every attempt's extent); one without spans all its
    spans. Two attempts, the first with a job span and spans outside it, written in two refreshes."""
    from tracebuild import S, ns, run_resource, step, write_trace

    first = [
        S("job", "rl.grpo.job", 1, 9, group="job"),
        step("s1", 1, 1, 4, parent="job"),
        S("g1", "rl.grpo.generation", 1, 3, parent="s1", bucket="productive", group="generation"),
        step("s2", 2, 4, 8, parent="job"),
        S("early", "rl.grpo.logprob", 0.2, 0.5, bucket="overhead", group="logprob", process="worker"),
        S("late", "rl.grpo.logprob", 9.5, 10, bucket="overhead", group="logprob", process="worker"),
    ]
    second = [
        step("t3", 3, 12, 15, trace="t2"),
        S("g3", "rl.grpo.generation", 12, 14, parent="t3", bucket="productive", group="generation", trace="t2"),
    ]
    folder = tmp_path / "run"
    resources = {"driver": run_resource("driver", "a"), "worker": run_resource("worker", "a")}
    write_trace(folder / "a.otlp", first, resources=resources)
    run = LiveRun([folder])
    try:
        got = assert_same_report(run, folder)
        assert [(a["start_ns"], a["end_ns"]) for a in got["attempts"]] == [(ns(1), ns(9))]
        write_trace(folder / "b.otlp", second, resources={"driver": run_resource("driver-b", "b")})
        got = assert_same_report(run, folder)
        assert [(a["run_id"], a["start_ns"], a["end_ns"]) for a in got["attempts"]] == [
            ("a", ns(1), ns(9)), ("b", ns(12), ns(15))
        ]  # fmt: skip
    finally:
        run.close()


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["grpo_restart"])  # two attempts; about ten parts
def test_a_run_already_written_is_read_a_part_at_a_time_into_the_report_of_the_files(tmp_path, sample):
    """A watcher started on a finished run, each refresh taking in at most a few records (`Tailer.poll_bytes`):
    its first refresh reads on until every file is read, and gives the report of the files."""
    run = LiveRun([SAMPLES / sample])
    run.tailer.poll_bytes = 6000  # a few records of these files; a run of millions of spans is read 32 MB at a time
    try:
        assert sum(f.stat().st_size for f in (SAMPLES / sample).iterdir()) > 8 * run.tailer.poll_bytes
        got = report_json(run.refresh().report)
        assert json.dumps(got, sort_keys=True) == json.dumps(fresh_report(SAMPLES / sample), sort_keys=True)
        spans = invoke(["query", str(SAMPLES / sample), "--format", "json", "SELECT count(*) AS n FROM spans"])
        assert run.refresh().spans == json.loads(spans.stdout)[0]["n"]  # and nothing more is read
    finally:
        run.close()


def test_a_watcher_out_of_memory_says_so_as_report_does(tmp_path):
    """DuckDB out of memory under the watcher's limit: the error `report` gives (exit 2 at the command line), not
    an internal error. The limit is lowered on the watcher's own connection, below what reading a sample takes."""
    run = LiveRun([SAMPLES / "grpo_async"])
    try:
        run.connection.execute("SET memory_limit = '1MB'")
        with pytest.raises(GoodputError, match=r"^out of memory: DuckDB needed more than the .* GOODPUT_MEMORY_LIMIT"):
            run.refresh()
    finally:
        run.close()


@pytest.mark.slow
def test_a_file_replaced_under_the_watcher_is_read_again_from_its_start(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    sync, buggy = (sorted((SAMPLES / name).glob("grpo-driver-*")) for name in ("grpo_sync", "grpo_buggy"))
    target = folder / "driver.otlp"
    target.write_bytes(sync[0].read_bytes())
    run = LiveRun([folder])
    try:
        assert_same_report(run, folder)
        staged = tmp_path / "staged.otlp"
        staged.write_bytes(buggy[0].read_bytes())
        os.replace(staged, target)  # another file (another inode) under the same name
        assert_same_report(run, folder)
        target.write_bytes(sync[0].read_bytes()[:200])  # cut short: a torn first record, nothing of the rest
        state = run.refresh()
        assert state.spans == 0 and not state.report.iterations
    finally:
        run.close()


def test_the_json_of_a_refresh_is_the_reports_rows_and_total(tmp_path):
    handler = signal.getsignal(signal.SIGINT)
    result = invoke(["watch", str(SAMPLES / "grpo_sync"), "--once", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert signal.getsignal(signal.SIGINT) is handler  # a watch that ended by itself gives Ctrl-C back
    (line,) = result.stdout.splitlines()
    payload = json.loads(line)
    report = json_report(SAMPLES / "grpo_sync")
    assert list(payload) == ["kind", "spans", "files", "iterations", "total", "recent", "gpus"]
    assert payload["kind"] == "watch" and payload["files"] == 5
    assert payload["spans"] == span_count(SAMPLES / "grpo_sync")
    assert payload["iterations"] == report["iterations"][-10:]
    assert payload["total"] == report["total"] and payload["gpus"] == report["gpus"]
    # The last 15 minutes of a run shorter than a minute hold all of it, from its attempt's start (the time before
    # the job is no one's): `report --last` of as long gives the same stretch, and the job's productive time.
    whole = payload["recent"]["15m"]
    (attempt,) = report["attempts"]
    assert whole["start_ns"] == attempt["start_ns"] and whole["end_ns"] >= attempt["end_ns"]
    assert whole == json_report(SAMPLES / "grpo_sync", "--last", "15m")["recent"]
    assert whole["productive_s"] == pytest.approx(report["job"]["productive_s"], abs=1e-9)
    one = payload["recent"]["1m"]
    assert one == payload["recent"]["5m"] == whole
    assert one["wall_s"] == (one["end_ns"] - one["start_ns"]) / 1e9 < 60.0
    assert one["wall_s"] == pytest.approx(sum(one[k] for k in ("productive_s", "overhead_s", "idle_s", "wasted_s",
                                                                 "unaccounted_s")), abs=1e-6)  # fmt: skip


def test_watch_json_is_the_reports_after_every_refresh(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    run = LiveRun([folder])
    try:
        nothing = run.refresh()
        assert nothing.newest_end_ns is None and nothing.newest_iteration is None  # not known yet, not zero
        assert nothing.gpus is None and nothing.run_id is None
        empty = watch_json(nothing)
        assert (
            empty["spans"] == 0 and empty["iterations"] == [] and empty["recent"] == dict.fromkeys(["1m", "5m", "15m"])
        )
        for source in sorted((SAMPLES / "grpo_async").iterdir()):
            (folder / source.name).write_bytes(source.read_bytes())
        payload = watch_json(run.refresh())
        assert payload["iterations"] == fresh_report(folder)["iterations"][-10:]
    finally:
        run.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--interval", "0"], "--interval"),
        (["--interval", "-1"], "--interval"),
        (["--serve", "70000"], "--serve"),
        (["--serve", "x"], "--serve"),
    ],
)
def test_bad_options_are_usage_errors(args, says):
    result = invoke(["watch", str(SAMPLES / "grpo_sync"), "--once", *args])
    assert result.exit_code == 2
    assert says in result.output


def test_a_report_of_the_last_minutes_refuses_a_duration_without_a_unit():
    for bad in ("5x", "15", "0m", "-5m"):
        result = invoke(["report", str(SAMPLES / "grpo_sync"), "--last", bad])
        assert result.exit_code == 2, (bad, result.output)
        assert "--last" in result.output


def test_a_folder_that_does_not_exist_yet_is_waited_for(tmp_path):
    result = invoke(["watch", str(tmp_path / "later"), "--once"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "waiting for" in result.output and "later" in result.output


def test_a_file_that_is_no_trace_is_skipped_with_a_note_once(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "README.md").write_text("# not a trace\n")
    for source in sorted((SAMPLES / "grpo_sync").iterdir()):
        (folder / source.name).write_bytes(source.read_bytes())
    run = LiveRun([folder])
    try:
        first, second = run.refresh(), run.refresh()
        assert [n for n in first.notes if "README.md" in n] and not [n for n in second.notes if "README.md" in n]
        assert second.spans == span_count(SAMPLES / "grpo_sync")
    finally:
        run.close()


def test_a_port_taken_is_exit_2_naming_it():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke(["watch", str(SAMPLES / "grpo_sync"), "--once", "--serve", str(port)])
    assert result.exit_code == 2
    assert f"127.0.0.1:{port}" in result.stderr and "in use" in result.stderr


def _started_watch(args: list[str]) -> tuple[subprocess.Popen, str]:
    """`goodput watch ARGS --serve 0` as a process of its own, and the address it says it serves on."""
    process = subprocess.Popen(
        [str(GOODPUT), "watch", *args, "--serve", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "serving metrics at http://" in line, line
    return process, line.split("serving metrics at ")[1].strip()


def _stopped(process: subprocess.Popen) -> None:
    """Ctrl-C to a watch started by `_started_watch`: it ends with exit 0 (killed if it does not)."""
    try:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def _scraped(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """An HTTP GET of `url`: the text served, and its samples as Prometheus' parser reads them, by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip
    return text, samples


def _next_refresh(process: subprocess.Popen, spans: int) -> dict:
    """The first JSON line of `process` (a `--format jsonl` watch) whose refresh read `spans` spans."""
    assert process.stdout is not None
    for _ in range(200):
        payload = json.loads(process.stdout.readline())
        if payload["spans"] == spans:
            return payload
    raise AssertionError(f"no refresh read {spans} spans: {payload}")


@pytest.mark.slow
def test_the_metrics_endpoint_serves_the_latest_refresh_over_http(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    driver, *workers = sorted((SAMPLES / "grpo_sync").iterdir())
    (folder / driver.name).write_bytes(driver.read_bytes())
    spans = span_count(SAMPLES / "grpo_sync")
    process, url = _started_watch([str(folder), "--format", "jsonl", "--interval", "0.2"])
    try:
        assert process.stdout is not None
        first = json.loads(process.stdout.readline())
        for worker in workers:
            (folder / worker.name).write_bytes(worker.read_bytes())
        payload = _next_refresh(process, spans)  # the refresh that read the workers' files
        assert first["spans"] < payload["spans"]
        time.sleep(0.5)  # the next refreshes read nothing new: the same figures
        text, samples = _scraped(url)
        report = json_report(folder)
        run_id = {"run_id": report["attempts"][0]["run_id"]}
        assert samples[("goodput_spans", tuple(run_id.items()))] == spans
        assert samples[("goodput_iteration", tuple(run_id.items()))] == report["iterations"][-1]["iteration"]
        ratio = samples[("goodput_ratio", tuple(sorted({**run_id, "window": "total"}.items())))]
        assert ratio == pytest.approx(report["total"]["goodput"])
        assert "# TYPE goodput_wall_seconds gauge" in text
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url.replace("/metrics", "/"), timeout=10)
        assert refused.value.code == 404
        refused.value.close()
    finally:
        _stopped(process)


def test_metrics_have_no_sample_before_a_figure_and_a_young_runs_last_minute_is_all_of_it(tmp_path):
    """A scrape before the first span: the spans read (0) and nothing else, no wall clock of 0 s. Then a job 10 s
    old: its last 1, 5 and 15 minutes are its 10 s (SPEC section 13: time before the job is no one's), goodput
    6 / 10, not 6 / 60 (a ramp from near zero in Grafana while the job was younger than a minute)."""
    folder = tmp_path / "run"
    folder.mkdir()
    process, url = _started_watch([str(folder), "--format", "jsonl", "--interval", "0.2"])
    try:
        assert process.stdout is not None
        assert json.loads(process.stdout.readline())["spans"] == 0
        text, samples = _scraped(url)
        assert samples == {("goodput_spans", ()): 0.0}
        assert "# TYPE goodput_wall_seconds gauge" in text  # described, with no sample
        write_trace(folder / "run.otlp", young_run())
        payload = _next_refresh(process, len(young_run()))
        assert payload["recent"]["1m"] == payload["recent"]["15m"]
        assert (payload["recent"]["1m"]["start_ns"], payload["recent"]["1m"]["wall_s"]) == (ns(0), 10.0 - 0.0)
        text, samples = _scraped(url)
        ratios = {dict(labels)["window"]: value for (name, labels), value in samples.items() if name == "goodput_ratio"}
        assert ratios == pytest.approx({"total": 6 / 8, "1m": 6 / 10, "5m": 6 / 10, "15m": 6 / 10})
        wall = {dict(labels)["bucket"]: v for (name, labels), v in samples.items() if name == "goodput_wall_seconds"}
        assert wall == pytest.approx({"productive": 6.0, "overhead": 0.0, "idle": 0.0, "wasted": 0.0,
                                      "unaccounted": 8.0 - 6.0})  # fmt: skip
    finally:
        _stopped(process)


# --- the screen in a real terminal ----------------------------------------------------------------------------------

_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """`goodput ARGS` in a real pseudo-terminal of `columns` x `rows` (run in `cwd`), and the screens it draws:
    rich's live screen starts each frame at the top (`ESC [H`), each line padded to the width."""

    def __init__(self, args: list[str], cwd: Path | None = None, columns: int = 80, rows: int = 24) -> None:
        import fcntl
        import pty
        import termios

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: goodput in the terminal
            if cwd is not None:
                os.chdir(cwd)
            os.execv(str(GOODPUT), [str(GOODPUT), *args])
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        os.kill(self.pid, signal.SIGWINCH)
        self.seen = b""
        self.status: int | None = None

    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def frames(self) -> list[list[str]]:
        """Every screen drawn whole so far, each as its lines without the padding."""
        *drawn, _ = self.text().split("\x1b[H")
        return [[line.rstrip() for line in _ESCAPE.sub("", frame).split("\r\n")] for frame in drawn[1:]]

    def screen_where(self, wanted: Callable[[str], bool], timeout: float = 60) -> list[str]:
        """The first screen (as its lines) of whose text `wanted` holds, drawn within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for frame in self.frames():
                if wanted("\n".join(frame)):
                    return frame
            self.seen += _read(self.fd)
        raise AssertionError(self.text()[-2000:])

    def screens_after(self, count: int, timeout: float = 60) -> list[list[str]]:
        """The screens drawn until `count` more are whole."""
        deadline, wanted = time.monotonic() + timeout, len(self.frames()) + count
        while len(self.frames()) < wanted and time.monotonic() < deadline:
            self.seen += _read(self.fd)
        return self.frames()

    def ctrl_c(self) -> int:
        """Ctrl-C, as the terminal sends it: the exit code once the process ended."""
        os.write(self.fd, b"\x03")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.seen += _read(self.fd, wait=0.1)
                self.status = status
                return os.waitstatus_to_exitcode(status)
            self.seen += _read(self.fd, wait=0.1)
        raise AssertionError(self.text()[-2000:])

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


def _line(screen: list[str], start: str) -> str:
    """The screen's line that starts with `start`."""
    (line,) = [line for line in screen if line.startswith(start)]
    return line


def _read(fd: int, wait: float = 0.5) -> bytes:
    import select

    ready, _, _ = select.select([fd], [], [], wait)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536)
    except OSError:
        return b""


def test_ctrl_c_in_a_terminal_gives_the_screen_back_and_exits_0(tmp_path):
    """The live screen in a real pseudo-terminal of 80 x 24: drawn on the alternate screen, never more than the
    terminal, given back on Ctrl-C (exit 0)."""
    with Terminal(["watch", str(SAMPLES / "grpo_sync"), "--interval", "0.3"]) as terminal:
        screen = terminal.screen_where(lambda text: "total" in text)
        time.sleep(1)
        terminal.seen += _read(terminal.fd, wait=0.2)
        assert terminal.ctrl_c() == 0, terminal.text()[-2000:]
    text = terminal.text()
    assert "\x1b[?1049h" in text and "\x1b[?1049l" in text  # the alternate screen, entered and left
    assert text.rindex("\x1b[?1049l") > text.rindex("total")
    assert all(len(frame) <= 24 and max(map(len, frame)) <= 80 for frame in terminal.frames())
    goodput = json_report(SAMPLES / "grpo_sync")["total"]["goodput"]
    assert _line(screen, "goodput ").startswith(f"goodput {100 * goodput:.1f}%") and "iter" in text
    assert "Traceback" not in text


def test_a_run_younger_than_a_minute_has_its_whole_run_as_its_last_minute_on_the_screen(tmp_path):
    """SPEC section 13: the last 1, 5 and 15 minutes start no earlier than the job (its attempt's extent). A job
    10 s old shows the goodput of those 10 s, 6 / 10, where the 50 s before it made it 6 / 60 (a run at 71% showed
    `last 1m 30.0%`)."""
    write_trace(tmp_path / "run" / "run.otlp", young_run())
    with Terminal(["watch", "run", "--interval", "0.3"], cwd=tmp_path) as terminal:
        screen = terminal.screen_where(lambda text: "total" in text)
        assert terminal.ctrl_c() == 0, terminal.text()[-2000:]
    assert _line(screen, "goodput ") == "goodput 75.0%; last 1m 60.0%, 5m 60.0%, 15m 60.0%"


def test_a_folder_waited_for_is_said_until_it_appears_and_no_longer(tmp_path):
    """`goodput watch runs/live/trace` before the job made the folder: the screen says what it waits for; once the
    folder is there, it waits for files in it; once a trace is there, nothing is said of waiting, at the top or in
    the notes under the table (the note once stayed there for good)."""
    trace = tmp_path / "runs" / "live" / "trace"
    with Terminal(["watch", "runs/live/trace", "--interval", "0.2"], cwd=tmp_path) as terminal:
        assert terminal.screen_where(lambda text: "waiting" in text)[0] == "waiting for runs/live/trace to appear"
        trace.mkdir(parents=True)
        assert terminal.screen_where(lambda text: "files in" in text)[0] == "waiting for files in runs/live/trace"
        write_trace(trace / "run.otlp", young_run())
        terminal.screen_where(lambda text: "total" in text)
        *_, last = terminal.screens_after(3)
        assert terminal.ctrl_c() == 0, terminal.text()[-2000:]
    assert "total" in "\n".join(last) and not [line for line in last if "waiting" in line]


def test_spans_waiting_for_a_parent_are_no_warning_while_the_run_writes(tmp_path):
    """A job still running has not written its job span (it ends last): its steps name a parent not read yet. While
    the run writes, the screen's check does not count them as `orphan-span` warnings but says how many spans wait
    for a parent; once it has written nothing for a minute, they are `goodput check`'s warnings."""
    now_s = (time.time_ns() - ORIGIN_NS) / 1e9
    write_trace(tmp_path / "live" / "run.otlp", young_run(now_s - 11, job=False))
    findings = json.loads(invoke(["check", str(tmp_path / "live"), "--format", "json"]).stdout)
    orphans = sum(f["rule"] == "orphan-span" for f in findings["findings"])
    assert orphans == 2  # the two steps
    errors, warnings = findings["summary"]["errors"], findings["summary"]["warnings"]
    with Terminal(["watch", "live", "--interval", "0.3"], cwd=tmp_path) as terminal:
        screen = terminal.screen_where(lambda text: "check:" in text)
        assert terminal.ctrl_c() == 0, terminal.text()[-2000:]
    assert "newest span" in "\n".join(screen)  # the run is writing
    assert f"check: {errors} errors, {warnings - orphans} warnings; 2 spans wait for a parent" in screen
    stopped = write_trace(tmp_path / "stopped" / "run.otlp", young_run(job=False))  # the same run, long ago
    result = invoke(["watch", str(stopped), "--once"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    screen = result.stdout.splitlines()
    assert "has the job stopped?" in result.stdout
    assert f"check: {errors} errors, {warnings} warnings" in screen and "parent" not in result.stdout


@pytest.mark.slow
@pytest.mark.ray
def test_watch_follows_the_toy_job_while_it_runs_and_ends_on_its_report(ray_cluster, tmp_path):
    """The example job as a real process writing JSON Lines (a driver joining the session's cluster through
    RAY_ADDRESS, as a submitted job does), `goodput watch` as another reading them as they grow: iterations appear
    while the job runs, and the last refresh is the report's."""
    out = tmp_path / "run"
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GOODPUT_")}
    env |= {
        "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")])),
    }
    env["GOODPUT_CACHE_DIR"] = os.environ["GOODPUT_CACHE_DIR"]
    job = subprocess.Popen(
        [sys.executable, "-m", "examples.grpo_toy.job", "--steps", "3", "--mode", "async", "--out", f"{out}/"],
        cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    watcher = subprocess.Popen(
        [str(GOODPUT), "watch", str(out), "--format", "jsonl", "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert watcher.stdout is not None
    seen: list[dict] = []
    try:
        while job.poll() is None:
            seen.append(json.loads(watcher.stdout.readline()))
        assert job.returncode == 0
        final_spans = None
        for _ in range(60):  # the refreshes after the job's last write
            seen.append(json.loads(watcher.stdout.readline()))
            if final_spans == seen[-1]["spans"]:
                break
            final_spans = seen[-1]["spans"]
    finally:
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=30)
        watcher.stdout.close()
        if job.poll() is None:
            job.kill()
            job.wait()
    during = [p for p in seen if p["iterations"]]
    assert during and len({p["spans"] for p in seen}) > 2  # it grew refresh by refresh
    assert any(len(p["iterations"]) < 3 for p in during)  # iterations were seen before the job had all three
    report = json_report(out)
    assert seen[-1]["iterations"] == report["iterations"] and seen[-1]["total"] == report["total"]


# --- --last, offline ------------------------------------------------------------------------------------------------


def _newest_end(path: Path) -> int:
    result = invoke(["query", str(path), "SELECT max(greatest(end_ns, start_ns)) AS t FROM spans", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)[0]["t"]


def test_the_last_seconds_of_a_report_are_its_windows_clipped_and_the_stretch_charged_whole():
    sample = SAMPLES / "grpo_sync"
    whole, last = json_report(sample), json_report(sample, "--last", "2s")
    newest = _newest_end(sample)
    low = newest - 2 * 10**9
    assert last["recent"]["start_ns"] == low and last["recent"]["end_ns"] == newest
    assert last["recent"]["wall_s"] == 2.0 and last["job"]["wall_s"] == pytest.approx(2.0, abs=1e-9)
    # One attempt, no downtime: every instant of the stretch is in a row or outside.
    for bucket in ("productive", "overhead", "idle", "wasted", "unaccounted"):
        key = f"{bucket}_s"
        assert last["recent"][key] == pytest.approx(last["total"][key] + last["outside"][key], abs=1e-9)
    kept = [row for row in whole["iterations"] if row["end_ns"] > low]
    assert [row["iteration"] for row in last["iterations"]] == [row["iteration"] for row in kept]
    first = last["iterations"][0]
    assert first["start_ns"] == max(kept[0]["start_ns"], low) and first["end_ns"] == kept[0]["end_ns"]

    # The windows wholly inside are the whole report's rows (outliers aside: fewer rows are compared).
    def without_outliers(row: dict) -> dict:
        return {key: value for key, value in row.items() if key != "outliers"}

    assert [without_outliers(r) for r in last["iterations"][1:]] == [without_outliers(r) for r in kept[1:]]


def test_the_last_stretch_of_a_run_younger_than_it_starts_with_the_job(tmp_path):
    """SPEC section 13: `[T - DURATION, T]` starts no earlier than the first attempt's extent. A job of 10 s asked
    for its last minute gives its 10 s (goodput 6 / 10, not 6 / 60); asked for its last 4 s, [6, 10] s."""
    path = write_trace(tmp_path / "run.otlp", young_run())
    minute = json_report(path, "--last", "1m")
    (attempt,) = minute["attempts"]
    assert minute["recent"]["start_ns"] == attempt["start_ns"] == ns(0)
    assert minute["recent"]["end_ns"] == ns(10)
    assert minute["recent"]["wall_s"] == minute["job"]["wall_s"] == 10.0 - 0.0
    assert minute["recent"]["goodput"] == pytest.approx((3.0 + 3.0) / 10.0)
    assert minute["recent"]["unaccounted_s"] == pytest.approx(10.0 - 6.0)
    assert minute["job"] == json_report(path)["job"]  # the whole run, as without --last
    last = json_report(path, "--last", "4s")["recent"]
    assert (last["start_ns"], last["end_ns"], last["wall_s"]) == (ns(10 - 4), ns(10), 4.0)
    assert last["productive_s"] == pytest.approx(8.0 - 6.0)  # g2's [6, 8) s
    listed = invoke(["spans", str(path), "--last", "1m", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == len(young_run())


def test_spans_check_and_timeline_keep_the_spans_sharing_time_with_the_last_stretch(tmp_path):
    sample = SAMPLES / "grpo_buggy"
    newest = _newest_end(sample)
    low = newest - 3 * 10**9
    sql = f"SELECT span_id FROM spans WHERE start_ns <= {newest} AND greatest(end_ns, start_ns) >= {low}"
    result = invoke(["query", str(sample), sql, "--format", "json"])
    expected = {row["span_id"] for row in json.loads(result.stdout)}
    assert 0 < len(expected) < 91
    listed = invoke(["spans", str(sample), "--last", "3s", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert {row["span_id"] for row in json.loads(listed.stdout)} == expected
    found = invoke(["check", str(sample), "--last", "3s", "--format", "json"])
    assert found.exit_code in (0, 1), found.output
    assert {f["span_id"] for f in json.loads(found.stdout)["findings"] if f["span_id"]} <= expected
    written = tmp_path / "timeline.json"
    drawn = invoke(["timeline", str(sample), "--last", "3s", "--output", str(written)])
    assert drawn.exit_code == 0, drawn.output
    events = json.loads(written.read_text())["traceEvents"]
    ids = {e["args"]["span_id"] for e in events
           if e.get("ph") == "X" and "span_id" in e.get("args", {}) and e["cat"] != "critical"}  # fmt: skip
    assert ids and ids <= expected


@pytest.mark.parametrize("sample", ["grpo_sync", "grpo_async", "grpo_restart", "grpo_buggy"])
def test_the_screen_shows_the_checks_counts(tmp_path, sample):
    """The counts are `goodput check`'s, errors and warnings (the restart's are warnings, the buggy run's errors).
    The restart's 8: the first attempt's job span and its step 4 span, open at the kill, were never written, so the
    3 step spans, the start-up and the 4 spans of step 4 written under them are orphan-span warnings."""
    result = invoke(["watch", str(SAMPLES / sample), "--once"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    summary = json.loads(invoke(["check", str(SAMPLES / sample), "--format", "json"]).stdout)["summary"]
    assert summary == {"grpo_buggy": {"errors": 3, "warnings": 0}, "grpo_restart": {"errors": 0, "warnings": 8}}.get(
        sample, {"errors": 0, "warnings": 0}
    )
    assert f"check: {summary['errors']} errors, {summary['warnings']} warnings" in result.stdout


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_a_refresh_ends_the_watch_with_exit_0(tmp_path):
    """SIGINT while a refresh's queries run (refreshing back to back) stops the watch after that refresh; a second
    one stops it at once, and one that comes as the watch is ending (30 ms after the first: the watcher is closing
    its files) has nothing left to stop. None is an error. The lines go to a file: a pipe nobody reads would stop the
    watcher on a full buffer."""
    for number, (delay, gap) in enumerate(((0.0, None), (0.13, None), (0.07, 0.0), (0.07, 0.03))):
        lines = tmp_path / f"watch-{number}.jsonl"
        with lines.open("w") as out:
            process = subprocess.Popen(
                [str(GOODPUT), "watch", str(SAMPLES / "grpo_sync"), "--format", "jsonl", "--interval", "0.01"],
                stdout=out, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not lines.read_text().endswith("\n") and time.monotonic() < deadline:  # watching: refreshes follow
            time.sleep(0.01)
        assert json.loads(lines.read_text().splitlines()[0])["kind"] == "watch"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        if gap is not None:
            time.sleep(gap)
            process.send_signal(signal.SIGINT)  # none is sent once the process has ended
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        assert "Error" not in stderr


def test_a_reader_that_stops_early_ends_the_watch_quietly():
    """`goodput watch ... --format jsonl | head -1`: the watch ends when head has read its line, no error."""
    result = subprocess.run(
        f"{GOODPUT} watch {SAMPLES / 'grpo_sync'} --format jsonl --interval 0.01 | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kind"] == "watch"
    assert result.stderr == "", result.stderr
