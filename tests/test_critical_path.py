"""`goodput critical` (SPEC section 14): what each step waited on, on hand-made traces whose paths are worked out
here, against the rule read literally (a brute-force walk), and as a user reads the table.

The worked example (`two_workers`), window [0, 10] s:

    gen-a  rl.grpo.generation  productive  [1, 5]
    gen-b  rl.grpo.generation  productive  [2, 6]      (gen-a and gen-b: two processes of grpo-generation)
    driver rl.grpo.policy_training productive [6.5, 9]
    driver rl.grpo.checkpointing   overhead   [7, 8]   (under training: costs the step nothing)

Walked back from t = 10: of the spans started before 10, training's min(end, t) = 9 is latest: [9, 10] is waiting,
its segment [6.5, 9], t = 6.5. Then gen-b (6 > gen-a's 5): [6, 6.5] waiting, segment [2, 6], t = 2. Then gen-a, running
at 2: segment [1, 2], t = 1. Nothing started before 1: [0, 1] waiting. Path: gen-a [1, 2], gen-b [2, 6], training
[6.5, 9]; waiting 1 + 0.5 + 1 = 2.5 s. Generation 5 s (50%), training 2.5 s (25%). gen-b is on the path 4 s against
gen-a's 1 s (4x), and for [5, 6] gen-a had ended its generation: the step waited on gen-b alone 1 s, 10% of the
wall: a straggler.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cli.shell
from conftest import PROPERTY_TESTS, WIDTHS, invoke
from rollup.critical.build import CriticalOptions, build_critical, walk_back
from rollup.critical.paths import SEGMENT_SCHEMA, decoded_segments, encoded_segments
from rollup.store.span_store import open_store
from tracebuild import ORIGIN_NS, S, ns, span_id_of, step, write_trace

SAMPLES = sorted(p for p in (Path(__file__).parent.parent / "sample_traces").iterdir() if p.is_dir())


def resources(**services: str) -> dict:
    return {process: {"service.name": service, "host.name": "vm", "process.pid": 10 + i}
            for i, (process, service) in enumerate(services.items())}  # fmt: skip


def two_workers(tmp_path: Path) -> Path:
    spans = [
        step("s1", 1, 0, 10, process="driver"),
        S("ga", "rl.grpo.generation", 1, 5, parent="s1", bucket="productive", process="gen-a"),
        S("gb", "rl.grpo.generation", 2, 6, parent="s1", bucket="productive", process="gen-b"),
        S("tr", "rl.grpo.policy_training", 6.5, 9, parent="s1", bucket="productive", process="driver"),
        S("ck", "rl.grpo.checkpointing", 7, 8, parent="s1", bucket="overhead", process="driver"),
    ]
    named = resources(driver="grpo-driver", **{"gen-a": "grpo-generation", "gen-b": "grpo-generation"})
    return write_trace(tmp_path / "run.otlp", spans, resources=named)


def critical_json(*args: str) -> dict:
    result = invoke(["critical", *args, "--format", "json", "--no-cache"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_worked_example_path_shares_and_waiting(tmp_path):
    out = critical_json(str(two_workers(tmp_path)))
    assert set(out) == {"iterations", "names", "processes"}
    (only,) = out["iterations"]
    assert set(only) == {"iteration", "wall_s", "waiting_s", "path"}
    assert (only["iteration"], only["wall_s"], only["waiting_s"]) == (1, 10.0, 2.5)
    assert [(p["span_id"], p["name"], p["bucket"], p["start_ns"], p["end_ns"]) for p in only["path"]] == [
        (span_id_of("ga"), "rl.grpo.generation", "productive", ns(1), ns(2)),
        (span_id_of("gb"), "rl.grpo.generation", "productive", ns(2), ns(6)),
        (span_id_of("tr"), "rl.grpo.policy_training", "productive", ns(6.5), ns(9)),
    ]
    assert [p["process"] for p in only["path"]] == ["grpo-generation@vm:11", "grpo-generation@vm:12",
                                                    "grpo-driver@vm:10"]  # fmt: skip
    assert out["names"] == [
        {"name": "rl.grpo.generation", "bucket": "productive", "critical_s": 5.0, "share": 0.5},
        {"name": "rl.grpo.policy_training", "bucket": "productive", "critical_s": 2.5, "share": 0.25},
    ]
    assert out["processes"] == [
        {"process": "grpo-generation@vm:12", "critical_s": 4.0, "share": 0.4},
        {"process": "grpo-driver@vm:10", "critical_s": 2.5, "share": 0.25},
        {"process": "grpo-generation@vm:11", "critical_s": 1.0, "share": 0.1},
    ]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_table_leads_with_the_phase_to_speed_up_and_names_the_straggler(tmp_path, width, monkeypatch):
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: width)
    result = invoke(["critical", str(two_workers(tmp_path)), "--no-cache"], width=width)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the lead lines fold at 80 columns
    assert text.startswith("critical path of 1 iteration: 10.000 s of steps, 2.500 s waiting (25.0%)")
    # generation: 5 s on the path of the one step; 10% off it saves at most 0.5 s
    assert ("speed up first: rl.grpo.generation (productive), 50.0% of the path, 5.000 s a step: 10% off it saves "
            "at most 0.500 s a step") in text  # fmt: skip
    assert ("straggler: grpo-generation@vm:12 is on the path 4.0x as long as the 1 other process of "
            "grpo-generation on average; the steps waited on it alone 1.000 s a step") in text  # fmt: skip
    assert "rl.grpo.checkpointing" not in text  # under training: off the path
    assert max(len(line) for line in result.stdout.splitlines()) <= width


def test_one_iteration_shows_its_path_and_a_missing_one_is_exit_2(tmp_path):
    path = str(two_workers(tmp_path))
    result = invoke(["critical", path, "--iteration", "1", "--no-cache"], width=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("iteration 1: 10.000 s, 2.500 s waiting; its path")
    rows = [line.split("│")[1:-1] for line in lines[start + 4 : start + 7]]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["1.000", "1.000", "rl.grpo.generation", "grpo-generation@vm:11", "productive"],
        ["2.000", "4.000", "rl.grpo.generation", "grpo-generation@vm:12", "productive"],
        ["6.500", "2.500", "rl.grpo.policy_training", "grpo-driver@vm:10", "productive"],
    ]
    missing = invoke(["critical", path, "--iteration", "7", "--no-cache"])
    assert missing.exit_code == 2 and "no iteration 7" in missing.stderr


def test_csv_and_markdown_carry_every_row(tmp_path):
    path = str(two_workers(tmp_path))
    csv = invoke(["critical", path, "--format", "csv", "--no-cache"])
    assert csv.exit_code == 0, csv.output
    lines = csv.stdout.splitlines()
    assert lines[0] == "kind,iteration,name,process,bucket,start_offset_s,duration_s,critical_s,share"
    assert lines[1] == "name,,rl.grpo.generation,,productive,,,5,0.5"
    assert "process,,,grpo-generation@vm:12,,,,4,0.4" in lines
    assert "path,1,rl.grpo.policy_training,grpo-driver@vm:10,productive,6.5,2.5,," in lines
    assert len(lines) == 1 + 2 + 3 + 3
    markdown = invoke(["critical", path, "--format", "markdown", "--no-cache"])
    assert markdown.stdout.splitlines()[0].startswith("| kind | iteration | name |")


def test_ties_go_to_the_later_start_then_the_smaller_span_id(tmp_path):
    # [0, 4]. At t = 4, x [1, 4] and y [2, 4] both reach 4: y started later, segment [2, 4]. At t = 2, x, u [0, 2]
    # and v [0, 2] all reach 2: x started later, [1, 2]. At t = 1, u and v tie on both: the smaller id, [0, 1].
    first = min(["u", "v"], key=span_id_of)
    spans = [
        step("s1", 1, 0, 4),
        S("x", "x", 1, 4, parent="s1", bucket="productive"),
        S("y", "y", 2, 4, parent="s1", bucket="overhead"),
        S("u", "u", 0, 2, parent="s1", bucket="idle"),
        S("v", "v", 0, 2, parent="s1", bucket="idle"),
    ]
    out = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))
    path = out["iterations"][0]["path"]
    assert [(p["name"], p["start_ns"] - ORIGIN_NS, p["end_ns"] - ORIGIN_NS) for p in path] == [
        (first, 0, 10**9),
        ("x", 10**9, 2 * 10**9),
        ("y", 2 * 10**9, 4 * 10**9),
    ]
    assert out["iterations"][0]["waiting_s"] == 0


def test_spans_outside_the_window_are_cut_to_it_and_any_iteration_counts(tmp_path):
    # A span of another iteration (no iteration at all) that runs across the whole window is what it waited on.
    spans = [
        step("s1", 1, 10, 20),
        S("long", "rl.wasted.failed_trajectory", 5, 25, bucket="wasted"),
        S("short", "rl.grpo.reward", 12, 14, parent="s1", bucket="productive"),
    ]
    out = critical_json(str(write_trace(tmp_path / "run.otlp", spans)))
    (path,) = out["iterations"][0]["path"]
    assert (path["name"], path["start_ns"], path["end_ns"]) == ("rl.wasted.failed_trajectory", ns(10), ns(20))


def test_a_window_without_a_bucketed_span_is_all_waiting(tmp_path):
    spans = [step("s1", 1, 0, 4), S("u", "rl.grpo.rollout", 0, 3, parent="s1", group="rollout"),
             step("s2", 2, 4, 8), S("g", "rl.grpo.generation", 5, 6, parent="s2", bucket="productive")]  # fmt: skip
    path = str(write_trace(tmp_path / "run.otlp", spans))
    out = critical_json(path)
    assert [(i["iteration"], i["waiting_s"], i["path"]) for i in out["iterations"][:1]] == [(1, 4.0, [])]
    assert out["iterations"][1]["waiting_s"] == 3.0
    assert out["names"][0]["share"] == 1 / 8
    table = invoke(["critical", path, "--iteration", "1", "--no-cache"])
    assert table.exit_code == 0 and "no step waited on a bucketed span: every window is waiting" in table.stdout


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
    assert sum(n["share"] for n in out["names"]) <= 1 + 1e-9


def test_a_restarted_run_walks_the_latest_attempts_windows():
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


def literal_walk(a: int, b: int, spans: list[tuple[int, int, str]]) -> list[tuple[str, int, int]]:
    """SPEC section 14 word for word: (id, segment start, segment end), latest first."""
    t, path = b, []
    live = [s for s in spans if s[0] < s[1] and s[1] > a and s[0] < b]
    while t > a:
        started = [s for s in live if s[0] < t]
        if not started:
            break
        latest = max(min(e, t) for _, e, _ in started)
        tied = [s for s in started if min(s[1], t) == latest]
        later = max(s[0] for s in tied)
        start, end, span_id = min((s for s in tied if s[0] == later), key=lambda s: s[2])
        path.append((span_id, max(start, a), min(end, t)))
        t = max(start, a)
    return path


def spans_strategy(low: int = 0, high: int = 40):
    edge = st.integers(low, high)
    return st.lists(st.tuples(edge, edge).map(sorted).filter(lambda p: p[0] < p[1]), max_size=12)


def fast_walk(a: int, b: int, spans: list[tuple[int, int, str]]) -> list[tuple[str, int, int]]:
    rows = sorted((s for s in spans if s[1] > a and s[0] < b), key=lambda s: (-s[1], -s[0], s[2]))
    starts, ends, ids = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
    return [(ids[row], s, e) for row, s, e in walk_back(a, b, starts, ends, ids, 0, len(rows))]


@PROPERTY_TESTS
@given(spans_strategy(), st.integers(0, 20), st.integers(21, 40))
def test_the_walk_is_the_rule_read_literally_and_partitions_the_window(pairs, a, b):
    spans = [(s, e, f"{i:016x}") for i, (s, e) in enumerate(pairs)]
    path = fast_walk(a, b, spans)
    assert path == literal_walk(a, b, spans)
    pieces = sorted((s, e) for _, s, e in path)
    assert all(a <= s < e <= b for s, e in pieces)
    assert all(x[1] <= y[0] for x, y in zip(pieces, pieces[1:], strict=False))  # disjoint: segments and waits cover
    by_id = {i: (s, e) for s, e, i in spans}
    assert all(by_id[i][0] <= s and e <= by_id[i][1] for i, s, e in path)  # each segment is in its span


@PROPERTY_TESTS
@given(st.lists(st.integers(1, 6), min_size=2, max_size=16), st.integers(0, 30), st.integers(31, 60))
def test_one_span_at_a_time_the_path_is_their_union_in_the_window(cuts, a, b):
    edges = [sum(cuts[: i + 1]) for i in range(len(cuts))]  # strictly increasing: spans [e0, e1], [e2, e3], ...
    spans = [(edges[i], edges[i + 1], f"{i:016x}") for i in range(0, len(edges) - 1, 2)]
    clipped = sorted((max(s, a), min(e, b)) for s, e, _ in spans if s < b and e > a)
    assert sorted((s, e) for _, s, e in fast_walk(a, b, spans)) == clipped


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=15)
@given(spans_strategy(0, 30))
def test_the_store_walks_what_the_rule_walks(tmp_path_factory, pairs):
    folder = tmp_path_factory.mktemp("critical")
    spans = [step("s1", 1, 5, 25)]
    spans += [S(f"x{i}", f"n{i}", s, e, bucket="productive") for i, (s, e) in enumerate(pairs)]
    path = write_trace(folder / "run.otlp", spans)
    with open_store([path]) as store:
        found = build_critical(store, CriticalOptions())
    expected = literal_walk(ns(5), ns(25), [(ns(s), ns(e), span_id_of(f"x{i}")) for i, (s, e) in enumerate(pairs)])
    (window,) = found.iterations
    assert [(s.span_id, s.start_ns, s.end_ns) for s in window.path] == expected[::-1]


def test_a_cached_re_run_reads_the_paths_back_and_a_damaged_file_is_walked_again(tmp_path):
    """The segments are kept beside the set's lineage (`rollup.store.derived`, `critical-*.arrow`): the re-run's JSON is
    the first run's, and an attempt asked for keeps its own."""
    restart = next(s for s in SAMPLES if s.name == "grpo_restart")
    env = {"GOODPUT_CACHE_DIR": str(tmp_path / "cache")}
    fresh = invoke(["critical", str(restart), "--format", "json", "--no-cache"]).stdout
    first = invoke(["critical", str(restart), "--format", "json"], env=env)
    assert first.exit_code == 0 and first.stdout == fresh
    kept = sorted((tmp_path / "cache").rglob("*.derived/critical-*.arrow"))
    assert len(kept) == 1
    assert invoke(["critical", str(restart), "--format", "json"], env=env).stdout == fresh
    kept[0].write_bytes(b"not arrow")
    assert invoke(["critical", str(restart), "--format", "json"], env=env).stdout == fresh
    latest = invoke(["critical", str(restart), "--format", "json", "--attempt", "latest"], env=env)
    assert latest.stdout == invoke(["critical", str(restart), "--format", "json", "--attempt", "latest",
                                    "--no-cache"]).stdout  # fmt: skip
    assert len(list((tmp_path / "cache").rglob("*.derived/critical-*.arrow"))) == 2


