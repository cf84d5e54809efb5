"""`goodput timeline` (SPEC section 11): the spans as a Chrome / Perfetto trace.

The main trace, in seconds from the run's origin (process `driver` unless said):

    job      [0, 30]   umbrella, root
    step1    [2, 10]   iteration 1, under job        step2 [10, 20] iteration 2, under job
    gen1     [3, 8]    productive, process `worker`, under step1 (a flow from step1)
    reward1  [8, 9.5]  productive, under step1
    ckpt     [9, 12]   overhead, under job: overlaps step1's end, so it needs a lane of its own
    gen2     [11, 18]  productive, process `worker`, under step2 (a flow from step2)
    train2   [12, 19]  productive, under step2, attribute x=7
    odd      [13, 14]  bucket "bogus" (check's unknown-bucket), under step2
    waitz    [21, 21]  idle, zero-length, under job
    backwards [25, 24] overhead, its end before its start: drawn zero-length at 25
    mark     [22, 23]  no bucket and no umbrella group (span_cm), under job

Every expected figure is derived from that drawing in the test. The flow checks replay how each viewer binds a flow
event: Perfetto (the last slice begun on the lane at that instant, its sorter putting longer slices first and flow
events after slices) and chrome://tracing's importer (the innermost slice whose closed interval holds the instant).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, invoke, run_json
from rollup.store.span_store import open_store
from rollup.timeline.build import build_timeline, timeline_trace
from rollup.timeline.lanes import assign_lanes
from tracebuild import ORIGIN_NS, S, ns, span_id_of, step, write_trace

SPANS = [
    S("job", "rl.grpo.job", 0, 30, group="job"),
    step("step1", 1, 2, 10, parent="job"),
    step("step2", 2, 10, 20, parent="job"),
    S("gen1", "rl.grpo.generation", 3, 8, parent="step1", bucket="productive", group="generation", process="worker"),
    S("reward1", "rl.grpo.reward", 8, 9.5, parent="step1", bucket="productive", group="reward"),
    S("ckpt", "rl.checkpoint.save", 9, 12, parent="job", bucket="overhead", group="checkpoint"),
    S("gen2", "rl.grpo.generation", 11, 18, parent="step2", bucket="productive", group="generation", process="worker"),
    S("train2", "rl.grpo.policy_training", 12, 19, parent="step2", bucket="productive", attrs={"x": 7}),
    S("odd", "rl.grpo.odd", 13, 14, parent="step2", bucket="bogus"),
    S("waitz", "rl.idle.buffer_starvation", 21, 21, parent="job", bucket="idle", group="efficiency"),
    S("backwards", "rl.grpo.logprob", 25, 24, parent="job", bucket="overhead", group="logprob"),
    S("mark", "custom.mark", 22, 23, parent="job"),
]
BY_LABEL = {s.label: s for s in SPANS}
MAX = 2**63 - 1


def run(args: list[str]):
    return invoke(args, width=160)


def trace_file(tmp_path: Path, spans=SPANS, shape: str = "framed", **kw) -> Path:
    return write_trace(tmp_path / "run" / f"trace.{shape.replace('+', '.')}", spans, shape, **kw)


def timeline_of(path: Path, *extra: str) -> dict:
    out = path.parent / "timeline.json"
    result = run(["timeline", str(path), "--output", str(out), *extra])
    assert result.exit_code == 0, result.output
    assert "wrote " in result.stderr
    return json.loads(out.read_text())


def events(trace: dict, ph: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def spans_by_id(trace: dict) -> dict[str, dict]:
    slices = [e for e in events(trace, "X") if e["pid"] != 1 and e["cat"] != "critical"]
    ids = Counter(e["args"]["span_id"] for e in slices)
    assert all(n == 1 for n in ids.values()), ids  # every span once
    return {e["args"]["span_id"]: e for e in slices}


def micros(ns_offset: int) -> float:
    return ns_offset / 1000


def to_ns(micros_value: float) -> int:
    return round(micros_value * 1000)


# --- what a viewer makes of the file ---------------------------------------------------------------------------------


def lanes_nest(trace: dict) -> None:
    """Every two complete events of one (pid, tid) are disjoint or one contains the other."""
    lanes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in events(trace, "X"):
        start = to_ns(e["ts"])
        lanes.setdefault((e["pid"], e["tid"]), []).append((start, start + to_ns(e["dur"])))
    for intervals in lanes.values():
        for i, (a0, a1) in enumerate(intervals):
            for b0, b1 in intervals[i + 1 :]:
                disjoint = a1 <= b0 or b1 <= a0
                nested = (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1)
                assert disjoint or nested, ((a0, a1), (b0, b1))


def perfetto_bindings(trace: dict) -> dict[tuple[int, str], dict]:
    """(flow id, "s" or "f") -> the complete event Perfetto's JSON importer binds that flow event to.

    Its sorter orders events by time, then complete events longest first, then everything else in file order; a
    flow event binds to the top of its lane's slice stack, which is only popped when a later slice begins."""
    timed = []
    for index, e in enumerate(trace["traceEvents"]):
        if e["ph"] == "M":
            continue
        key = MAX - to_ns(e["dur"]) if e["ph"] == "X" else MAX
        timed.append((to_ns(e["ts"]), key, index, e))
    stacks: dict[tuple[int, int], list[tuple[int, int, dict]]] = {}
    bound = {}
    for ts, _, _, e in sorted(timed, key=lambda t: t[:3]):
        stack = stacks.setdefault((e["pid"], e["tid"]), [])
        if e["ph"] == "X":
            dur = to_ns(e["dur"])
            while stack and (stack[-1][1] < ts or (stack[-1][1] == ts and not (dur == 0 and stack[-1][0] == ts))):
                stack.pop()
            assert not stack or ts + dur <= stack[-1][1], "Perfetto would drop a partially overlapping slice"
            stack.append((ts, ts + dur, e))
        else:
            bound[(e["id"], e["ph"])] = stack[-1][2] if stack else None
    return bound


