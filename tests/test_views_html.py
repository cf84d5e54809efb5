"""report --format html: the page a person opens, rendered by a real headless Chromium, read back from its DOM.

Chromium runs plotly's inlined JavaScript from a `file://` URL (no network), and `--dump-dom` prints the document as
the scripts left it: plotly's `main-svg` layers, one `g.trace.bars` per bucket with one `g.point` per bar. Without a
chromium binary the rendering tests skip saying so (.ci/run installs one); the page's own content is checked
without it.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import rollup
from cli.views.html import check_counts, number_ranges, report_html
from conftest import invoke
from tracebuild import S, step, write_trace

REPO = Path(__file__).resolve().parent.parent
RESTART = REPO / "sample_traces" / "grpo_restart"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SERIES = ("productive", "overhead", "idle", "wasted", "unaccounted")
# A span name that is markup and a script: it must show as text, in the tables and in plotly's labels alike.
HOSTILE = 'rl.grpo.<b>gen</b></script><script>window.PWNED=1</script>&amp;"'


def chromium() -> str:
    for name in CHROMIUM_NAMES:
        if path := shutil.which(name):
            return path
    pytest.skip("no chromium binary on PATH (apt-get install chromium): the rendered page is not checked")


def rendered_dom(page: Path, tmp_path: Path) -> str:
    """The DOM of `page` after its scripts ran, as headless Chromium serializes it."""
    run = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom", page.resolve().as_uri(),
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


class PlotlyDom(HTMLParser):
    """What plotly drew: for each chart div (by id) its `main-svg` count and, per bar trace, the bars drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, set[str], str | None]] = []  # (tag, classes, chart div id)
        self.main_svgs: dict[str, int] = {}
        self.bars: dict[str, list[int]] = {}  # chart id -> points of each bar trace, in drawing order
        self.tick_texts: dict[str, list[str]] = {}
        self.x_tick_texts: dict[str, list[str]] = {}
        self.titles: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        classes = set((attributes.get("class") or "").split())
        chart = self.stack[-1][2] if self.stack else None
        if tag == "div" and "plotly-graph-div" in classes:
            chart = attributes.get("id")
        if chart is not None:
            if tag == "svg" and "main-svg" in classes:
                self.main_svgs[chart] = self.main_svgs.get(chart, 0) + 1
            if tag == "g" and {"trace", "bars"} <= classes:
                self.bars.setdefault(chart, []).append(0)
            if tag == "g" and "point" in classes and any({"trace", "bars"} <= c for _, c, _ in self.stack):
                self.bars[chart][-1] += 1
        if tag not in VOID_ELEMENTS:  # HTML's void elements have no end tag; SVG's all have one in the dump
            self.stack.append((tag, classes, chart))

    def handle_endtag(self, tag: str) -> None:
        if any(open_tag == tag for open_tag, _, _ in self.stack):
            while self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1][0] == "text" and self.stack[-1][2] is not None:
            chart = self.stack[-1][2]
            if any("ytick" in c or "yaxislayer-above" in c for _, classes, _ in self.stack for c in classes):
                self.tick_texts.setdefault(chart, []).append(data)
            if any("xtick" in c or "xaxislayer-above" in c for _, classes, _ in self.stack for c in classes):
                self.x_tick_texts.setdefault(chart, []).append(data)
            if "gtitle" in self.stack[-1][1]:
                self.titles[chart] = self.titles.get(chart, "") + data


def parse_dom(dom: str) -> PlotlyDom:
    parser = PlotlyDom()
    parser.feed(dom)
    return parser


def assert_offline(page: str) -> None:
    """Nothing on the page is fetched: no script, stylesheet or image from a URL."""
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=[\"']?https?:", page)
    assert not re.search(r"<img[^>]*\bsrc=[\"']?https?:", page)
    assert page.count("<script") >= 1  # plotly's own code, inlined


# --- the sample job restarted from a checkpoint, through the library --------------------------------------------


@pytest.fixture(scope="module")
def restart_page(tmp_path_factory) -> tuple[dict, Path]:
    with rollup.open_store([str(RESTART)], use_cache=False) as store:
        report = rollup.build_report(store)
        payload = rollup.report_json(report)
        checks = check_counts(rollup.check_findings(store).findings)
    path = tmp_path_factory.mktemp("restart") / "report.html"
    path.write_text(report_html(report, checks), encoding="utf-8")
    return payload, path