def test_kept_segments_read_back_as_they_were_and_ids_of_another_shape_are_not_kept():
    # The readers write span ids as 16 lowercase hex digits; a table holding another shape is not kept (written back
    # it would not be the same text), and is answered as it is.
    table = pa.table(
        {"window": [0, 0, 1], "span_id": ["00000000000000ff", "ffffffffffffffff", "0123456789abcdef"],
         "name": ["a", "b", "a"], "process": ["p", None, "p"], "bucket": ["idle", "productive", "idle"],
         "start_ns": [1, 5, 9], "end_ns": [5, 9, 12], "late_ns": [0, 3, 0]}, schema=SEGMENT_SCHEMA,
    )  # fmt: skip
    encoded = encoded_segments(table)
    assert encoded is not None
    assert decoded_segments(*encoded).equals(table)
    for odd in ("ABCDEF0123456789", "abc", "zzzzzzzzzzzzzzzz"):
        other = table.set_column(1, "span_id", pa.array([odd, "00000000000000ff", "0123456789abcdef"]))
        assert encoded_segments(other) is None, odd


@pytest.mark.parametrize("shape", ["framed", "jsonl"])
def test_a_nemo_lens_trace_is_walked_with_its_processes_apart(tmp_path, shape):
    # As nemo-lens writes it: the driver and the rank-0 worker share `<run id>-rank0`, no `rl.span_group`. From 10:
    # rank 1's generation [2, 7] (waiting [7, 10]), then the driver's, running at 2 ([1, 2]), then waiting [0, 1].
    # Rank 1 ran on alone for [6, 7] after the others ended theirs: 10% of the step, a straggler of `nemo-rl`.
    from test_reading_process_identity import HOST, RESOURCES, RUN, nemo_lens_trace

    path = write_trace(tmp_path / f"run.{shape}", nemo_lens_trace(), shape, resources=RESOURCES)
    out = critical_json(str(path))
    (window,) = out["iterations"]
    assert window["waiting_s"] == 4.0
    assert [(p["process"], p["start_ns"], p["end_ns"]) for p in window["path"]] == [
        (f"{RUN}-rank0 [{HOST}:100]", ns(1), ns(2)),
        (f"{RUN}-rank1", ns(2), ns(7)),
    ]
    table = invoke(["critical", str(path), "--no-cache"])
    assert f"straggler: {RUN}-rank1 is on the path 10.0x as long as the 2 other processes of nemo-rl" in " ".join(
        table.stdout.split()
    )
