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
from examples.grpo_toy.restart import crash_and_resume

pytestmark = [pytest.mark.ray, pytest.mark.slow]

STEPS, KILL_IN, RESUME_FROM = 4, 3, 2


@pytest.fixture(scope="module")
def restarted(ray_cluster, tmp_path_factory) -> tuple[Path, int]:
    """Both attempts on the session's cluster: the first one's driver is SIGKILLed, Ray ends its actors."""
    out = tmp_path_factory.mktemp("restart") / "run"
    address = ray_cluster.get_runtime_context().gcs_address
    killed_at = crash_and_resume(out, steps=STEPS, kill_in=KILL_IN, resume_from=RESUME_FROM, on=address)
    return out, killed_at


def query(path: Path, sql: str) -> list[dict]:
    result = invoke(["query", str(path), "--format", "json", sql])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_crashed_and_the_resumed_attempt_are_told_apart(restarted):
    out, killed_at = restarted
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
    assert payload["attempts"][0]["superseded"] == list(range(RESUME_FROM, KILL_IN))  # its steps that were redone
    assert payload["attempts"][1]["superseded"] == []
    assert [row["iteration"] for row in payload["iterations"]] == list(range(1, STEPS + 1))

    steps = query(
        out,
        "SELECT run_id, iteration, start_ns, end_ns FROM spans WHERE name = 'rl.grpo.step' ORDER BY start_ns",
    )
    first_try = [s for s in steps if s["run_id"] == crashed["run_id"] and RESUME_FROM <= s["iteration"] < KILL_IN]
    rework_ns = sum(s["end_ns"] - s["start_ns"] for s in first_try)
    assert payload["rework"]["wall_s"] == pytest.approx(rework_ns / 1e9, abs=1e-9)
    assert payload["rework"]["wall_s"] > 0

    # Downtime: from the crashed attempt's last span to the resumed attempt's job span (its extent's start).
    downtime_ns = resumed["job_start_ns"] - crashed["last_ns"]
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