def catapult_bindings(trace: dict) -> dict[tuple[int, str], dict]:
    """(flow id, "s" or "f") -> the complete event chrome://tracing binds it to (`bp: e` or a flow start): its
    importer nests a lane's slices by containment (closed intervals, sorted by start, longer first) and binds to the
    innermost slice holding the instant, preferring at each depth the slice that starts there."""
    roots: dict[tuple[int, int], list] = {}
    stacks: dict[tuple[int, int], list] = {}
    for e in sorted(events(trace, "X"), key=lambda x: (to_ns(x["ts"]), -to_ns(x["dur"]))):
        start = to_ns(e["ts"])
        node = (e, start, start + to_ns(e["dur"]), [])
        stack = stacks.setdefault((e["pid"], e["tid"]), [])
        while stack and not (stack[-1][1] <= node[1] and node[2] <= stack[-1][2]):
            stack.pop()
        (stack[-1][3] if stack else roots.setdefault((e["pid"], e["tid"]), [])).append(node)
        stack.append(node)

    def find(nodes: list, ts: int):
        index = next((i for i, n in enumerate(nodes) if n[1] >= ts), len(nodes))
        chosen = None
        if index < len(nodes) and nodes[index][1] <= ts <= nodes[index][2]:
            chosen = nodes[index]
        elif index > 0 and nodes[index - 1][1] <= ts <= nodes[index - 1][2]:
            chosen = nodes[index - 1]
        return None if chosen is None else (find(chosen[3], ts) or chosen)

    bound = {}
    for e in trace["traceEvents"]:
        if e["ph"] in ("s", "f"):
            node = find(roots.get((e["pid"], e["tid"]), []), to_ns(e["ts"]))
            bound[(e["id"], e["ph"])] = node[0] if node else None
    return bound


def flows_bind(trace: dict) -> set[tuple[str, str]]:
    """Check every flow's two halves pair up and bind parent -> child in both viewers; the (parent, child) ids."""
    starts = {e["id"]: e for e in events(trace, "s")}
    ends = {e["id"]: e for e in events(trace, "f")}
    assert len(starts) == len(events(trace, "s")) and len(ends) == len(events(trace, "f"))
    assert starts.keys() == ends.keys()
    perfetto, catapult = perfetto_bindings(trace), catapult_bindings(trace)
    pairs = set()
    for flow_id, start in starts.items():
        end = ends[flow_id]
        assert (start["cat"], start["name"]) == (end["cat"], end["name"]) and end["bp"] == "e"
        for bindings in (perfetto, catapult):
            parent, child = bindings[(flow_id, "s")], bindings[(flow_id, "f")]
            assert parent is not None and child is not None, (flow_id, start, end)
            assert child["args"]["parent_span_id"] == parent["args"]["span_id"], (flow_id, parent, child)
            assert child["pid"] != parent["pid"] and child["name"] == start["name"]
        pairs.add((parent["args"]["span_id"], child["args"]["span_id"]))
    return pairs


