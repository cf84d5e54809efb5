"""Runs and attempts (SPEC section 7): a job that crashed and restarted from a checkpoint, read from one folder.

The main timeline, in seconds: attempt A (`run-a`) runs iterations 1-3 and dies in 3; attempt B (`run-b`) starts
after a gap and redoes 3, then 4 and 5.

    A  job [0, 40]   step1 [2, 10]  step2 [10, 20]  step3 [20, 35]   gen1 [3, 8]  gen2 [11, 18]  gen3 [21, 30]
    B  job [50, 90]  step3 [52, 62] step4 [62, 72]  step5 [72, 85]   gen3 [53, 60] gen4 [63, 70] gen5 [73, 80]

Every expected figure is derived from that drawing in the test. And the attempts worked out in Python from a
watcher's folded rows (`attempts.attempts_of_folded`) are `find_attempts`' in SQL.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, invoke
from rollup.base.schema import IS_JOB_SQL
from rollup.checks.check import CheckOptions, check_findings
from rollup.report.as_json import report_json
from rollup.report.build import ReportOptions, build_report
from rollup.store.attempts import Attempt, attempts_of_folded, find_attempts
from rollup.store.span_store import open_store
from tracebuild import ORIGIN_NS, S, span_id_of, step, write_trace

RUN_ID = "goodput.run.id"


def run(args: list[str]):
    return invoke(args, width=160)


def creation_time(seconds: float) -> str:
    """`process.creation.time` as `configure()` writes it (ISO 8601, UTC) for `seconds` from the traces' origin."""
    from datetime import datetime

    return datetime.fromtimestamp(ORIGIN_NS / 1e9 + seconds, tz=UTC).isoformat()


def resource(process: str, run_id: str | None, key: str = RUN_ID) -> dict:
    attrs = {"service.name": "toy", "service.instance.id": process, "host.name": "host", "process.pid": 1}
    if run_id is not None:
        attrs[key] = run_id
    return attrs


def attempt_a(run_id: str | None = "run-a") -> tuple[list[S], dict]:
    p = "a-driver"
    spans = [
        S("job", "rl.grpo.job", 0, 40, group="job", process=p, trace="a"),
        step("step1", 1, 2, 10, parent="job", process=p, trace="a"),
        step("step2", 2, 10, 20, parent="job", process=p, trace="a"),
        step("step3", 3, 20, 35, parent="job", process=p, trace="a"),
        S("gen1", "rl.grpo.generation", 3, 8, parent="step1", bucket="productive", process=p, trace="a"),
        S("gen2", "rl.grpo.generation", 11, 18, parent="step2", bucket="productive", process=p, trace="a"),
        S("gen3", "rl.grpo.generation", 21, 30, parent="step3", bucket="productive", process=p, trace="a"),
    ]
    return spans, {p: resource(p, run_id)}


def attempt_b(run_id: str | None = "run-b", key: str = RUN_ID) -> tuple[list[S], dict]:
    p, w = "b-driver", "b-worker"
    spans = [
        S("job", "rl.grpo.job", 50, 90, group="job", process=p, trace="b"),
        step("step3", 3, 52, 62, parent="job", process=p, trace="b"),
        step("step4", 4, 62, 72, parent="job", process=p, trace="b"),
        step("step5", 5, 72, 85, parent="job", process=p, trace="b"),
        # A Ray worker of B: parented through the carrier, it inherits B's iteration and is one more process of B.
        S("gen3", "rl.grpo.generation", 53, 60, parent="step3", bucket="productive", process=w, trace="b"),
        S("gen4", "rl.grpo.generation", 63, 70, parent="step4", bucket="productive", process=w, trace="b"),
        S("gen5", "rl.grpo.generation", 73, 80, parent="step5", bucket="productive", process=w, trace="b"),
    ]
    return spans, {p: resource(p, run_id, key), w: resource(w, run_id, key)}


def restarted_job(tmp_path, a=None, b=None):
    """Both attempts' files in one folder, as a job restarted with the same `path="run/"` leaves them."""
    (a_spans, a_res), (b_spans, b_res) = a or attempt_a(), b or attempt_b()
    write_trace(tmp_path / "run" / "a-driver.otlp", a_spans, resources=a_res)
    write_trace(tmp_path / "run" / "b.jsonl", b_spans, "jsonl", resources=b_res)
    return tmp_path / "run"