@pytest.mark.slow
def test_sample_restart_page_is_self_contained_and_names_what_it_shows(restart_page):
    payload, path = restart_page
    page = path.read_text(encoding="utf-8")
    assert_offline(page)
    assert page.startswith("<!DOCTYPE html>")
    for attempt in payload["attempts"]:
        assert html.escape(attempt["run_id"]) in page
    assert f"{100 * payload['total']['goodput']:.1f}%" in page
    assert f"{100 * payload['job']['goodput']:.1f}%" in page
    assert f"{payload['downtime']['wall_s']:.3f}" in page
    assert "orphan-span" in page  # the restart's lost parents: warnings, and counted as such
    assert "0 errors" in page


@pytest.mark.slow
def test_sample_restart_page_renders_a_stacked_bar_per_iteration(restart_page, tmp_path):
    payload, path = restart_page
    drawn = parse_dom(rendered_dom(path, tmp_path))
    assert drawn.main_svgs.get("goodput-iterations", 0) >= 1
    # One bar trace per bucket and one for the unaccounted rest, each with a bar per iteration (6 in the sample).
    assert drawn.bars["goodput-iterations"] == [len(payload["iterations"])] * len(SERIES)
    assert len(payload["iterations"]) == 6
    # The sample's processes hold GPUs (SPEC section 12): a bar per iteration and pool, in each of the five series.
    by_pool = json.loads(invoke(["report", str(RESTART), "--by", "pool", "--format", "json"]).stdout)["iterations"]
    assert len(by_pool) > len(payload["iterations"]) and drawn.main_svgs.get("goodput-gpus", 0) >= 1
    assert drawn.bars["goodput-gpus"] == [len(by_pool)] * len(SERIES)


def test_check_counts_sums_findings_by_rule_errors_first():
    class F:
        def __init__(self, rule: str, severity: str) -> None:
            self.rule, self.severity = rule, severity

    findings = [F("orphan-span", "warning"), F("nested-bucket", "error"), F("orphan-span", "warning")]
    counts = check_counts(findings)
    assert counts == {
        "errors": 1,
        "warnings": 2,
        "rules": {
            "nested-bucket": {"severity": "error", "count": 1},
            "orphan-span": {"severity": "warning", "count": 2},
        },
    }
    assert list(counts["rules"]) == ["nested-bucket", "orphan-span"]
    assert check_counts([]) == {"errors": 0, "warnings": 0, "rules": {}}


def test_number_ranges():
    assert number_ranges([9, 1, 2, 3, 7, 10]) == "1-3, 7, 9-10"
    assert number_ranges([]) == ""


# --- a hand-made trace through the command line ------------------------------------------------------------------


def hand_made(tmp_path: Path) -> Path:
    """Three iterations of 10 s: generation (productive, the hostile name) 1-5, logprob (overhead) 5-8, the rest
    unaccounted; iteration 2 also loses 8-9 to a failed trajectory (wasted)."""
    spans = []
    for i in (1, 2, 3):
        base = 10.0 * (i - 1)
        spans += [
            step(f"step{i}", i, base, base + 10),
            S(f"gen{i}", HOSTILE, base + 1, base + 5, parent=f"step{i}", bucket="productive", group="generation"),
            S(f"lp{i}", "rl.grpo.logprob", base + 5, base + 8, parent=f"step{i}", bucket="overhead", group="logprob"),
        ]
    spans.append(S("fail2", "rl.wasted.failed_trajectory", 18, 19, parent="step2", bucket="wasted"))
    return write_trace(tmp_path / "run.trace", spans)