def check_viewable(trace: dict) -> set[tuple[str, str]]:
    """What every timeline must satisfy: lanes nest, and flows bind; returns the flows' (parent, child) ids."""
    lanes_nest(trace)
    return flows_bind(trace)


# --- the main trace ------------------------------------------------------------------------------------------------


def test_every_span_once_with_its_exact_microseconds(tmp_path):
    trace = timeline_of(trace_file(tmp_path))
    slices = spans_by_id(trace)
    assert set(slices) == {s.span_id for s in SPANS}
    origin = ns(0)  # job starts first
    assert trace["otherData"]["origin_unix_ns"] == origin
    for span in SPANS:
        event = slices[span.span_id]
        start, end = ns(span.start), max(ns(span.end), ns(span.start))  # an inverted span is zero-length
        assert event["ts"] == micros(start - origin) and event["dur"] == micros(end - start), span.label
        assert event["name"] == span.name and event["ph"] == "X"
    assert slices[span_id_of("reward1")]["ts"] == 8_000_000.0 and slices[span_id_of("reward1")]["dur"] == 1_500_000.0
    assert slices[span_id_of("backwards")]["dur"] == 0.0


def test_microseconds_are_written_with_three_decimals(tmp_path):
    spans = [S("a", "rl.grpo.job", 0, 1.000001, group="job"), S("b", "x", 0.000000001, 0.5, parent="a")]
    path = trace_file(tmp_path, spans)
    run(["timeline", str(path), "-o", str(tmp_path / "t.json")])
    text = (tmp_path / "t.json").read_text()
    assert '"ts":0.000,"dur":1000001.000' in text  # 1.000001 s from the origin: integer nanoseconds, exact
    assert '"ts":0.001,"dur":499999.999' in text


def test_categories_colours_and_args(tmp_path):
    trace = timeline_of(trace_file(tmp_path))
    slices = spans_by_id(trace)
    job, gen1, train2 = slices[span_id_of("job")], slices[span_id_of("gen1")], slices[span_id_of("train2")]
    assert (job["cat"], job["cname"]) == ("umbrella", "generic_work")
    assert (gen1["cat"], gen1["cname"]) == ("productive", "good")
    assert (slices[span_id_of("ckpt")]["cat"], slices[span_id_of("ckpt")]["cname"]) == ("overhead", "bad")
    assert (slices[span_id_of("waitz")]["cat"], slices[span_id_of("waitz")]["cname"]) == ("idle", "grey")
    assert slices[span_id_of("odd")]["cat"] == "bogus"  # as written; check flags it
    assert slices[span_id_of("mark")]["cat"] == "umbrella"  # no bucket: not charged, drawn as an umbrella
    assert gen1["args"] == {
        "span_id": span_id_of("gen1"),
        "parent_span_id": span_id_of("step1"),
        "trace_id": BY_LABEL["gen1"].trace_id,
        "iteration": 1,  # inherited from step1, across processes
        "group": "generation",
        "attributes": {"rl.bucket": "productive", "rl.span_group": "generation"},
    }
    assert job["args"]["parent_span_id"] is None and job["args"]["iteration"] is None
    assert train2["args"]["attributes"]["x"] == "7" and train2["args"]["group"] is None