def report(path, *extra: str) -> dict:
    result = run(["report", str(path), "--format", "json", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def seconds_ns(seconds: float) -> int:
    return ORIGIN_NS + round(seconds * 1e9)


# --- two sequential attempts, the second resuming -----------------------------------------------------------------


def assert_restarted_job_figures(out: dict, a: str = "run-a", b: str = "run-b") -> None:
    rows = {it["iteration"]: it for it in out["iterations"]}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert (rows[3]["start_ns"], rows[3]["end_ns"]) == (seconds_ns(52), seconds_ns(62))  # B's window supersedes A's
    assert rows[3]["productive_s"] == 60.0 - 53.0
    assert rows[3]["span_seconds"]["productive"] == 60.0 - 53.0  # B's spans only: not A's gen3 (9 s)
    total = out["total"]
    assert total["wall_s"] == (10 - 2) + (20 - 10) + (62 - 52) + (72 - 62) + (85 - 72)
    assert total["productive_s"] == (8 - 3) + (18 - 11) + (60 - 53) + (70 - 63) + (80 - 73)

    rework = out["rework"]
    assert rework["wall_s"] == 35.0 - 20.0  # A's window 3, lost with A
    assert rework["productive_s"] == 30.0 - 21.0
    assert rework["unaccounted_s"] == (35.0 - 20.0) - (30.0 - 21.0)
    assert set(rework) == set(out["outside"])

    assert out["downtime"] == {"wall_s": 50.0 - 40.0}
    # Each attempt's extent less all of its windows, A's superseded window 3 included.
    assert out["outside"]["wall_s"] == ((2 - 0) + (40 - 35)) + ((52 - 50) + (90 - 85))

    job = out["job"]
    assert job["wall_s"] == total["wall_s"] + rework["wall_s"] + out["outside"]["wall_s"] + out["downtime"]["wall_s"]
    assert job["wall_s"] == 90.0 - 0.0  # the attempts do not overlap and their windows sit inside their extents
    assert job["productive_s"] == total["productive_s"]
    assert job["goodput"] == pytest.approx(total["productive_s"] / (90.0 - 0.0))

    assert out["attempts"] == [
        {"run_id": a, "start_ns": seconds_ns(0), "end_ns": seconds_ns(40), "first_iteration": 1,
         "last_iteration": 3, "processes": 1, "superseded": [3]},
        {"run_id": b, "start_ns": seconds_ns(50), "end_ns": seconds_ns(90), "first_iteration": 3,
         "last_iteration": 5, "processes": 2, "superseded": []},
    ]  # fmt: skip


@pytest.mark.slow
def test_a_resumed_attempt_supersedes_the_dead_ones_window_and_the_gap_is_downtime(tmp_path):
    assert_restarted_job_figures(report(restarted_job(tmp_path)))


@pytest.mark.slow
def test_nemo_run_id_names_an_attempt_too(tmp_path):
    path = restarted_job(tmp_path, b=attempt_b("nemo-b", key="nemo.run.id"))
    assert_restarted_job_figures(report(path), b="nemo-b")


@pytest.mark.slow
def test_goodput_run_id_wins_over_nemo_run_id(tmp_path):
    spans, res = attempt_b("run-b")
    for attrs in res.values():
        attrs["nemo.run.id"] = "nemo-b"
    assert_restarted_job_figures(report(restarted_job(tmp_path, b=(spans, res))))


def test_spans_without_a_run_id_are_one_unnamed_attempt(tmp_path):
    path = restarted_job(tmp_path, a=attempt_a(run_id=None))
    out = report(path)
    assert_restarted_job_figures(out, a="")


def test_attempts_are_ordered_by_their_first_span_not_by_name(tmp_path):
    path = restarted_job(tmp_path, a=attempt_a("zz-first"), b=attempt_b("aa-second"))
    out = report(path)
    assert [a["run_id"] for a in out["attempts"]] == ["zz-first", "aa-second"]
    assert out["attempts"][0]["superseded"] == [3]  # the earlier attempt's window is the one replaced


def test_windows_are_found_per_attempt_with_or_without_step_spans(tmp_path):
    # B has no step spans: its windows are the envelopes of its iterations, though A's come from step spans.
    spans, res = attempt_b()
    stepless = [s for s in spans if s.group != "step"]
    for span in stepless:
        if span.label.startswith("gen"):
            span.iteration, span.parent = int(span.label[-1]), "job"
    out = report(restarted_job(tmp_path, b=(stepless, res)))
    rows = {it["iteration"]: it for it in out["iterations"]}
    assert (rows[1]["start_ns"], rows[1]["end_ns"]) == (seconds_ns(2), seconds_ns(10))  # A's step1
    assert (rows[3]["start_ns"], rows[3]["end_ns"]) == (seconds_ns(53), seconds_ns(60))  # B's gen3, no step
    assert out["rework"]["wall_s"] == 35.0 - 20.0
    assert out["outside"]["wall_s"] == ((2 - 0) + (40 - 35)) + ((53 - 50) + (63 - 60) + (73 - 70) + (90 - 80))


@pytest.mark.slow
def test_an_iteration_filter_keeps_the_superseded_windows_of_those_iterations(tmp_path):
    path = restarted_job(tmp_path)
    three = report(path, "--iteration", "3")
    assert [it["iteration"] for it in three["iterations"]] == [3]
    assert three["rework"]["wall_s"] == 35.0 - 20.0
    assert three["downtime"]["wall_s"] == 50.0 - 40.0  # outside and downtime stay the whole run's
    assert report(path, "--iterations", "4:5")["rework"]["wall_s"] == 0.0


@pytest.mark.slow
def test_by_process_rows_count_their_own_attempts_span_seconds(tmp_path):
    out = report(restarted_job(tmp_path), "--by", "process")
    rows = {(it["iteration"], it["process"]): it for it in out["iterations"]}
    assert rows[(3, "b-worker")]["span_seconds"]["productive"] == 60.0 - 53.0
    assert (3, "a-driver") not in rows  # A's gen3 lies in A's window 3, not in B's
    assert out["rework"]["wall_s"] == 35.0 - 20.0


# --- the table and the flat formats ---------------------------------------------------------------------------------


def test_the_table_shows_rework_downtime_and_the_jobs_goodput(tmp_path):
    result = run(["report", str(restarted_job(tmp_path))])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    labels = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert labels == ["1", "2", "3", "4", "5", "total", "outside", "rework", "downtime"]
    job_goodput = ((8 - 3) + (18 - 11) + (60 - 53) + (70 - 63) + (80 - 73)) / (90 - 0)
    assert lines[-1] == f"job: {90 - 0:.3f} s wall clock, {100 * job_goodput:.1f}% goodput over 2 attempts"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_flat_formats_gain_rework_downtime_and_job_rows(tmp_path, fmt):
    result = run(["report", str(restarted_job(tmp_path)), "--format", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "csv":
        rows = {row["iteration"]: row for row in csv.DictReader(io.StringIO(result.stdout))}
        assert float(rows["rework"]["wall_s"]) == 35.0 - 20.0
        assert float(rows["downtime"]["wall_s"]) == 50.0 - 40.0 and rows["downtime"]["productive_s"] == ""
        assert float(rows["job"]["wall_s"]) == 90.0 - 0.0
    else:
        labels = [line.split("|")[1].strip() for line in result.stdout.splitlines()[2:]]
        assert labels[-5:] == ["total", "outside", "rework", "downtime", "job"]


@pytest.mark.slow
def test_one_attempt_reads_as_before(tmp_path):
    spans, res = attempt_b()
    path = write_trace(tmp_path / "run.otlp", spans, resources=res)
    out = report(path)
    assert out["rework"] == {**dict.fromkeys(set(out["outside"]) - {"goodput"}, 0.0), "goodput": None}
    assert out["downtime"] == {"wall_s": 0.0}
    assert out["job"]["wall_s"] == out["total"]["wall_s"] + out["outside"]["wall_s"] == 90.0 - 50.0
    assert [a["run_id"] for a in out["attempts"]] == ["run-b"]
    table = run(["report", str(path)]).stdout
    assert "rework" not in table and "downtime" not in table and "job:" not in table
    assert table.rstrip("\n").endswith("┘")
    labels = [row["iteration"] for row in csv.DictReader(io.StringIO(run(["report", str(path), "-f", "csv"]).stdout))]
    assert labels == ["3", "4", "5", "total", "outside"]


# --- --attempt ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cache", [(), ("--no-cache",)], ids=["cached", "no-cache"])
def test_attempt_reads_one_attempt_only(tmp_path, cache):
    # Without the cache, the lineage is a view of this command's own tables (lineage.build_lineage), and the attempt
    # is kept in a table of its own (SpanStore.spans).
    path = restarted_job(tmp_path)
    a = report(path, *cache, "--attempt", "run-a")
    assert [it["iteration"] for it in a["iterations"]] == [1, 2, 3]
    three = a["iterations"][-1]
    assert (three["start_ns"], three["productive_s"]) == (seconds_ns(20), 30.0 - 21.0)
    assert a["rework"]["wall_s"] == 0.0 and a["downtime"]["wall_s"] == 0.0
    assert a["job"]["wall_s"] == 40.0 - 0.0
    assert [x["run_id"] for x in a["attempts"]] == ["run-a"] and a["attempts"][0]["superseded"] == []
    latest = report(path, *cache, "--attempt", "latest")
    assert [it["iteration"] for it in latest["iterations"]] == [3, 4, 5]
    assert [x["run_id"] for x in latest["attempts"]] == ["run-b"]


@pytest.mark.slow
@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "no-cache"])
def test_one_attempt_asked_of_a_store_leaves_the_store_whole_for_the_next_question(tmp_path, use_cache):
    """The store hands out an attempt's spans as a set of its own: the whole run's stay as they were."""
    b_spans, b_resources = attempt_b()
    nested = S("nested", "rl.grpo.logprob", 64, 66, parent="gen4", bucket="overhead", process="b-worker", trace="b")
    path = str(restarted_job(tmp_path, b=(b_spans + [nested], b_resources)))  # B alone holds a finding
    with open_store([path], use_cache=False) as fresh:
        whole = json.dumps(report_json(build_report(fresh)))
        whole_check = check_findings(fresh).findings
    with open_store([path], use_cache=use_cache, cache_dir=tmp_path / "cache") as store:
        only_a = report_json(build_report(store, ReportOptions(attempt="run-a")))
        assert [it["iteration"] for it in only_a["iterations"]] == [1, 2, 3]
        assert json.dumps(report_json(build_report(store))) == whole
        assert check_findings(store, CheckOptions(attempt="run-a")).findings != whole_check
        assert check_findings(store).findings == whole_check
        assert store.spans("run-a") is store.spans("run-a")  # made once
        assert store.spans("latest").run_id == "run-b" and store.spans().run_id is None


@pytest.mark.slow
def test_an_unknown_attempt_is_exit_2_naming_the_attempts_there(tmp_path):
    path = restarted_job(tmp_path, a=attempt_a(run_id=None))
    for command in (["report"], ["check"], ["spans", "--iteration", "3"]):
        result = run([*command, str(path), "--attempt", "run-c"])
        assert result.exit_code == 2, result.output
        assert "run-c" in result.stderr and '"run-b"' in result.stderr and "unnamed" in result.stderr
        assert "Traceback" not in result.output


@pytest.mark.slow
def test_spans_lists_the_rows_window_or_the_chosen_attempts(tmp_path):
    path = restarted_job(tmp_path)
    latest = json.loads(run(["spans", str(path), "--iteration", "3", "--format", "json"]).stdout)
    assert {row["span_id"] for row in latest} == {
        span_id_of("job", "b"), span_id_of("step3", "b"), span_id_of("gen3", "b"),
    }  # fmt: skip
    a = run(["spans", str(path), "--iteration", "3", "--attempt", "run-a", "--format", "json"])
    assert {row["span_id"] for row in json.loads(a.stdout)} == {
        span_id_of("job", "a"), span_id_of("step3", "a"), span_id_of("gen3", "a"),
    }  # fmt: skip


# --- overlapping attempts -------------------------------------------------------------------------------------------


def overlapping_job(tmp_path):
    """Two jobs writing into one folder: B starts (at 15) while A (0-40) still runs; A's step2 and B's step1
    overlap, which is not overlapping-steps (they are different attempts) but overlapping-attempts."""
    a = [
        S("job", "rl.grpo.job", 0, 40, group="job", trace="a"),
        step("step1", 1, 2, 10, parent="job", trace="a"),
        step("step2", 2, 10, 30, parent="job", trace="a"),
    ]
    b = [
        S("setup", "rl.startup", 15, 16, group="setup", trace="b"),  # B's earliest-starting span
        S("job", "rl.grpo.job", 16, 60, group="job", trace="b"),
        step("step1", 1, 20, 35, parent="job", trace="b"),
    ]
    write_trace(tmp_path / "run" / "a.otlp", a, resources={"driver": resource("driver", "job-a")})
    write_trace(tmp_path / "run" / "b.otlp", b, resources={"driver": resource("driver", "job-b")})
    return tmp_path / "run"


def test_overlapping_attempts_is_one_warning_on_the_later_attempts_first_span(tmp_path):
    result = run(["check", str(overlapping_job(tmp_path)), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    # Besides: the two rows' windows (B's 1, A's 2) hold no bucketed span, so each is mostly-unaccounted.
    rules = [f["rule"] for f in payload["findings"]]
    assert rules == ["overlapping-attempts", "mostly-unaccounted", "mostly-unaccounted"]
    finding = payload["findings"][0]
    assert finding["severity"] == "warning"
    assert (finding["span_id"], finding["related_span_id"]) == (span_id_of("setup", "b"), span_id_of("job", "a"))
    assert '"job-a"' in finding["message"] and '"job-b"' in finding["message"]
    assert f"{40 - 16:.3f}s" in finding["message"]  # A's extent [0, 40] against B's job span [16, 60]
    assert payload["summary"] == {"errors": 0, "warnings": 1 + 2}


def test_checking_one_of_two_overlapping_attempts_finds_nothing(tmp_path):
    result = run(["check", str(overlapping_job(tmp_path)), "--attempt", "job-b", "--format", "json"])
    assert result.exit_code == 0, result.output
    # No overlapping-attempts; only B's window 1, which no bucketed span covers.
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["mostly-unaccounted"]


def test_overlapping_steps_are_still_found_within_an_attempt(tmp_path):
    spans = [step("step1", 1, 0, 10, trace="b"), step("step2", 2, 8, 20, trace="b")]
    path = write_trace(tmp_path / "b.otlp", spans, resources={"driver": resource("driver", "job-b")})
    payload = json.loads(run(["check", str(path), "--format", "json"]).stdout)
    # Both windows hold no bucketed span: mostly-unaccounted each.
    assert [f["rule"] for f in payload["findings"]] == ["overlapping-steps", "mostly-unaccounted", "mostly-unaccounted"]


def test_overlapping_attempts_charge_each_others_spans_and_have_no_downtime(tmp_path):
    out = report(overlapping_job(tmp_path))
    rows = {it["iteration"]: it for it in out["iterations"]}
    assert (rows[1]["start_ns"], rows[2]["start_ns"]) == (seconds_ns(20), seconds_ns(10))  # 1 is B's, 2 is A's
    assert out["rework"]["wall_s"] == 10.0 - 2.0  # A's window 1
    assert out["downtime"]["wall_s"] == 0.0
    assert out["outside"]["wall_s"] == ((2 - 0) + (40 - 30)) + ((20 - 16) + (60 - 35))


# --- the property: the job's wall clock is the whole stretch the attempts cover -------------------------------------

half_seconds = st.integers(0, 8).map(lambda k: k / 2)


@st.composite
def restarted_jobs(draw) -> tuple[list[S], dict, list[tuple[float, float]]]:
    """1-3 attempts one after the other (gaps of 0 s and more), each resuming at or before where the last one
    stopped; steps back to back or apart inside the attempt's extent, a productive leaf in some. Returns the spans,
    the resources and each attempt's extent."""
    spans: list[S] = []
    resources: dict = {}
    extents = []
    t, resume = 0.0, 1
    for k in range(draw(st.integers(1, 3))):
        process, trace = f"p{k}", f"t{k}"
        ended = t
        t += draw(half_seconds)
        start = t
        created = (ended + start) / 2 if draw(st.booleans()) else None  # the process started before its first span
        t += draw(half_seconds)
        first = draw(st.integers(1, resume))
        steps = draw(st.integers(0, 4))
        own: list[S] = [S(f"setup{k}", "rl.startup", start, t, group="setup", process=process, trace=trace)]
        for n in range(first, first + steps):
            length = 0.5 + draw(half_seconds)
            own.append(step(f"s{n}", n, t, t + length, process=process, trace=trace))
            if draw(st.booleans()):
                own.append(S(f"g{n}", "rl.grpo.generation", t, t + length / 2, parent=f"s{n}", bucket="productive",
                             process=process, trace=trace))  # fmt: skip
            t += length + draw(half_seconds)
        t += draw(half_seconds)
        if draw(st.booleans()):
            own.append(S(f"job{k}", "rl.grpo.job", start, t, group="job", process=process, trace=trace))
            extent = (start, t)
        else:
            extent = (min(s.start for s in own), max(s.end for s in own))
        extents.append((min(extent[0], created if created is not None else extent[0]), extent[1]))
        spans += own
        resources[process] = resource(process, f"run-{k}")
        if created is not None:
            resources[process]["process.creation.time"] = creation_time(created)
        resume = max(first + steps, 1)
    return spans, resources, extents


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=15)
@given(job=restarted_jobs())
def test_the_jobs_wall_clock_is_the_stretch_from_the_first_attempt_to_the_last(tmp_path_factory, job):
    spans, resources, extents = job
    path = write_trace(tmp_path_factory.mktemp("restarted") / "run.otlp", spans, resources=resources)
    with open_store([str(path)], use_cache=False) as store:
        out = report_json(build_report(store))
    first, last = min(s for s, _ in extents), max(e for _, e in extents)
    assert out["job"]["wall_s"] == pytest.approx(last - first, abs=1e-9)
    assert out["downtime"]["wall_s"] == pytest.approx(
        sum(max(0.0, b[0] - a[1]) for a, b in zip(extents, extents[1:], strict=False)), abs=1e-9
    )
    steps = [s for s in spans if s.iteration is not None]
    latest = {s.iteration: s for s in steps}  # in attempt order: the last window of an iteration is the row's
    assert out["total"]["wall_s"] == pytest.approx(sum(s.end - s.start for s in latest.values()), abs=1e-9)
    assert out["rework"]["wall_s"] == pytest.approx(
        sum(s.end - s.start for s in steps if latest[s.iteration] is not s), abs=1e-9
    )
    assert [a["run_id"] for a in out["attempts"]] == [f"run-{k}" for k in range(len(extents))]


# --- the attempts worked out in Python from folded rows (a watcher's summary) against find_attempts -----------------


def _attempts_of_rows(spans, folded: bool) -> list[Attempt]:
    """`attempts_of_folded` of every span of `spans` as a row of its own, or of the spans folded as a watcher folds
    them: a row per run id, process and job-or-not, from the earliest start to the latest end."""
    rows = f"""SELECT run_id, process, start_ns, end_ns, coalesce({IS_JOB_SQL}, false) AS is_job, holding
               FROM {spans.own}"""
    if folded:
        rows = f"""SELECT run_id, process, min(start_ns) AS start_ns, max(end_ns) AS end_ns, is_job, holding
                   FROM ({rows}) GROUP BY run_id, process, is_job, holding"""
    table = spans.arrow(rows)
    return attempts_of_folded(*(table.column(c).to_pylist() for c in ("run_id", "process", "start_ns", "end_ns",
                                                                         "is_job", "holding")))  # fmt: skip


@pytest.mark.parametrize("unnamed", [False, True])
def test_the_attempts_worked_out_from_folded_rows_are_find_attempts(tmp_path, unnamed):
    """Two attempts, one of two processes, each with a job span; the first unnamed or not."""
    path = restarted_job(tmp_path, a=attempt_a(None if unnamed else "run-a"))
    with open_store([path], use_cache=False) as store:
        spans = store.spans()
        expected = find_attempts(spans)
        assert [a.run_id for a in expected] == ["" if unnamed else "run-a", "run-b"]
        assert _attempts_of_rows(spans, folded=False) == expected
        assert _attempts_of_rows(spans, folded=True) == expected


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=15)
@given(job=restarted_jobs(), unnamed=st.booleans())
def test_the_attempts_of_any_restarted_job_worked_out_from_folded_rows_are_find_attempts(
    tmp_path_factory, job, unnamed
):
    """1-3 attempts, each with a job span or without (its extent is then its spans' envelope), the first unnamed
    or not."""
    spans, resources, _ = job
    if unnamed:
        resources["p0"] = resource("p0", None)
    path = write_trace(tmp_path_factory.mktemp("folded") / "run.otlp", spans, resources=resources)
    with open_store([str(path)], use_cache=False) as store:
        whole = store.spans()
        expected = find_attempts(whole)
        assert _attempts_of_rows(whole, folded=False) == expected
        assert _attempts_of_rows(whole, folded=True) == expected
