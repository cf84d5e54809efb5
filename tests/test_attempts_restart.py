"""A real crash (SPEC section 7): the toy job SIGKILLed mid-iteration, relaunched into the same folder resuming from
an earlier step; `goodput report` must tell the two attempts apart and show the rework and the downtime.

The expected figures are derived here from the spans themselves (`goodput query`), not from the report's code: the
superseded window is the first attempt's step-3 span, the downtime the gap between the first attempt's last span
and the second attempt's job span.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from examples.grpo_toy.restart import Crash, crash_and_resume

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS, KILL_IN, RESUME_FROM = 4, 3, 2


@pytest.fixture(scope="module")
def restarted(ray_cluster, tmp_path_factory) -> tuple[Path, Crash]:
    """Both attempts on the session's cluster: the first one's driver is SIGKILLed, Ray ends its actors."""
    out = tmp_path_factory.mktemp("restart") / "run"
    address = ray_cluster.get_runtime_context().gcs_address
    crash = crash_and_resume(out, steps=STEPS, kill_in=KILL_IN, resume_from=RESUME_FROM, on=address)
    return out, crash


def query(path: Path, sql: str) -> list[dict]:
    result = invoke(["query", str(path), "--format", "json", sql])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_crashed_and_the_resumed_attempt_are_told_apart(restarted):
    out, crash = restarted
    killed_at = crash.killed_at
    result = invoke(["report", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)

    attempts = query(
        out,
        "SELECT run_id, min(start_ns) AS first_ns, max(end_ns) AS last_ns, "
        "min(start_ns) FILTER (name = 'rl.grpo.job') AS job_start_ns, "
        "max(end_ns) FILTER (name = 'rl.grpo.job') AS job_end_ns FROM spans GROUP BY run_id ORDER BY first_ns",
    )
    assert len(attempts) == 2
    crashed, resumed = attempts
    assert crashed["job_end_ns"] is None  # the killed attempt never ended its job span
    # Its last spans end around the kill (a Ray worker may finish a call while its dead driver is noticed) ...
    assert abs(crashed["last_ns"] - killed_at) < 5e9
    assert crashed["last_ns"] < resumed["job_start_ns"]  # ... and well before the relaunch began

    assert [a["run_id"] for a in payload["attempts"]] == [crashed["run_id"], resumed["run_id"]]
    # its steps that were redone, and the one it was killed in (SPEC 7's torn window: lost work, not outside)
    assert payload["attempts"][0]["superseded"] == list(range(RESUME_FROM, KILL_IN + 1))
    assert payload["attempts"][1]["superseded"] == []
    assert [row["iteration"] for row in payload["iterations"]] == list(range(1, STEPS + 1))

    steps = query(
        out,
        "SELECT run_id, iteration, start_ns, end_ns FROM spans WHERE name = 'rl.grpo.step' ORDER BY start_ns",
    )
    first_try = [s for s in steps if s["run_id"] == crashed["run_id"] and RESUME_FROM <= s["iteration"] < KILL_IN]
    (torn,) = query(  # the step it was killed in: its spans were read, its step span was not
        out,
        f"SELECT min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM spans "
        f"WHERE run_id = '{crashed['run_id']}' AND iteration = {KILL_IN}",  # a worker's spans carry the iteration
    )
    assert torn["start_ns"] is not None  # the workers' spans of the step in progress reached their files
    rework_ns = sum(s["end_ns"] - s["start_ns"] for s in first_try) + (torn["end_ns"] - torn["start_ns"])
    assert payload["rework"]["wall_s"] == pytest.approx(rework_ns / 1e9, abs=1e-6)
    assert payload["rework"]["wall_s"] > 0

    # Each attempt's extent reaches back to its processes' start (process.creation.time, SPEC 7): the job's wall
    # clock is from the first process's launch to the last span, Ray's start-up included.
    last_ns = max(a["last_ns"] for a in attempts)
    assert payload["job"]["wall_s"] == pytest.approx((last_ns - crash.launched_at) / 1e9, abs=0.5)
    assert payload["attempts"][0]["start_ns"] < crashed["first_ns"]
    assert payload["attempts"][1]["start_ns"] < resumed["job_start_ns"]
    # Downtime: from the crashed attempt's last span to the relaunched process's start (its extent's start).
    downtime_ns = payload["attempts"][1]["start_ns"] - crashed["last_ns"]
    assert payload["downtime"]["wall_s"] == pytest.approx(downtime_ns / 1e9, abs=1e-9)
    assert payload["downtime"]["wall_s"] > 0

    # Rows 3..5 are the resumed attempt's windows.
    resumed_windows = {s["iteration"]: s for s in steps if s["run_id"] == resumed["run_id"]}
    for row in payload["iterations"]:
        if row["iteration"] >= RESUME_FROM:
            window = resumed_windows[row["iteration"]]
            assert (row["start_ns"], row["end_ns"]) == (window["start_ns"], window["end_ns"])

    job = payload["job"]
    parts = ("total", "rework", "outside", "downtime")
    assert job["wall_s"] == pytest.approx(sum(payload[part]["wall_s"] for part in parts), abs=1e-6)
    assert job["goodput"] == pytest.approx(payload["total"]["productive_s"] / job["wall_s"])
    assert job["goodput"] < payload["total"]["goodput"]  # the crash cost goodput the per-step view cannot show


def test_the_table_shows_rework_and_downtime(restarted):
    out, _ = restarted
    result = invoke(["report", str(out)], width=200)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.lstrip("│ ").startswith("rework") for line in lines), result.stdout
    assert any(line.lstrip("│ ").startswith("downtime") for line in lines), result.stdout


def test_one_attempt_alone_reads_as_a_plain_run(restarted):
    out, _ = restarted
    result = invoke(["report", str(out), "--attempt", "latest", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [row["iteration"] for row in payload["iterations"]] == list(range(RESUME_FROM, STEPS + 1))
    assert payload["rework"]["wall_s"] == 0 and payload["downtime"]["wall_s"] == 0