def test_processes_and_lanes(tmp_path):
    trace = timeline_of(trace_file(tmp_path))
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    # driver's first span (job, at 0) is earlier; the critical path after the processes
    assert names == {1: "iterations", 2: "driver", 3: "worker", 4: "critical path"}
    slices = spans_by_id(trace)
    assert {slices[s.span_id]["pid"] for s in SPANS if s.process == "worker"} == {3}
    assert {slices[s.span_id]["pid"] for s in SPANS if s.process == "driver"} == {2}
    lane_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events(trace, "M") if e["name"] == "thread_name"}
    tids = [tid for _, tid in lane_names]
    assert len(set(tids)) == len(tids) and not set(tids) & set(names)  # unique in the file, never a pid
    # ckpt [9, 12] overlaps step1 [2, 10] without nesting: the driver needs a second lane, and only for it
    driver = {slices[s.span_id]["tid"] for s in SPANS if s.process == "driver" and s.label != "ckpt"}
    assert len(driver) == 1 and slices[span_id_of("ckpt")]["tid"] not in driver
    assert lane_names[(2, slices[span_id_of("ckpt")]["tid"])] == "lane 2"
    lanes_nest(trace)


def test_flows_link_parents_to_children_in_other_processes(tmp_path):
    trace = timeline_of(trace_file(tmp_path))
    pairs = check_viewable(trace)
    assert pairs == {(span_id_of("step1"), span_id_of("gen1")), (span_id_of("step2"), span_id_of("gen2"))}
    start = next(e for e in events(trace, "s") if e["name"] == "rl.grpo.generation" and e["ts"] == 2_000_000.0)
    assert start["cat"] == "flow" and start["pid"] == 2  # at step1's start, on its lane


@pytest.mark.slow
def test_iterations_track(tmp_path):
    trace = timeline_of(trace_file(tmp_path))
    windows = [e for e in events(trace, "X") if e["pid"] == 1]
    assert [(w["name"], w["ts"], w["dur"]) for w in windows] == [
        ("iteration 1", micros(ns(2) - ORIGIN_NS), micros(ns(10) - ns(2))),
        ("iteration 2", micros(ns(10) - ORIGIN_NS), micros(ns(20) - ns(10))),
    ]
    assert windows[0]["args"] == {
        "iteration": 1, "run_id": "", "superseded": False, "start_ns": ns(2), "end_ns": ns(10),
    }  # fmt: skip
    assert windows[0]["cat"] == "iteration" and len({w["tid"] for w in windows}) == 1


@pytest.mark.slow
def test_iterations_keep_the_spans_overlapping_their_windows(tmp_path):
    path = trace_file(tmp_path)
    whole = spans_by_id(timeline_of(path))
    trace = timeline_of(path, "--iterations", "2:2")
    slices = spans_by_id(trace)
    # window 2 is [10, 20): job, step2 and what started in it, and ckpt [9, 12] that reaches into it
    assert set(slices) == {span_id_of(n) for n in ("job", "step2", "ckpt", "gen2", "train2", "odd")}
    assert all(slices[i]["ts"] == whole[i]["ts"] for i in slices)  # same origin: the two line up
    assert [e["name"] for e in events(trace, "X") if e["pid"] == 1] == ["iteration 2"]
    assert check_viewable(trace) == {(span_id_of("step2"), span_id_of("gen2"))}
    assert trace["otherData"]["iterations"] == [2, 2]
    single = spans_by_id(timeline_of(path, "--iteration", "1"))
    assert set(single) == {span_id_of(n) for n in ("job", "step1", "gen1", "reward1", "ckpt")}


