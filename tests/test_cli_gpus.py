"""GPU-seconds on the command line (SPEC section 12): `report --by pool`, the GPU line under the plain table, JSON
Lines, CSV, the HTML page, `diff`, `timeline`, and the options and holdings that cannot be used.

The figures a view shows are checked against the report's JSON, and the JSON against the brute-force charge of
tests/test_accounting_gpus.py (each window cut at every span edge, each GPU charged from the spans occupying it).
"""

from __future__ import annotations

import csv
import io
import json
import re
import struct
from pathlib import Path
from statistics import median
from typing import Any

import pytest

import cli.shell
from conftest import WIDTHS, invoke, json_report, one_error_line
from test_accounting_gpus import Expected, expected_charges, gpu_ns, resource, to_ns, two_attempts, windows_of
from tracebuild import S, step, to_request, two_steps, write_trace

GPU_KEYS = ["gpu_s", "productive_gpu_s", "overhead_gpu_s", "idle_gpu_s", "wasted_gpu_s", "unaccounted_gpu_s",
            "goodput"]  # fmt: skip
ROW_KEYS = ["iteration", "start_ns", "end_ns", "wall_s", "productive_s", "overhead_s", "idle_s", "wasted_s",
            "unaccounted_s", "goodput", "span_seconds", "outliers"]  # fmt: skip

# Generation on GPUs 0 and 1 (a process each), training on 2 and 3 (one process), the driver on none.
RESOURCES = {
    "driver": resource("driver", 1, service="driver"),
    "gen0": resource("gen0", 2, service="vllm", **{"goodput.fleet": "generation", "goodput.gpu.ids": ["0"]}),
    "gen1": resource("gen1", 3, service="vllm", **{"goodput.fleet": "generation", "goodput.gpu.ids": ["1"]}),
    "train": resource("train", 4, service="trainer", **{"goodput.fleet": "training", "goodput.gpu.ids": "2,3"}),
}


WINDOWS = [("", 0, 10 * 10**9), ("", 10 * 10**9, 20 * 10**9)]  # the two steps of `fleet_spans`, in ns


def fleet_spans(gen_s: float = 8.0) -> list[S]:
    """Two 10 s steps: generation busy `gen_s` of each on both its GPUs, training 3 s productive then 1 s idle."""
    spans: list[S] = []
    for n, t in ((1, 0.0), (2, 10.0)):
        spans += [
            step(f"s{n}", n, t, t + 10),
            S(f"ga{n}", "rl.grpo.generation", t, t + gen_s, parent=f"s{n}", bucket="productive", process="gen0"),
            S(f"gb{n}", "rl.grpo.generation", t + 1, t + 1 + gen_s - 1, parent=f"s{n}", bucket="productive",
              process="gen1"),
            S(f"w{n}", "rl.idle.refit_bubble", t + 1, t + 9, parent=f"s{n}", bucket="idle", process="gen1"),
            S(f"p{n}", "rl.grpo.policy_training", t + 8, t + 9.5, parent=f"s{n}", bucket="productive",
              process="train"),
            S(f"i{n}", "rl.idle.refit_bubble", t + 6, t + 8, parent=f"s{n}", bucket="idle", process="train"),
        ]  # fmt: skip
    return spans


def fleets_trace(tmp_path: Path, name: str = "run.otlp", gen_s: float = 8.0) -> Path:
    return write_trace(tmp_path / name, fleet_spans(gen_s), resources=RESOURCES)


def at_width(args: list[str], width: int, monkeypatch):
    """`goodput ARGS` as a terminal `width` columns wide shows it (CliRunner's stdout is no terminal)."""
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: width)
    return invoke(args, width=width)


def expected_pools(gen_s: float = 8.0) -> dict[tuple[int, str], Expected]:
    """(window position, pool) -> the brute-force figures of `fleet_spans(gen_s)`."""
    return expected_charges(RESOURCES, fleet_spans(gen_s), WINDOWS)


