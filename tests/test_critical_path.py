"""`goodput critical` (SPEC section 14): what each step waited on, followed along the dependencies the trace records,
on hand-made traces whose paths and savings are worked out here, and as a user reads the table.

The worked example (`rollout_then_training`), window [0, 10] s, the driver opening a rollout umbrella around its
generation fan-out (so the trace shows that it waited for it):

    driver  rl.grpo.step             step        [0, 10]
    driver  rl.grpo.rollout          umbrella    [0.5, 6.5]   child of the step
    gen-a   rl.grpo.generation       productive  [1, 5]       child of the rollout
    gen-b   rl.grpo.generation       productive  [2, 6]       child of the rollout (the straggler)
    driver  rl.grpo.policy_training  productive  [7, 9.5]     child of the step, after the rollout (its anchor)
    driver  rl.grpo.checkpointing    overhead    [7.5, 8.5]   child of the step, beside training (a thread)

Explained from 10: the step's latest joined child is training (ends 9.5): [9.5, 10] is the step's own time, waiting;
training [7, 9.5] is a segment; from 7, the checkpoint ends at 8.5 > 7 (it ran beside training: off the path), the
rollout ends at 6.5: [6.5, 7] waiting, and the rollout is explained from 6.5: its latest child gen-b ends at 6, [6, 6.5]
is the umbrella's own (waiting), gen-b [2, 6] a segment; from 2, gen-a ends at 5 > 2: [0.5, 2] the umbrella's own;
back in the step, [0, 0.5] waiting. Path: gen-b [2, 6], training [7, 9.5]; waiting 0.5 + 1.5 + 0.5 + 0.5 + 0.5 = 3.5.

Re-timed with generation 10% shorter: gen-b [2, 5.6] (it still starts 1.5 s into the rollout), gen-a [1, 4.6]; the
rollout ends 0.5 after gen-b, at 6.1; training follows its anchor, the rollout, 0.5 later: [6.6, 9.1]; the step ends
0.5 after training: 9.6. Saves 0.4 s. Training 10% shorter: [7, 9.25], the step ends at 9.75: saves 0.25 s. So
generation leads, though training is the driver's own work.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cli.shell
from conftest import PROPERTY_TESTS, WIDTHS, invoke
from rollup.critical.build import CriticalOptions, build_critical
from rollup.critical.explain import explain_window
from rollup.critical.graph import NONE, AttemptSpans, Dependencies
from rollup.store.span_store import open_store
from tracebuild import S, ns, span_id_of, step, write_trace

SAMPLES = sorted(p for p in (Path(__file__).parent.parent / "sample_traces").iterdir() if p.is_dir())


def resources(**services: str) -> dict:
    return {process: {"service.name": service, "host.name": "vm", "process.pid": 10 + i, "goodput.gpus": 1}
            for i, (process, service) in enumerate(services.items())}  # fmt: skip


def rollout_then_training(tmp_path: Path) -> Path:
    spans = [
        step("s1", 1, 0, 10, process="driver"),
        S("ro", "rl.grpo.rollout", 0.5, 6.5, parent="s1", group="rollout", process="driver"),
        S("ga", "rl.grpo.generation", 1, 5, parent="ro", bucket="productive", process="gen-a"),
        S("gb", "rl.grpo.generation", 2, 6, parent="ro", bucket="productive", process="gen-b"),
        S("tr", "rl.grpo.policy_training", 7, 9.5, parent="s1", bucket="productive", process="driver"),
        S("ck", "rl.grpo.checkpointing", 7.5, 8.5, parent="s1", bucket="overhead", process="driver"),
    ]
    named = resources(driver="grpo-driver", **{"gen-a": "grpo-generation", "gen-b": "grpo-generation"})
    return write_trace(tmp_path / "run.otlp", spans, resources=named)


def critical_json(*args: str) -> dict:
    result = invoke(["critical", *args, "--format", "json", "--no-cache"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_worked_example_path_savings_and_straggler(tmp_path):
    out = critical_json(str(rollout_then_training(tmp_path)))
    assert list(out) == ["iterations", "names", "processes", "stragglers"]
    (only,) = out["iterations"]
    assert list(only) == ["iteration", "wall_s", "waiting_s", "path"]
    assert (only["iteration"], only["wall_s"], only["waiting_s"]) == (1, 10.0, 0.5 + 1.5 + 0.5 + 0.5 + 0.5)
    assert [(p["span_id"], p["name"], p["bucket"], p["start_ns"], p["end_ns"]) for p in only["path"]] == [
        (span_id_of("gb"), "rl.grpo.generation", "productive", ns(2), ns(6)),
        (span_id_of("tr"), "rl.grpo.policy_training", "productive", ns(7), ns(9.5)),
    ]
    assert [p["process"] for p in only["path"]] == ["grpo-generation@vm:12", "grpo-driver@vm:10"]
    assert out["names"] == [
        {"name": "rl.grpo.generation", "bucket": "productive", "critical_s": 4.0, "share": 0.4,
         "saves_s": pytest.approx(10.0 - 9.6)},
        {"name": "rl.grpo.policy_training", "bucket": "productive", "critical_s": 2.5, "share": 0.25,
         "saves_s": pytest.approx(10.0 - 9.75)},
    ]  # fmt: skip
    assert out["processes"] == [
        {"process": "grpo-generation@vm:12", "critical_s": 4.0, "share": 0.4},
        {"process": "grpo-driver@vm:10", "critical_s": 2.5, "share": 0.25},
    ]
    # gen-b ended the fan-out last, 1 s after gen-a: it ran alone 1 s, and gen-a's one GPU waited 1 GPU-second
    assert out["stragglers"] == [
        {"fleet": "grpo-generation", "name": "rl.grpo.generation", "process": "grpo-generation@vm:12",
         "fan_outs": 1, "slowest": 1, "alone_s": 6.0 - 5.0, "waited_gpu_s": (6.0 - 5.0) * 1}
    ]  # fmt: skip


def test_speedup_predicts_each_step_and_bad_values_are_exit_2(tmp_path):
    path = str(rollout_then_training(tmp_path))
    out = critical_json(path, "--speedup", "rl.grpo.generation=10%", "--speedup", "rl.grpo.policy_training=10")
    # both: the rollout ends at 6.1, training [6.6, 8.85], the step at 9.35
    assert out["speedup"] == {
        "names": {"rl.grpo.generation": 10, "rl.grpo.policy_training": 10},
        "iterations": [{"iteration": 1, "wall_s": 10.0, "predicted_wall_s": pytest.approx(9.35)}],
        "median_saving_s": pytest.approx(0.65),
    }
    halved = critical_json(path, "--speedup", "rl.grpo.generation=12.5%")["speedup"]
    assert halved["names"] == {"rl.grpo.generation": 12.5}
    assert halved["median_saving_s"] == pytest.approx(4 * 0.125)  # gen-b's 4 s, 12.5% shorter
    for bad in ("generation", "=10%", "rl.grpo.generation=ten", "rl.grpo.generation=0", "rl.grpo.generation=150%"):
        result = invoke(["critical", path, "--speedup", bad, "--no-cache"])
        assert result.exit_code == 2, (bad, result.output)
        assert "Error: Invalid value for --speedup" in result.stderr  # as typer says a bad option value


@pytest.mark.parametrize("width", WIDTHS)
def test_the_table_leads_with_what_a_speed_up_saves_and_the_worker_each_fleet_waited_on(tmp_path, width, monkeypatch):
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: width)
    result = invoke(["critical", str(rollout_then_training(tmp_path)), "--no-cache"], width=width)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the lead lines fold at 80 columns
    assert text.startswith("critical path of 1 iteration: 10.000 s of steps, 3.500 s waiting (35.0%)")
    assert ("speed up first: rl.grpo.generation (productive): 10% off it saves 0.400 s a step (median); 4.000 s a "
            "step on the path, 40.0%") in text  # fmt: skip
    assert ("waited on most in grpo-generation: grpo-generation@vm:12 ended 1 of 1 rl.grpo.generation fan-outs "
            "last, alone 1.000 s; its peers' GPUs waited 1.000 GPU-s") in text  # fmt: skip
    assert "rl.grpo.checkpointing" not in text  # beside training: off the path, and saves nothing
    assert max(len(line) for line in result.stdout.splitlines()) <= width


def test_one_iteration_shows_its_path_and_a_missing_one_is_exit_2(tmp_path):
    path = str(rollout_then_training(tmp_path))
    result = invoke(["critical", path, "--iteration", "1", "--no-cache"], width=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("iteration 1: 10.000 s, 3.500 s waiting; its path")
    rows = [line.split("│")[1:-1] for line in lines[start + 4 : start + 6]]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["2.000", "4.000", "rl.grpo.generation", "grpo-generation@vm:12", "productive"],
        ["7.000", "2.500", "rl.grpo.policy_training", "grpo-driver@vm:10", "productive"],
    ]
    missing = invoke(["critical", path, "--iteration", "7", "--no-cache"])
    assert missing.exit_code == 2 and "no iteration 7" in missing.stderr


def test_csv_and_markdown_carry_every_row(tmp_path):
    path = str(rollout_then_training(tmp_path))
    csv = invoke(["critical", path, "--format", "csv", "--no-cache"])
    assert csv.exit_code == 0, csv.output
    lines = csv.stdout.splitlines()
    assert lines[0] == "kind,iteration,name,process,bucket,start_offset_s,duration_s,critical_s,share,saves_s"
    assert lines[1] == "name,,rl.grpo.generation,,productive,,,4,0.4,0.4"
    assert "process,,,grpo-generation@vm:12,,,,4,0.4," in lines
    assert "path,1,rl.grpo.policy_training,grpo-driver@vm:10,productive,7,2.5,,," in lines
    assert len(lines) == 1 + 2 + 2 + 2
    markdown = invoke(["critical", path, "--format", "markdown", "--no-cache"])
    assert markdown.stdout.splitlines()[0].startswith("| kind | iteration | name |")


def test_ties_go_to_the_later_start_then_the_smaller_span_id(tmp_path):
    # The step [0, 4]. Its joined children end at 4 (x from 1, y from 2) and at 2 (u, v from 0): y, started later,
    # is taken first [2, 4]; from 2, x ends at 4 > 2; u and v end at 2: they tie on start too, the smaller id is
    # taken, [0, 2]. The other of u and v ran beside it: off the path.
    first = min(["u", "v"], key=span_id_of)
    spans = [
        step("s1", 1, 0, 4),
        S("x", "x", 1, 4, parent="s1", bucket="productive"),
        S("y", "y", 2, 4, parent="s1", bucket="overhead"),
        S("u", "u", 0, 2, parent="s1", bucket="idle"),
        S("v", "v", 0, 2, parent="s1", bucket="idle"),
    ]
    window = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))["iterations"][0]
    assert [(p["name"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [(first, ns(0), ns(2)),
                                                                              ("y", ns(2), ns(4))]  # fmt: skip
    assert window["waiting_s"] == 0


def test_a_wait_woken_by_a_span_elsewhere_is_explained_by_it(tmp_path):
    # The driver waits [1, 6.01] (idle) for a batch the streamer makes [0, 6] in another trace (no parent link):
    # 10 ms after the batch ended, within the 20 ms of --wakeup: the wait's own [6, 6.01], then the batch back to
    # the wait's start [1, 6], and the wait before it [..]; then training [6.01, 9].
    spans = [
        step("s1", 1, 0, 9),
        S("wait", "rl.idle.buffer_starvation", 1, 6.01, parent="s1", bucket="idle"),
        S("batch", "rl.grpo.generation", 0, 6, bucket="productive", iteration=2, process="streamer", trace="t2"),
        S("tr", "rl.grpo.policy_training", 6.01, 9, parent="s1", bucket="productive"),
    ]
    path = str(write_trace(tmp_path / "run.otlp", spans))
    window = critical_json(path)["iterations"][0]
    assert [(p["name"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [
        ("rl.grpo.generation", ns(1), ns(6)),  # limited to the wait's start
        ("rl.idle.buffer_starvation", ns(6), ns(6.01)),
        ("rl.grpo.policy_training", ns(6.01), ns(9)),
    ]
    assert window["waiting_s"] == pytest.approx(1.0)  # the step's own [0, 1]
    narrow = critical_json(path, "--wakeup", "5ms")["iterations"][0]  # 10 ms late: no wakeup, the wait is its own
    assert [p["name"] for p in narrow["path"]] == ["rl.idle.buffer_starvation", "rl.grpo.policy_training"]
    assert invoke(["critical", path, "--wakeup", "soon", "--no-cache"]).exit_code == 2


def test_work_started_for_a_later_step_is_not_waited_on_and_a_parentless_span_joins_its_step(tmp_path):
    # Step 1 [0, 5] starts step 2's generation [0, 4.55] (its own iteration 2: fire-and-forget, not joined, though it
    # ends after everything but the advantage), trains [0, 1], and computes the advantage [4.6, 5]. A worker's span
    # without a parent, iteration 1, [1, 4.5] (nemo-lens's workers write traces of their own) is a child of step 1's
    # step span. From 5: the advantage; from 4.6, the worker's span (the generation would have ended later, at 4.55,
    # were it joined): [4.5, 4.6] waiting; from 1, the training.
    spans = [
        step("s1", 1, 0, 5),
        S("gen2", "rl.grpo.generation", 0, 4.55, parent="s1", bucket="productive", iteration=2),
        S("tr", "rl.grpo.policy_training", 0, 1, parent="s1", bucket="productive"),
        S("adv", "rl.grpo.advantage", 4.6, 5, parent="s1", bucket="overhead"),
        S("w", "rl.grpo.logprob", 1, 4.5, bucket="overhead", iteration=1, process="worker", trace="t9"),
        step("s2", 2, 5, 9),
    ]
    window = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))["iterations"][0]
    assert [(p["name"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [
        ("rl.grpo.policy_training", ns(0), ns(1)),
        ("rl.grpo.logprob", ns(1), ns(4.5)),
        ("rl.grpo.advantage", ns(4.6), ns(5)),
    ]
    assert window["waiting_s"] == pytest.approx(0.1)


def test_windows_without_a_step_span_are_explained_from_their_spans(tmp_path):
    # No step span: window 1 is the envelope [1, 6] of its spans; its virtual step's children are those whose parent
    # is not in the window: a [1, 3] and b [4, 6] (b's child c [4, 5] is b's, off the path: b ends later).
    spans = [
        S("a", "rl.grpo.generation", 1, 3, bucket="productive", iteration=1),
        S("b", "rl.grpo.policy_training", 4, 6, bucket="productive", iteration=1),
        S("c", "rl.grpo.logprob", 4, 5, parent="b", bucket="overhead"),
    ]
    window = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))["iterations"][0]
    assert (window["wall_s"], window["waiting_s"]) == (5.0, 1.0)  # [3, 4] between them
    assert [(p["name"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [
        ("rl.grpo.generation", ns(1), ns(3)),
        ("rl.grpo.logprob", ns(4), ns(5)),
        ("rl.grpo.policy_training", ns(5), ns(6)),
    ]


def test_a_window_without_a_bucketed_span_is_all_waiting(tmp_path):
    spans = [step("s1", 1, 0, 4), S("u", "rl.grpo.rollout", 0, 3, parent="s1", group="rollout"),
             step("s2", 2, 4, 8), S("g", "rl.grpo.generation", 5, 6, parent="s2", bucket="productive")]  # fmt: skip
    out = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))
    assert [(i["iteration"], i["waiting_s"], i["path"]) for i in out["iterations"][:1]] == [(1, 4.0, [])]
    assert out["iterations"][1]["waiting_s"] == 3.0
    assert out["names"][0]["share"] == 1 / 8


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_partitions_each_window(sample):
    out = critical_json(str(sample))
    assert out["iterations"]
    for window in out["iterations"]:
        spans = window["path"]
        assert all(a["end_ns"] <= b["start_ns"] for a, b in zip(spans, spans[1:], strict=False))
        on_path = sum(p["end_ns"] - p["start_ns"] for p in spans) / 1e9
        assert on_path + window["waiting_s"] == pytest.approx(window["wall_s"], abs=1e-9)
    wall = sum(w["wall_s"] for w in out["iterations"])
    assert sum(n["critical_s"] for n in out["names"]) == pytest.approx(wall - sum(w["waiting_s"] for w in
                                                                              out["iterations"]))  # fmt: skip
    assert all(n["saves_s"] >= 0 for n in out["names"])
    assert [n["saves_s"] for n in out["names"]] == sorted((n["saves_s"] for n in out["names"]), reverse=True)


def test_a_restarted_run_explains_the_latest_attempts_windows():
    restart = next(s for s in SAMPLES if s.name == "grpo_restart")
    report = json.loads(invoke(["report", str(restart), "--format", "json"]).stdout)
    out = critical_json(str(restart))
    assert [w["iteration"] for w in out["iterations"]] == [r["iteration"] for r in report["iterations"]]
    assert [w["wall_s"] for w in out["iterations"]] == [r["wall_s"] for r in report["iterations"]]
    latest = critical_json(str(restart), "--attempt", "latest")
    assert len(latest["iterations"]) < len(out["iterations"])


@pytest.mark.parametrize("bad", ["missing-folder", "not-a-trace.otlp"])
def test_bad_input_is_one_line_exit_2(tmp_path, bad):
    path = tmp_path / bad
    if bad.endswith(".otlp"):
        path.write_bytes(b"\x00\x00\x00\x05hello")
    result = invoke(["critical", str(path), "--no-cache"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and str(path) in result.stderr


# --- against the rule read literally ------------------------------------------------------------------------------


def literal_explain(x: int, t: int, low: int, spans, children: dict[int, list[int]], out: list) -> None:
    """SPEC section 14's `explain(X, t)` word for word, recursive: among X's joined children ending at or before t
    and after the bound, the latest-ending (the later start, then the smaller id) ..."""
    start, end, ids = spans
    taken: set[int] = set()  # each child once; one of no length has nothing to explain
    while True:
        fitting = [c for c in children.get(x, []) if low < end[c] <= t and start[c] < end[c] and c not in taken]
        if not fitting:
            break
        child = min(fitting, key=lambda c: (-end[c], -start[c], ids[c]))
        taken.add(child)
        if t > end[child]:
            out.append((x, end[child], t))
        literal_explain(child, end[child], max(start[child], low), spans, children, out)
        t = start[child]
        if t <= low:
            return
    if t > low:
        out.append((x, low, t))


@st.composite
def _trees(draw):
    """A step [0, 40] and spans nested under it or each other, each within its parent (joined), on a coarse grid."""
    count = draw(st.integers(1, 12))
    start, end, parent = [0], [40], [NONE]
    for row in range(1, count + 1):
        p = draw(st.integers(0, row - 1))
        s = draw(st.integers(start[p], end[p]))
        start.append(s)
        end.append(draw(st.integers(s, end[p])))
        parent.append(p)
    return start, end, parent


@PROPERTY_TESTS
@given(_trees())
def test_the_explanation_is_the_rule_read_literally_and_partitions_the_window(tree):
    from array import array

    start, end, parent = tree
    ids = [f"{i:016x}" for i in range(len(start))]
    children: dict[int, list[int]] = {}
    for row, p in enumerate(parent):
        if p != NONE:
            children.setdefault(p, []).append(row)
    literal: list = []
    literal_explain(0, 40, 0, (start, end, ids), children, literal)
    import pyarrow as pa

    count = len(start)
    spans = AttemptSpans(
        pa.array(ids), array("q", [0] * count), array("q", [0] * count), array("q", [0] * count),
        array("q", [0] * count), array("q", [0] * count), bytearray(count), array("q", start), array("q", end),
        array("q", parent), ["n"], ["p"], ["productive"],
    )  # fmt: skip
    ordered = {p: sorted(c, key=lambda r: (-end[r], -start[r], ids[r])) for p, c in children.items()}
    joined_at, joined = array("q", [0]), array("q")
    for row in range(count):
        joined.extend(ordered.get(row, []))
        joined_at.append(len(joined))
    deps = Dependencies(joined_at, joined, array("q", [NONE] * count), array("q", [NONE] * count), {}, {})
    found = explain_window(spans, deps, [0], 0, 40)
    assert [(r, s, e) for r, s, e in found if r != NONE] == sorted(literal, key=lambda p: p[1])
    pieces = sorted((s, e) for _, s, e in found)
    assert pieces[0][0] == 0 and pieces[-1][1] == 40
    assert all(x[1] == y[0] for x, y in zip(pieces, pieces[1:], strict=False))  # they partition the window


def test_a_cached_re_run_reads_the_answer_back_and_a_damaged_file_is_worked_out_again(tmp_path):
    """The answer is kept beside the set's lineage (`rollup.store.derived`, `critical-*.arrow`), and each attempt's
    event graph (`critical-timing-*.arrow`): the re-run's JSON is the first run's, and a `--speedup` asked later
    re-times the kept graph without working it out again, with the answer a fresh run gives."""
    restart = next(s for s in SAMPLES if s.name == "grpo_restart")
    cache = tmp_path / "cache"
    env = {"GOODPUT_CACHE_DIR": str(cache)}

    def kept(what: str) -> list[Path]:
        return sorted(
            p for p in cache.rglob(f"*.derived/{what}-*.arrow") if p.name[len(what) + 1 :][0] in "0123456789abcdef"
        )

    fresh = invoke(["critical", str(restart), "--format", "json", "--no-cache"]).stdout
    first = invoke(["critical", str(restart), "--format", "json"], env=env)
    assert first.exit_code == 0 and first.stdout == fresh
    assert len(kept("critical")) == 1 and len(kept("critical-timing")) == 2  # the rows come from both attempts
    assert invoke(["critical", str(restart), "--format", "json"], env=env).stdout == fresh
    kept("critical")[0].write_bytes(b"not arrow")
    assert invoke(["critical", str(restart), "--format", "json"], env=env).stdout == fresh
    asked = ["--speedup", "rl.grpo.generation=10%"]
    for timing in kept("critical-timing"):
        timing.touch()
    before = {p: p.stat().st_mtime_ns for p in kept("critical-timing")}
    sped = invoke(["critical", str(restart), "--format", "json", *asked], env=env)
    assert sped.stdout == invoke(["critical", str(restart), "--format", "json", *asked, "--no-cache"]).stdout
    assert {p: p.stat().st_mtime_ns for p in kept("critical-timing")} == before  # read back, not written again
    assert len(kept("critical")) == 1


def test_a_nemo_lens_trace_is_explained_with_its_processes_apart(tmp_path):
    # As nemo-lens writes it: the driver and the rank-0 worker share `<run id>-rank0`, no `rl.span_group`. The
    # step's latest child is rank 1's generation [2, 7] ([7, 10] waiting), then nothing ends by 2: [0, 2] waiting.
    # All three generations are one fan-out of the fleet nemo-rl: rank 1 ran alone for [6, 7].
    from test_reading_process_identity import RESOURCES, RUN, nemo_lens_trace

    path = write_trace(tmp_path / "run.otlp", nemo_lens_trace(), resources=RESOURCES)
    out = critical_json(str(path))
    (window,) = out["iterations"]
    assert window["waiting_s"] == 5.0
    assert [(p["process"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [(f"{RUN}-rank1", ns(2), ns(7))]
    (straggler,) = out["stragglers"]
    assert (straggler["fleet"], straggler["process"], straggler["fan_outs"], straggler["alone_s"]) == (
        "nemo-rl",
        f"{RUN}-rank1",
        1,
        7.0 - 6.0,
    )


def test_a_nemo_lens_trace_whose_workers_are_traces_of_their_own_joins_them_to_their_step(tmp_path):
    # The workers' spans have no parent (each the root of its own trace) and carry rl.iteration 1: children of step
    # 1's step span, so the path runs through them as it did when they were parented.
    from test_reading_process_identity import RESOURCES, RUN, nemo_lens_trace

    spans = [S(s.label, s.name, s.start, s.end, parent=None if s.process != "driver" else s.parent, bucket=s.bucket,
               iteration=1 if s.process != "driver" else s.iteration, process=s.process,
               trace=s.trace if s.process == "driver" else f"t-{s.label}")
             for s in nemo_lens_trace()]  # fmt: skip
    out = critical_json(str(write_trace(tmp_path / "run.otlp", spans, resources=RESOURCES)))
    (window,) = out["iterations"]
    assert [(p["process"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [(f"{RUN}-rank1", ns(2), ns(7))]


def test_the_library_answers_as_the_command_does(tmp_path):
    with open_store([rollout_then_training(tmp_path)], use_cache=False) as store:
        found = build_critical(store, CriticalOptions(speedup=(("rl.grpo.generation", Fraction(10)),)))
    assert found.first() is not None and found.first().key == "rl.grpo.generation"
    assert found.speedup is not None and found.speedup.median_saving_ns == pytest.approx(0.4e9)