@pytest.mark.slow
def test_an_empty_iteration_range_writes_an_empty_timeline_with_a_note(tmp_path):
    path = trace_file(tmp_path)
    out = tmp_path / "t.json"
    result = run(["timeline", str(path), "--iterations", "50:60", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "no iteration in the range 50:60" in result.stderr and "iterations 1-2" in result.stderr
    trace = json.loads(out.read_text())
    assert events(trace, "X") == [] and events(trace, "s") == []


@pytest.mark.slow
def test_stdout(tmp_path):
    result = run(["timeline", str(trace_file(tmp_path)), "-o", "-"])
    assert result.exit_code == 0, result.output
    assert set(spans_by_id(json.loads(result.stdout))) == {s.span_id for s in SPANS}
    assert "wrote 12 spans of 2 processes, 2 iteration windows, 2 flows to standard output" in result.stderr


@pytest.mark.slow
def test_library_and_no_cache_say_the_same(tmp_path):
    path = trace_file(tmp_path, shape="jsonl")
    with open_store([path], use_cache=False) as store:
        trace = timeline_trace(store)
    assert trace == timeline_of(path, "--no-cache") == timeline_of(path)


# --- attempts --------------------------------------------------------------------------------------------------------


def restarted(tmp_path: Path) -> Path:
    """Attempt `a` runs iterations 1-2 and dies in 2; attempt `b` redoes 2:
    a: job [0, 20], step1 [1, 5], step2 [5, 15] (superseded), gen2 [6, 9] on a-worker;
    b: job [30, 50], step2 [31, 40], gen2 [32, 35] on b-worker."""

    def res(process: str, run_id: str) -> dict:
        return {"service.name": "toy", "service.instance.id": process, "goodput.run.id": run_id}

    a = [
        S("job", "rl.grpo.job", 0, 20, group="job", process="a-driver", trace="a"),
        step("step1", 1, 1, 5, parent="job", process="a-driver", trace="a"),
        step("step2", 2, 5, 15, parent="job", process="a-driver", trace="a"),
        S("gen2", "rl.grpo.generation", 6, 9, parent="step2", bucket="productive", process="a-worker", trace="a"),
    ]
    b = [
        S("job", "rl.grpo.job", 30, 50, group="job", process="b-driver", trace="b"),
        step("step2", 2, 31, 40, parent="job", process="b-driver", trace="b"),
        S("gen2", "rl.grpo.generation", 32, 35, parent="step2", bucket="productive", process="b-worker", trace="b"),
    ]
    write_trace(tmp_path / "run" / "a.otlp", a, resources={p: res(p, "run-a") for p in ("a-driver", "a-worker")})
    write_trace(tmp_path / "run" / "b.otlp", b, resources={p: res(p, "run-b") for p in ("b-driver", "b-worker")})
    return tmp_path / "run"


@pytest.mark.slow
def test_superseded_windows_are_shown_beside_the_rows(tmp_path):
    path = restarted(tmp_path)
    trace = timeline_of(path)
    windows = {e["name"]: e for e in events(trace, "X") if e["pid"] == 1}
    assert set(windows) == {"iteration 1", "iteration 2 (superseded)", "iteration 2"}
    lost, kept = windows["iteration 2 (superseded)"], windows["iteration 2"]
    assert (lost["cat"], lost["cname"], lost["args"]["run_id"]) == ("superseded", "thread_state_iowait", "run-a")
    assert (lost["ts"], lost["dur"]) == (micros(ns(5) - ns(0)), micros(ns(15) - ns(5)))
    assert (kept["ts"], kept["dur"]) == (micros(ns(31) - ns(0)), micros(ns(40) - ns(31)))
    assert kept["args"]["run_id"] == "run-b"
    assert len(check_viewable(trace)) == 2
    redone = timeline_of(path, "--iterations", "2:2")
    assert {e["name"] for e in events(redone, "X") if e["pid"] == 1} == {"iteration 2 (superseded)", "iteration 2"}
    names = sorted(e["name"] for e in spans_by_id(redone).values())  # both attempts' job, step2 and gen2
    assert names == sorted(["rl.grpo.job", "rl.grpo.step", "rl.grpo.generation"] * 2)


def test_attempt_reads_one_attempt(tmp_path):
    trace = timeline_of(restarted(tmp_path), "--attempt", "latest")
    assert {e["name"] for e in events(trace, "X") if e["pid"] == 1} == {"iteration 2"}
    assert trace["otherData"]["origin_unix_ns"] == ns(30)  # from b's first span
    assert len(spans_by_id(trace)) == 3


# --- bad input -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--iteration", "7"], "no iteration 7 in these traces; they hold iterations 1-2"),
        (["--iterations", "x"], "expected A:B"),
        (["--iteration", "1", "--iterations", "1:2"], "not both"),
        (["--attempt", "nope"], "no attempt"),
    ],
)
def test_bad_options_exit_2(tmp_path, args, words):
    result = run(["timeline", str(trace_file(tmp_path)), "-o", str(tmp_path / "t.json"), *args])
    assert result.exit_code == 2, result.output
    assert words in result.stderr and "Traceback" not in result.output