def same_ns(item: dict[str, Any], expected: Expected) -> None:
    """A `gpu` object (or a CSV row read the same way) equals the brute force, to the nanosecond."""
    assert expected.parts is not None
    assert gpu_ns(item) == {"held": expected.held_ns, **expected.parts}


def busy(expected: Expected) -> float:
    """The share of a pool's GPU-seconds charged to a bucket other than idle."""
    assert expected.parts is not None
    return float((expected.held_ns - expected.parts["idle"] - expected.parts["unaccounted"]) / expected.held_ns)


def pool_totals(expected: dict[tuple[int, str], Expected]) -> dict[str, Expected]:
    out: dict[str, Expected] = {}
    for (_, pool), figures in expected.items():
        assert figures.parts is not None
        out.setdefault(pool, Expected()).add(figures.gpus, figures.held_ns, figures.parts)
    return out


# --- 6. report --by pool ----------------------------------------------------------------------------------------


def test_by_pool_rows_are_each_window_in_each_pool_with_the_pools_own_gpu_figures(tmp_path):
    payload = json_report(fleets_trace(tmp_path), "--by", "pool")
    expected = expected_pools()
    assert [(i["iteration"], i["pool"], i["gpus"]) for i in payload["iterations"]] == [
        (1, "generation", 2), (1, "training", 2), (2, "generation", 2), (2, "training", 2),
    ]  # fmt: skip
    for position, item in enumerate(payload["iterations"]):
        assert list(item) == [*ROW_KEYS[:3], "pool", "gpus", *ROW_KEYS[3:], "gpu"]
        assert list(item["gpu"]) == GPU_KEYS
        same_ns(item["gpu"], expected[(position // 2, item["pool"])])
    totals = pool_totals(expected)
    assert [(p["pool"], p["gpus"]) for p in payload["pools"]] == [("generation", 2), ("training", 2)]
    for pool in payload["pools"]:
        assert list(pool) == ["pool", "gpus", "gpu"]
        same_ns(pool["gpu"], totals[pool["pool"]])
    assert payload["gpus"]["pools"] == [
        {"pool": "generation", "fleets": ["generation"], "gpus": 2, "sampled": False},
        {"pool": "training", "fleets": ["training"], "gpus": 2, "sampled": False},
    ]


# The steps' critical path (SPEC section 14) in each window of `fleet_spans`: training [8, 9.5] is the step's
# latest child; from 8, the training fleet's refit wait [6, 8] ends at 8, woken by gen1's generation (ending at 8, the
# later start of the two that do): that generation [6, 8] is the wait's explanation; from 6, nothing ends: waiting.
# So per window 2 s of the path on the generation pool's processes, 1.5 s on the training pool's.
PATH_S = {"generation": 8 - 6, "training": 9.5 - 8}


@pytest.mark.parametrize("width", WIDTHS)
def test_by_pool_names_the_pool_whose_processes_hold_most_of_the_path_as_the_bottleneck(tmp_path, monkeypatch, width):
    result = at_width(["report", str(fleets_trace(tmp_path)), "--by", "pool"], width, monkeypatch)
    assert result.exit_code == 0, result.output
    lines = result.stdout.rstrip("\n").splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    share = 2 * PATH_S["generation"] / 20  # two windows of 10 s
    at = next(i for i, line in enumerate(lines) if line.startswith("bottleneck: "))
    assert " ".join(lines[at:]) == (  # the last line, however the width folds it
        f"bottleneck: generation, its processes on the steps' critical path {share * 100:.1f}% of the time"
    )
    gpu_at = next(i for i, line in enumerate(lines) if line.startswith("gpus: "))
    assert " ".join(lines[gpu_at:at]).startswith("gpus: 4 in 2 pools (generation 2, training 2); GPU goodput")
    payload = json_report(fleets_trace(tmp_path, "again.otlp"), "--by", "pool")
    assert list(payload)[list(payload).index("pools") + 1] == "bottleneck"
    assert payload["bottleneck"] == {"pool": "generation", "share": pytest.approx(share)}


def test_the_bottleneck_follows_the_path_not_the_busiest_gpus(tmp_path):
    # Generation 2 s a step: the training fleet's refit wait [6, 8] is woken by nothing (the generations ended at 2),
    # so the path is training [8, 9.5], the wait [6, 8], then gen1's generation [1, 2]: 3.5 s a window on the
    # training pool's processes, 1 s on the generation pool's, though the generation GPUs are as busy.
    payload = json_report(fleets_trace(tmp_path, gen_s=2.0), "--by", "pool")
    assert payload["bottleneck"] == {"pool": "training", "share": pytest.approx(2 * ((9.5 - 8) + (8 - 6)) / 20)}
    totals = pool_totals(expected_pools(gen_s=2.0))
    assert busy(totals["generation"]) >= busy(totals["training"])


def test_by_pool_table_rows_show_each_window_and_pool_then_the_totals(tmp_path):
    result = invoke(["report", str(fleets_trace(tmp_path)), "--by", "pool"])
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in result.stdout.splitlines()
            if line.startswith("│")]  # fmt: skip
    expected, totals = expected_pools(), pool_totals(expected_pools())
    shown = [*(((str(1 + w), pool), figures) for (w, pool), figures in sorted(expected.items())),
             *((("total", pool), figures) for pool, figures in sorted(totals.items()))]  # fmt: skip
    assert len(rows) == len(shown)
    for row, ((label, pool), figures) in zip(rows, shown, strict=True):
        assert figures.parts is not None
        seconds = [f"{float(v / 10**9):.3f}" for v in (figures.held_ns, *figures.parts.values())]
        share = f"{float(figures.parts['productive'] / figures.held_ns) * 100:.1f}%"
        assert row == [label, pool, "2", *seconds, share]


def test_by_pool_rows_of_an_attempt_holding_fewer_gpus_say_so(tmp_path):
    spans, resources = two_attempts(["0", "1", "2"])
    path = write_trace(tmp_path / "run.otlp", spans, resources=resources)
    result = invoke(["report", str(path), "--by", "pool", "--format", "csv"])
    assert result.exit_code == 0, result.output
    header, *rows = list(csv.reader(io.StringIO(result.stdout)))
    assert [(row[0], row[2], row[3]) for row in rows] == [
        ("1", "2", str(2 * 5)), ("2", "3", str(3 * 4)), ("3", "3", str(3 * 4)),  # attempt a holds 2, b 3
        ("total", "3", str(2 * 5 + 3 * 4 + 3 * 4)),
    ]  # fmt: skip


def test_by_pool_total_shows_only_each_pools_total(tmp_path):
    result = invoke(["report", str(fleets_trace(tmp_path)), "--by", "pool", "--total"], width=160)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert [line.split("│")[1:3] for line in rows] == [[" total ", " generation "], [" total ", " training   "]]


def test_by_pool_without_any_gpu_is_a_one_line_error(tmp_path):
    result = invoke(["report", str(two_steps(tmp_path)), "--by", "pool"])
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "--by" in line and "pool" in line and "--gpus" in line
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_by_pool_csv_has_the_json_key_names_as_headers_and_the_json_figures(tmp_path):
    path = fleets_trace(tmp_path)
    payload = json_report(path, "--by", "pool")
    result = invoke(["report", str(path), "--by", "pool", "--format", "csv"])
    assert result.exit_code == 0, result.output
    header, *rows = list(csv.reader(io.StringIO(result.stdout)))
    assert header == ["iteration", "pool", "gpus", *GPU_KEYS]
    items = [(i["iteration"], i) for i in payload["iterations"]] + [("total", p) for p in payload["pools"]]
    assert len(rows) == len(items)
    for row, (label, item) in zip(rows, items, strict=True):
        assert row[:3] == [str(label), item["pool"], str(item["gpus"])]
        for key, cell in zip(GPU_KEYS, row[3:], strict=True):
            assert float(cell) == pytest.approx(item["gpu"][key], abs=1e-6), key


# --- 7. options and holdings that cannot be used ----------------------------------------------------------------


def _command(name: str, path: Path, tmp_path: Path) -> list[str]:
    if name == "diff":
        return ["diff", str(path), str(path)]
    if name == "timeline":
        return ["timeline", str(path), "--output", str(tmp_path / "timeline.json")]
    return ["report", str(path)]


@pytest.mark.parametrize("command", ["report", "diff", "timeline"])
def test_an_unknown_fleet_in_gpus_is_exit_2_naming_the_fleets_there_are(tmp_path, command):
    result = invoke([*_command(command, fleets_trace(tmp_path), tmp_path), "--gpus", "nosuch=2"])
    assert result.exit_code == 2, result.output
    line = one_error_line(result.stderr)
    assert "--gpus" in line and "nosuch" in line
    assert line.endswith("the fleets are driver, generation, training")
    assert not (tmp_path / "timeline.json").exists()


def test_an_unknown_fleet_in_place_is_exit_2_naming_the_fleets_there_are(tmp_path):
    result = invoke(["report", str(fleets_trace(tmp_path)), "--place", "rl.grpo.generation=nosuch"])
    assert result.exit_code == 2
    line = one_error_line(result.stderr)
    assert "--place" in line and line.endswith("the fleets are driver, generation, training")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--gpus", "X=-1"), ("--gpus", "X=two"), ("--gpus", "X=1.5"), ("--gpus", "X=²"), ("--gpus", "X"),
     ("--gpus", "=2"), ("--place", "foo"), ("--place", "foo=")],
)  # fmt: skip
@pytest.mark.parametrize("command", ["report", "diff", "timeline"])
def test_a_bad_gpus_or_place_value_is_exit_2_with_one_error_line(tmp_path, command, option, value):
    """Refused before any file is read (the path does not exist), as typer refuses a bad option value."""
    result = invoke([*_command(command, tmp_path / "missing.otlp", tmp_path), option, value])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if "Error" in line]
    assert len(errors) == 1 and errors[0].startswith("Error: "), result.stderr
    assert option in errors[0] and value.split("=")[0] in errors[0]
    assert "missing.otlp" not in result.stderr and "Traceback" not in result.output