@pytest.mark.slow
def test_cli_writes_the_page_with_its_extension_and_escapes_span_names(tmp_path):
    trace = hand_made(tmp_path)
    out = tmp_path / "report.html"
    result = invoke(["report", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert_offline(page)
    assert "window.PWNED=1</script>" not in page  # neither in the tables nor in plotly's JSON
    assert html.escape(HOSTILE, quote=False) in page  # the names table shows it, escaped
    assert "<b>gen</b>" not in page.split("<body>", 1)[1].split("<script", 1)[0]
    goodput = 3 * (5.0 - 1.0) / (3 * 10.0)  # 4 s of generation in each 10 s window
    assert f"<b>{100 * goodput:.1f}%</b> goodput over 3 iterations (30.000 s of wall clock)" in page


@pytest.mark.slow
def test_cli_page_renders_bars_and_the_name_breakdown_as_text(tmp_path):
    trace = hand_made(tmp_path)
    out = tmp_path / "report.html"
    assert invoke(["report", str(trace), "--format", "html", "--output", str(out)]).exit_code == 0
    dom = rendered_dom(out, tmp_path)
    drawn = parse_dom(dom)
    assert drawn.bars["goodput-iterations"] == [3] * len(SERIES)  # three iterations, a bar each per series
    # The breakdown: one bar trace per bucket with time (productive, overhead, wasted), a bar per name in it.
    assert drawn.bars["goodput-names"] == [1, 1, 1]
    assert HOSTILE in drawn.tick_texts["goodput-names"]  # drawn as the literal name, not as markup
    # What the steps waited on (SPEC 14): generation 4 s, logprob 3 s, the failed trajectory 1 s of 30 s on the path.
    assert drawn.bars["goodput-critical"] == [1, 1, 1]
    assert set(drawn.tick_texts["goodput-critical"]) == {HOSTILE, "rl.grpo.logprob", "rl.wasted.failed_trajectory"}
    assert "40%" in drawn.x_tick_texts["goodput-critical"]  # the axis is the share of the path, in percent
    page = out.read_text(encoding="utf-8")
    # one process, one phase after the other: 10% off the 4 s of generation in a 10 s step saves 0.4 s of it
    lead = (f"speed up first: {HOSTILE} (productive): 10% off it saves 0.400 s a step (median); 4.000 s a step on "
            "the path, 40.0%")  # fmt: skip
    assert html.escape(lead) in page
    assert "<script>window.PWNED" not in dom  # no script element was made of it


@pytest.mark.slow
def test_cli_html_to_stdout_is_the_same_page(tmp_path):
    trace = hand_made(tmp_path)
    out = tmp_path / "report.html"
    assert invoke(["report", str(trace), "-o", str(out)]).exit_code == 0
    result = invoke(["report", str(trace), "--format", "html"])
    assert result.exit_code == 0, result.output
    assert result.stdout == out.read_text(encoding="utf-8")  # fixed div ids: the same report gives the same page


@pytest.mark.slow
def test_page_without_iterations_says_so(tmp_path):
    trace = write_trace(tmp_path / "run.trace", [S("x", "rl.startup", 0, 1)])
    out = tmp_path / "report.html"
    result = invoke(["report", str(trace), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "No iteration windows in these traces." in page
    assert 'id="goodput-iterations"' not in page


@pytest.mark.slow
def test_by_process_page_draws_one_chart_per_process_with_its_name_and_the_iterations(tmp_path):
    """A chart per process, titled with its whole name, iterations on its axis, on one scale of seconds: names are
    not cut, and no goodput line zigzags from one process to another."""
    spans = [step(f"step{i}", i, 10 * (i - 1), 10 * i) for i in (1, 2, 3)]
    spans += [S(f"a{i}", "rl.grpo.generation", 10 * i - 9, 10 * i - 6, parent=f"step{i}", bucket="productive",
                process="GenerationWorker-a") for i in (1, 2, 3)]  # fmt: skip
    spans += [S("b", "rl.grpo.generation", 12, 16, parent="step2", bucket="productive", process="worker-<b>")]
    trace = write_trace(tmp_path / "run.trace", spans)
    out = tmp_path / "report.html"
    assert invoke(["report", str(trace), "--by", "process", "-o", str(out)]).exit_code == 0
    page = out.read_text(encoding="utf-8")
    payload = json.loads(invoke(["report", str(trace), "--by", "process", "-f", "json"]).stdout)
    rows = {}
    for item in payload["iterations"]:
        rows.setdefault(item["process"], []).append(item["iteration"])
    assert rows == {"GenerationWorker-a": [1, 2, 3], "worker-<b>": [2]}
    assert "worker-&lt;b&gt;" in page and "worker-<b>" not in page.split("<body>", 1)[1].split("<script", 1)[0]
    assert "<h2>By process</h2>" in page
    drawn = parse_dom(rendered_dom(out, tmp_path))
    assert drawn.bars == {"goodput-iterations-0": [3] * len(SERIES), "goodput-iterations-1": [1] * len(SERIES),
                          "goodput-critical": [1]}  # fmt: skip
    assert drawn.titles == {"goodput-iterations-0": "GenerationWorker-a", "goodput-iterations-1": "worker-<b>"}
    for chart in drawn.titles:  # every chart shows the same iterations, each by its number
        assert drawn.x_tick_texts[chart] == ["1", "2", "3"]
        assert drawn.tick_texts[chart] == drawn.tick_texts["goodput-iterations-0"]  # one scale of seconds