@pytest.mark.slow
def test_bad_input_exit_2(tmp_path):
    not_a_trace = tmp_path / "notes.txt"
    not_a_trace.write_text("hello\n")
    for args in (
        [str(tmp_path / "missing.otlp"), "-o", str(tmp_path / "t.json")],
        [str(not_a_trace), "-o", str(tmp_path / "t.json")],
        [str(trace_file(tmp_path)), "-o", str(tmp_path / "no-such-dir" / "t.json")],
    ):
        result = run(["timeline", *args])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines()[-1].startswith("Error: ") and "Traceback" not in result.output
    # Without --output it writes timeline.json where it runs: tests/test_cli_sharp_edges.py


# --- the sample job's traces ---------------------------------------------------------------------------------------


def test_sample_traces(tmp_path):
    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "grpo_async"
    out = tmp_path / "grpo_async.json"
    result = run(["timeline", str(sample), "-o", str(out)])
    assert result.exit_code == 0, result.output
    trace = json.loads(out.read_text())
    counted = run(["query", str(sample), "SELECT count(*) AS n, count(DISTINCT process) AS p FROM spans", "-f", "json"])
    [row] = json.loads(counted.stdout)
    assert len(spans_by_id(trace)) == row["n"]
    names = [e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"]
    assert names[0] == "iterations" and names[-1] == "critical path" and len(names) == row["p"] + 2
    assert len([e for e in events(trace, "X") if e["pid"] == 1]) == 6  # the report's six iterations
    assert len(check_viewable(trace)) > 0  # the driver hands work to the rollout and validation workers


# --- properties ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12), st.booleans()), max_size=40))
def test_lanes_nest_whatever_the_spans(raw):
    spans = sorted(((start, start + length, anchor) for start, length, anchor in raw), key=lambda s: (s[0], -s[1]))
    lanes = assign_lanes([s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans])
    by_lane: dict[int, list[tuple[int, int, bool]]] = {}
    for span, lane in zip(spans, lanes, strict=True):
        by_lane.setdefault(lane, []).append(span)
    assert sorted(by_lane) == list(range(len(by_lane)))  # lanes are used from the first
    for members in by_lane.values():
        for i, (a0, a1, anchor) in enumerate(members):
            for b0, b1, _ in members[i + 1 :]:  # b begins no earlier, and is no longer at the same start
                assert a1 <= b0 or b1 <= a1, ((a0, a1), (b0, b1))  # disjoint, or nested in a
                assert not (anchor and b0 == a0), ((a0, a1), (b0, b1))  # a flow's slice is innermost at its start


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=7)
@given(st.data())
def test_random_traces_are_viewable(tmp_path_factory, data):
    """Random spans over three processes, parents anywhere before them: lanes nest and every cross-process
    parent-child pair gets one flow that binds in both viewers."""
    count = data.draw(st.integers(1, 25))
    spans = []
    for index in range(count):
        start = data.draw(st.integers(0, 20))
        end = start + data.draw(st.integers(-1, 10))  # -1: an inverted span
        parent = data.draw(st.sampled_from([None, *range(index)])) if index else None
        spans.append(
            S(f"s{index}", data.draw(st.sampled_from(["a", "b"])), start, end,
              parent=f"s{parent}" if parent is not None else None,
              bucket=data.draw(st.sampled_from([None, "productive", "idle"])),
              process=data.draw(st.sampled_from(["p", "q", "r"])))
        )  # fmt: skip
    path = write_trace(tmp_path_factory.mktemp("random") / "t.otlp", spans)
    with open_store([path], use_cache=False) as store:
        trace = build_timeline(store).trace_object()
    assert set(spans_by_id(trace)) == {s.span_id for s in spans}
    by_label = {s.label: s for s in spans}
    expected = {(s.parent_id, s.span_id) for s in spans if s.parent and by_label[s.parent].process != s.process}
    assert check_viewable(trace) == expected


# --- the spans of many windows at once --------------------------------------------------------------------------------


coarse = st.integers(0, 8)  # whole seconds, so spans often start or end where a window does