def write_with_ids(path: Path, spans: list[S], resources: dict, kind: str, *processes: str) -> Path:
    """The trace with the goodput.gpu.ids of `processes` replaced by a map ({"gpu": "0"}) or an array of arrays."""
    request = to_request(spans, resources)
    for resource_spans in request.resource_spans:
        attributes = {kv.key: kv for kv in resource_spans.resource.attributes}
        if attributes["service.instance.id"].value.string_value not in processes:
            continue
        value = attributes["goodput.gpu.ids"].value
        value.Clear()
        if kind == "map":
            entry = value.kvlist_value.values.add()
            entry.key, entry.value.string_value = "gpu", "0"
        else:
            for gpu in ("0", "1"):
                value.array_value.values.add().array_value.values.add().string_value = gpu
    body = request.SerializeToString()
    path.write_bytes(struct.pack(">I", len(body)) + body)
    return path


@pytest.mark.parametrize("kind", ["map", "array-of-arrays"])
def test_gpu_ids_that_are_a_map_or_an_array_of_arrays_are_no_gpu_with_one_note_naming_the_process(tmp_path, kind):
    path = write_with_ids(tmp_path / "run.otlp", fleet_spans(), RESOURCES, kind, "gen1")
    result = invoke(["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: goodput.gpu.ids of gen1 "), result.stderr
    payload = json.loads(result.stdout)
    assert payload["gpus"]["pools"][0] == {"pool": "generation", "fleets": ["generation"], "gpus": 1,
                                           "sampled": False}  # fmt: skip
    unread = {**RESOURCES, "gen1": {k: v for k, v in RESOURCES["gen1"].items() if k != "goodput.gpu.ids"}}
    expected = expected_charges(unread, fleet_spans(), windows_of(payload))
    same_ns(payload["iterations"][0]["gpu"], Expected(*_sum(expected, 0)))


def _sum(expected: dict[tuple[int, str], Expected], position: int) -> tuple[Any, Any, dict[str, Any]]:
    out = Expected()
    for (where, _), figures in expected.items():
        if where == position:
            assert figures.parts is not None
            out.add(figures.gpus, figures.held_ns, figures.parts)
    assert out.parts is not None
    return out.gpus, out.held_ns, out.parts


def test_two_processes_with_unreadable_ids_make_one_note(tmp_path):
    path = write_with_ids(tmp_path / "run.otlp", fleet_spans(), RESOURCES, "map", "gen0", "gen1")
    result = invoke(["report", str(path)])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and "(and 1 more)" in notes[0], result.stderr


def test_unreadable_ids_of_the_only_process_claiming_gpus_still_make_the_note(tmp_path):
    resources = {**RESOURCES, "train": resource("train", 4, service="trainer")}
    resources = {p: r for p, r in resources.items() if p != "gen0"}
    spans = [s for s in fleet_spans() if s.process != "gen0"]
    path = write_with_ids(tmp_path / "run.otlp", spans, resources, "map", "gen1")
    result = invoke(["report", str(path), "--format", "json"])
    assert result.exit_code == 0 and "gpus" not in json.loads(result.stdout)
    notes = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and notes[0].startswith("note: goodput.gpu.ids of gen1 "), result.stderr


# --- 8. the other views ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_json_lines_carry_each_rows_gpu_object_and_a_gpus_line(tmp_path):
    path = fleets_trace(tmp_path)
    payload = json_report(path)
    result = invoke(["report", str(path), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    rows = [line for line in lines if line["kind"] == "iteration"]
    assert [{k: v for k, v in row.items() if k != "kind"} for row in rows] == payload["iterations"]
    assert all(list(row["gpu"]) == GPU_KEYS for row in rows)
    (gpus,) = [line for line in lines if line["kind"] == "gpus"]
    assert {k: v for k, v in gpus.items() if k != "kind"} == payload["gpus"]
    (total,) = [line for line in lines if line["kind"] == "total"]
    assert total["gpu"] == payload["total"]["gpu"]


@pytest.mark.slow
def test_the_html_page_has_a_gpu_chart_only_when_there_are_gpus(tmp_path):
    page, plain = tmp_path / "gpus.html", tmp_path / "plain.html"
    assert invoke(["report", str(fleets_trace(tmp_path)), "-o", str(page)]).exit_code == 0
    assert invoke(["report", str(two_steps(tmp_path)), "-o", str(plain)]).exit_code == 0
    text = page.read_text(encoding="utf-8")
    assert 'id="goodput-gpus"' in text and "GPU-seconds by iteration and pool" in text
    assert "gpus: 4 in 2 pools (generation 2, training 2)" in text
    assert "goodput-gpus" not in plain.read_text(encoding="utf-8")


def gpu_goodputs(gen_s: float) -> list[float]:
    """Each window's GPU goodput over all pools, by brute force."""
    expected = expected_pools(gen_s)
    out = []
    for position in range(len(WINDOWS)):
        _, held, parts = _sum(expected, position)
        out.append(float(parts["productive"] / held))
    return out


@pytest.mark.slow
def test_diff_of_two_gpu_traces_compares_the_median_gpu_goodput(tmp_path):
    before, after = fleets_trace(tmp_path, "before.otlp", 8.0), fleets_trace(tmp_path, "after.otlp", 5.0)
    result = invoke(["diff", str(before), str(after), "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["baseline"]["iterations"] == payload["candidate"]["iterations"] == len(WINDOWS)
    baseline, candidate = median(gpu_goodputs(8.0)), median(gpu_goodputs(5.0))
    assert baseline != candidate
    assert payload["baseline"]["median"]["gpu_goodput"] == pytest.approx(baseline, abs=1e-12)
    assert payload["candidate"]["median"]["gpu_goodput"] == pytest.approx(candidate, abs=1e-12)
    assert payload["delta"]["gpu_goodput"] == pytest.approx(candidate - baseline, abs=1e-12)
    assert payload["ratio"]["gpu_goodput"] == pytest.approx(candidate / baseline - 1, abs=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_diff_table_has_a_gpu_goodput_row(tmp_path, monkeypatch, width):
    before, after = fleets_trace(tmp_path, "before.otlp", 8.0), fleets_trace(tmp_path, "after.otlp", 5.0)
    result = at_width(["diff", str(before), str(after)], width, monkeypatch)
    assert result.exit_code == 0, result.output
    baseline, candidate = median(gpu_goodputs(8.0)), median(gpu_goodputs(5.0))
    (row,) = [line for line in result.stdout.splitlines() if "gpu_goodput" in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[:4] == ["gpu_goodput", f"{baseline * 100:.1f}%", f"{candidate * 100:.1f}%",
                         f"{(candidate - baseline) * 100:+.1f} pt"]  # fmt: skip


@pytest.mark.slow
def test_diff_of_a_gpu_trace_against_a_plain_one_has_no_gpu_goodput(tmp_path):
    gpus, plain = str(fleets_trace(tmp_path)), str(two_steps(tmp_path))
    for args in ([gpus, plain], [plain, gpus]):
        result = invoke(["diff", *args, "--format", "json"])
        assert result.exit_code == 0, result.output
        assert "gpu_goodput" not in result.stdout
    table = invoke(["diff", gpus, plain])
    assert table.exit_code == 0 and "gpu_goodput" not in table.stdout


def test_timeline_with_gpus_labels_each_process_with_its_fleet_and_pool(tmp_path):
    out = tmp_path / "timeline.json"
    result = invoke(["timeline", str(fleets_trace(tmp_path)), "--gpus", "training=2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    labels = {names[e["pid"]]: e["args"]["labels"] for e in events if e["ph"] == "M" and e["name"] == "process_labels"}
    assert set(labels) == {"driver", "gen0", "gen1", "train"}
    assert labels["train"].startswith("fleet training, pool training, 2 GPUs")  # --gpus: the fleet's two
    assert labels["gen0"] == "fleet generation, pool generation, GPU 0"
    assert labels["gen1"] == "fleet generation, pool generation, GPU 1"
    assert labels["driver"].startswith("fleet driver") and "pool" not in labels["driver"]


# --- 9. the GPU line under the plain table -----------------------------------------------------------------------

GPU_LINE = re.compile(
    r"gpus: (?P<count>\S+) in (?P<pools>\d+) pools? \((?P<each>[^)]*)\)(?: \(sampled ranks scaled up\))?; "
    r"GPU goodput (?P<goodput>\S+) over the iterations; job (?P<hours>\S+) GPU-hours, (?P<job>\S+) of them productive"
)


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_the_plain_tables_last_line_is_the_gpu_line_with_the_jsons_figures(tmp_path, monkeypatch, width):
    path = fleets_trace(tmp_path)
    payload = json_report(path)
    result = at_width(["report", str(path)], width, monkeypatch)
    assert result.exit_code == 0, result.output
    lines = result.stdout.rstrip("\n").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("gpus: "))
    found = GPU_LINE.fullmatch(" ".join(lines[at:]))  # the last line, however the width wraps it
    assert found, lines[at:]
    gpus = payload["gpus"]
    assert found["count"] == str(gpus["count"])
    assert int(found["pools"]) == len(gpus["pools"])
    assert found["each"] == ", ".join(f"{p['pool']} {p['gpus']}" for p in gpus["pools"])
    assert found["goodput"] == f"{payload['total']['gpu']['goodput'] * 100:.1f}%"
    assert found["hours"] == f"{gpus['job']['gpu_s'] / 3600:.3f}"
    assert found["job"] == f"{gpus['job']['goodput'] * 100:.1f}%"
    assert gpus["job"]["gpu_s"] == 4 * (20.0 - 0.0)  # 4 GPUs over the 20 s the run spans
    expected = expected_pools()
    productive = sum(figures.parts["productive"] for figures in expected.values() if figures.parts)
    assert to_ns(payload["total"]["gpu"]["productive_gpu_s"]) == productive


def test_the_gpu_line_under_the_plain_table_fits_80_columns(tmp_path, monkeypatch):
    result = at_width(["report", str(fleets_trace(tmp_path))], 80, monkeypatch)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("gpus: ") for line in lines)
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