@st.composite
def runs(draw) -> list[S]:
    """1-5 steps (windows that may overlap or be zero-length) and up to 12 leaves, some zero-length."""
    spans = []
    for n in range(1, draw(st.integers(1, 5)) + 1):
        start, end = sorted(draw(st.lists(coarse, min_size=2, max_size=2)))
        spans.append(step(f"step{n}", n, start, end))
    for j in range(draw(st.integers(0, 12))):
        start, end = sorted(draw(st.lists(coarse, min_size=2, max_size=2)))
        spans.append(S(f"leaf{j}", "rl.grpo.generation", start, end, bucket="productive", process="worker"))
    return spans


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=6)
@given(spans=runs(), low=st.integers(1, 5), width=st.integers(0, 4))
def test_the_timeline_of_some_iterations_shows_what_spans_lists_for_each(tmp_path_factory, spans, low, width):
    path = str(write_trace(tmp_path_factory.mktemp("run") / "run.otlp", spans))
    high = low + width
    held = [s.iteration for s in spans if s.iteration is not None and low <= s.iteration <= high]
    listed: set[str] = set()
    for iteration in held:
        listed |= {row["span_id"] for row in run_json(["spans", path, "--iteration", str(iteration), "--no-cache"])}
    result = invoke(["timeline", path, "--iterations", f"{low}:{high}", "--no-cache", "--output", "-"])
    assert result.exit_code == 0, result.output
    trace = json.loads(result.stdout[result.stdout.index("{") :])
    shown = {
        e["args"]["span_id"]
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] != 1 and e["cat"] != "critical"
    }
    assert shown == listed


def test_the_timeline_of_two_windows_keeps_what_touches_them_and_not_what_only_meets_them(tmp_path):
    leaves = {  # label: (start, end, shown with windows [0, 5) and [8, 9))
        "across-end": (4, 6, True), "after-end": (5, 7, False), "in-gap": (6, 8, False), "into-second": (7, 8.5, True),
        "point-at-end": (5, 5, False), "point-at-start": (8, 8, True), "point-after": (9, 9, False),
        "point-inside": (2, 2, True), "around-both": (-1, 10, True),
    }  # fmt: skip
    spans = [step("step1", 1, 0, 5), step("step2", 2, 8, 9), step("step3", 3, 20, 30)]
    spans += [S(label, "rl.grpo.generation", a, b, bucket="productive") for label, (a, b, _) in leaves.items()]
    path = str(write_trace(tmp_path / "run.otlp", spans))
    result = invoke(["timeline", path, "--iterations", "1:2", "--no-cache", "--output", "-"])
    trace = json.loads(result.stdout[result.stdout.index("{") :])
    shown = {
        e["args"]["span_id"]
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["pid"] != 1 and e["cat"] != "critical"
    }
    expected = {span_id_of(label) for label, (_, _, kept) in leaves.items() if kept}
    assert shown == expected | {span_id_of("step1"), span_id_of("step2")}


@pytest.mark.parametrize("sample", ["grpo_sync", "grpo_restart"])
def test_the_critical_path_is_a_track_of_its_own_holding_each_windows_path(tmp_path, sample):
    path = Path(__file__).resolve().parent.parent / "sample_traces" / sample
    assert run(["timeline", str(path), "--output", str(tmp_path / "timeline.json")]).exit_code == 0
    trace = json.loads((tmp_path / "timeline.json").read_text())
    critical = json.loads(run(["critical", str(path), "--format", "json"]).stdout)
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    (pid,) = [p for p, name in names.items() if name == "critical path"]
    track = [e for e in events(trace, "X") if e["pid"] == pid]
    assert {e["cat"] for e in track} == {"critical"} and len({e["tid"] for e in track}) == 1
    origin = trace["otherData"]["origin_unix_ns"]
    for window in critical["iterations"]:
        mine = [e for e in track if e["args"]["iteration"] == window["iteration"]]
        segments = [e for e in mine if e["name"] != "waiting"]
        assert [e["args"]["span_id"] for e in segments] == [p["span_id"] for p in window["path"]]
        assert [round(e["ts"] * 1000) + origin for e in segments] == [p["start_ns"] for p in window["path"]]
        waited = sum(e["dur"] for e in mine if e["name"] == "waiting") / 1e6
        assert waited == pytest.approx(window["waiting_s"], abs=1e-6)
        assert sum(e["dur"] for e in mine) / 1e6 == pytest.approx(window["wall_s"], abs=1e-6)  # the window, covered
