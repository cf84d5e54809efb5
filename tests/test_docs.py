"""The pages in docs/ show what goodput really prints and computes.

- docs/cli.md's reference is generated from the commands' `--help` by cog; `cog --check` fails when a help changed
  and the page was not regenerated (`cog -r docs/cli.md`).
- Every ```console block of a page is run: each `$ goodput ...` line through typer's CliRunner (at 200 columns, the
  width of a pipe, or at the block's `columns=N`), `$ echo $?`, `$ cut -c1-N FILE` and `$ python ...` as a shell
  would, in a scratch folder that holds `sample_traces/`; what follows a command is compared with what it printed
  (standard output and error, interleaved as a terminal shows them). A `...` line first or last means the lines
  shown are the last or the first of the output.
- Every timeline picture (a ```text block after `<!-- picture: NAME -->`) is a tiny trace built here; its `=>` lines
  are the figures goodput reports for it, recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.shell
from cli import app

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# What a page's commands may read, beside it in the scratch folder they run in, as in a checkout.
SHIPPED = ("sample_traces", "examples", "docs")
# Pages that show no output: a bare fence there is a file tree or a diagram.
NO_OUTPUT_PAGES = {"architecture.md"}
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```$", re.M | re.S)


def page_text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


# --- the CLI reference ----------------------------------------------------------------------------------------------


def test_the_cli_reference_is_what_the_commands_help_prints():
    env = {**os.environ, "COLUMNS": "100"}
    result = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "docs/cli.md"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, f"run `cog -r docs/cli.md`: {result.stdout}{result.stderr}"
    reference = page_text(DOCS / "cli.md").split("<!-- [[[end]]] -->")[0]
    for command in ("report", "check", "spans", "diff", "timeline", "query", "ingest"):
        assert f"### `goodput {command} --help`" in reference


# --- console blocks -------------------------------------------------------------------------------------------------


@dataclass
class Console:
    page: str
    line: int
    columns: int
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def console_blocks() -> list[Console]:
    blocks = []
    for page in PAGES:
        text = page_text(page)
        for fence in FENCE.finditer(text):
            if fence.group(1) == "console":
                columns = re.search(r"columns=(\d+)", fence.group(2))
                line = text.count("\n", 0, fence.start()) + 1
                blocks.append(Console(page.name, line, int(columns.group(1)) if columns else 200, fence.group(3)))
    return blocks


def steps(block: str) -> list[tuple[str, list[str]]]:
    """The block's commands, each with the lines shown after it."""
    out: list[tuple[str, list[str]]] = []
    for line in block.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"output before any command: {line!r}"
            out[-1][1].append(line)
    return out


def assert_shown(shown: list[str], printed: str, command: str) -> None:
    lines = printed.rstrip("\n").split("\n") if printed.strip("\n") else []
    if shown and shown[-1] == "...":
        assert lines[: len(shown) - 1] == shown[:-1], command
    elif shown and shown[0] == "...":
        assert lines[len(lines) - len(shown) + 1 :] == shown[1:], command
    else:
        assert lines == shown, command


def run_goodput(words: list[str], columns: int, env: dict[str, str], monkeypatch) -> tuple[str, int]:
    monkeypatch.setattr(cli.shell, "terminal_width", lambda: columns)
    result = CliRunner().invoke(app, words, terminal_width=columns, env=env)
    if result.exit_code not in (0, 1, 2):
        raise AssertionError(f"goodput {shlex.join(words)}: exit {result.exit_code}\n{result.output}")
    return result.output, result.exit_code


def run_step(command: str, columns: int, last_code: int, monkeypatch) -> tuple[str, int]:
    words = shlex.split(command)
    env = {}
    while words and re.match(r"^[A-Z_]+=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if words[0] == "goodput":
        return run_goodput(words[1:], columns, env, monkeypatch)
    if words == ["echo", "$?"]:
        return f"{last_code}\n", 0
    if words[0] == "cut" and re.fullmatch(r"-c1-\d+", words[1]):
        width = int(words[1][4:])
        text = Path(words[2]).read_text(encoding="utf-8")
        return "".join(line[:width] + "\n" for line in text.splitlines()), 0
    if words[0] == "python":
        child_env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
        done = subprocess.run(
            [sys.executable, *words[1:]], env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        return done.stdout, done.returncode
    raise AssertionError(f"a console block runs goodput, echo $?, cut -c1-N or python, not: {command}")


@pytest.mark.parametrize("block", console_blocks(), ids=str)
def test_the_console_block_shows_what_the_commands_print(block: Console, tmp_path, monkeypatch):
    for shipped in SHIPPED:
        (tmp_path / shipped).symlink_to(REPO / shipped)
    monkeypatch.chdir(tmp_path)
    code = 0
    for command, shown in steps(block.text):
        printed, code = run_step(command, block.columns, code, monkeypatch)
        assert_shown(shown, printed, f"{block}: {command}")


def test_every_output_on_a_page_is_run_or_a_picture():
    """Output is shown in ```console blocks (run above) or as a picture (recomputed below); a ```text block is one
    of those pictures or the generated --help; and every fence names its language."""
    for page in PAGES:
        text = page_text(page)
        generated = text.split("<!-- [[[cog", 1)[-1] if "[[[cog" in text else ""
        for fence in FENCE.finditer(text):
            where = f"{page.name}:{text.count(chr(10), 0, fence.start()) + 1}"
            assert fence.group(1) or page.name in NO_OUTPUT_PAGES, f"{where}: a fence without a language"
            if fence.group(1) == "text":
                before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
                assert before.startswith("<!-- picture: ") or fence.group(0) in generated, where


# --- the pictures ---------------------------------------------------------------------------------------------------

ORIGIN_NS = 1_700_000_000 * 10**9


@dataclass
class Span:
    label: str
    name: str
    start: float
    end: float
    bucket: str | None = None
    group: str | None = None
    iteration: int | None = None
    parent: str | None = None
    process: str = "driver"
    run: str | None = None


def step(label: str, iteration: int, start: float, end: float, **kw: Any) -> Span:
    return Span(label, "rl.grpo.step", start, end, group="step", iteration=iteration, **kw)


def leaf(label: str, name: str, start: float, end: float, bucket: str, group: str, parent: str, **kw: Any) -> Span:
    return Span(label, name, start, end, bucket=bucket, group=group, parent=parent, **kw)


def hex_id(label: str, length: int) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:length]


def write_trace(path: Path, spans: list[Span]) -> Path:
    """OTLP JSON Lines, one line per process (and attempt); `process.pid` tells the processes apart."""
    by_process: dict[tuple[str, str | None], list[Span]] = {}
    for span in spans:
        by_process.setdefault((span.process, span.run), []).append(span)
    lines = []
    for pid, ((process, run), group) in enumerate(by_process.items(), 1):
        resource = {"service.name": process, "host.name": "vm", "process.pid": pid} | (
            {"goodput.run.id": run} if run else {}
        )
        otlp_spans = []
        for span in group:
            attributes = {"rl.bucket": span.bucket, "rl.span_group": span.group, "rl.iteration": span.iteration}
            otlp_spans.append(
                {"traceId": hex_id("trace", 32), "spanId": hex_id(span.label, 16), "name": span.name,
                 "startTimeUnixNano": str(ORIGIN_NS + round(span.start * 1e9)),
                 "endTimeUnixNano": str(ORIGIN_NS + round(span.end * 1e9)),
                 "attributes": otlp_attributes({k: v for k, v in attributes.items() if v is not None}),
                 **({"parentSpanId": hex_id(span.parent, 16)} if span.parent else {})}
            )  # fmt: skip
        lines.append(
            json.dumps({"resourceSpans": [{"resource": {"attributes": otlp_attributes(resource)},
                                           "scopeSpans": [{"spans": otlp_spans}]}]})
        )  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def otlp_attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"key": key, "value": {"intValue": str(value)} if isinstance(value, int) else {"stringValue": value}}
        for key, value in values.items()
    ]


def attempts_picture() -> list[Span]:
    spans = [Span("a-init", "rl.setup.model_init", 0, 1, group="model_init", run="a")]
    for iteration, start in ((1, 1), (2, 3), (3, 5)):  # attempt a, killed after step 3: its job span is never written
        spans += [
            step(f"a-s{iteration}", iteration, start, start + 2, run="a"),
            leaf(f"a-g{iteration}", "rl.grpo.generation", start, start + 1, "productive", "generation",
                 f"a-s{iteration}", run="a"),
        ]  # fmt: skip
    spans.append(Span("b-job", "rl.grpo.job", 9, 17, group="job", run="b"))
    for iteration, start in ((3, 10), (4, 12), (5, 14)):  # attempt b resumes from step 3
        spans += [
            step(f"b-s{iteration}", iteration, start, start + 2, parent="b-job", run="b"),
            leaf(f"b-g{iteration}", "rl.grpo.generation", start, start + 1, "productive", "generation",
                 f"b-s{iteration}", run="b"),
        ]  # fmt: skip
    return spans


def outliers_picture() -> list[Span]:
    spans, start = [], 0.0
    for n, wall in enumerate([1.0, 1.0, 1.1, 0.9, 1.0, 1.0, 1.1, 0.9, 1.0, 3.0], 1):  # 0.5 s of generation in each
        spans += [
            step(f"s{n}", n, start, start + wall),
            leaf(f"g{n}", "rl.grpo.generation", start, start + 0.5, "productive", "generation", f"s{n}"),
        ]
        start += wall
    return spans


PICTURES: dict[str, list[Span]] = {
    "windows-outside": [
        Span("job", "rl.grpo.job", 0, 12, group="job"),
        Span("init", "rl.setup.model_init", 0, 1, group="model_init", parent="job"),
        step("s1", 1, 1, 5, parent="job"),
        leaf("g1", "rl.grpo.generation", 1, 3, "productive", "generation", "s1"),
        leaf("t1", "rl.grpo.policy_training", 3, 5, "productive", "policy_update", "s1"),
        Span("g2", "rl.grpo.generation", 4, 7, "productive", "generation", 2, "job", process="rollout"),
        step("s2", 2, 6, 10, parent="job"),
        leaf("t2", "rl.grpo.policy_training", 7, 10, "productive", "policy_update", "s2"),
        Span("c2", "rl.grpo.checkpointing", 10, 11, "overhead", "checkpoint", 2, "job"),
    ],
    "precedence": [
        step("s1", 1, 0, 10),
        leaf("p", "rl.grpo.generation", 0, 4, "productive", "generation", "s1"),
        leaf("o", "rl.grpo.logprob", 3, 6, "overhead", "logprob", "s1"),
        leaf("i", "rl.idle.refit_bubble", 5, 7, "idle", "efficiency", "s1"),
        leaf("w", "rl.wasted.failed_trajectory", 8, 10, "wasted", "efficiency", "s1"),
    ],
    "naive-sum": [
        step("s1", 1, 0, 5),
        leaf("g1", "rl.grpo.generation", 0, 4, "productive", "generation", "s1", process="worker-1"),
        leaf("g2", "rl.grpo.generation", 0, 4, "productive", "generation", "s1", process="worker-2"),
        leaf("t", "rl.grpo.policy_training", 4, 5, "productive", "policy_update", "s1"),
        leaf("c", "rl.grpo.checkpointing", 3, 5, "overhead", "checkpoint", "s1"),
    ],
    "by-process": [
        step("s1", 1, 0, 4),
        leaf("g", "rl.grpo.generation", 0, 3, "productive", "generation", "s1", process="rollout"),
        leaf("w", "rl.idle.buffer_starvation", 0, 3, "idle", "efficiency", "s1"),
        leaf("t", "rl.grpo.policy_training", 3, 4, "productive", "policy_update", "s1"),
    ],
    "attempts": attempts_picture(),
    "by-name": [
        step("s1", 1, 0, 4),
        leaf("g", "rl.grpo.generation", 0, 3, "productive", "generation", "s1", process="rollout"),
        leaf("r", "rl.grpo.reward", 2, 4, "productive", "reward", "s1"),
    ],
    "outliers": outliers_picture(),
    "async-step": [
        step("s4", 4, 0, 10),
        leaf("rw", "rl.grpo.reward", 0, 1, "productive", "reward", "s4"),
        Span("lf", "rl.grpo.logprob.fan_out", 1, 3, parent="s4"),
        leaf("lp", "rl.grpo.logprob", 1.25, 3, "overhead", "logprob", "lf", process="trainer"),
        leaf("ad", "rl.grpo.advantage", 3, 3.5, "overhead", "advantage", "s4"),
        Span("tf", "rl.grpo.policy_training.fan_out", 3.5, 8, parent="s4"),
        leaf("tr", "rl.grpo.policy_training", 3.7, 8, "productive", "policy_update", "tf", process="trainer"),
        leaf("rf", "rl.idle.refit_bubble", 8, 10, "idle", "efficiency", "s4"),
        Span("b5", "rl.grpo.generation", 0.5, 7, "productive", "generation", 5, "s4", process="engine"),
    ],
}


def pictures() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page_text(page)
        for marker in re.finditer(r"^<!-- picture: (\S+) -->\n```text\n(.*?)^```$", text, re.M | re.S):
            found.append((marker.group(1), marker.group(2)))
    return found


def figures_of(row: dict[str, Any]) -> dict[str, Any]:
    """A report row's figures under the names the pictures' `=>` lines give them."""
    out: dict[str, Any] = {}
    for key in ("wall", "productive", "overhead", "idle", "wasted", "unaccounted"):
        if f"{key}_s" in row:
            out[key] = row[f"{key}_s"]
    if row.get("goodput") is not None:
        out["goodput"] = row["goodput"]
    for bucket, seconds in row.get("span_seconds", {}).items():
        out[f"span {bucket}"] = seconds
    if "span_seconds" in row and row["wall_s"]:
        out["span/wall"] = sum(row["span_seconds"].values()) / row["wall_s"]
    if "outliers" in row:
        out["outliers"] = ",".join(row["outliers"]) or "none"
    return out


class Reports:
    """The reports of one picture's trace, run once per set of options."""

    def __init__(self, path: Path):
        self.path = path
        self.runs: dict[tuple[str, ...], dict[str, Any]] = {}

    def json(self, *options: str) -> dict[str, Any]:
        if options not in self.runs:
            args = ["report", str(self.path), "--no-cache", "--format", "json", *options]
            result = CliRunner().invoke(app, args, terminal_width=200)
            assert result.exit_code == 0, result.output
            self.runs[options] = json.loads(result.stdout)
        return self.runs[options]

    def figures(self, label: str) -> dict[str, Any]:
        if label.startswith("critical "):  # a phase on `goodput critical`'s paths: its seconds there and saving
            result = CliRunner().invoke(app, ["critical", str(self.path), "--no-cache", "--format", "json"])
            assert result.exit_code == 0, result.output
            names = json.loads(result.stdout)["names"]
            found = [n for n in names if n["name"] == label.split(" ", 1)[1]]
            return {"critical": sum(n["critical_s"] for n in found), "saves": max((n["saves_s"] for n in found),
                                                                                  default=0.0)}  # fmt: skip
        if label in ("total", "outside", "rework", "downtime", "job"):
            return figures_of(self.json()[label])
        found = re.fullmatch(r"(?:(\S+) )?iteration (\d+)(?: with (.+))?", label)
        assert found, f"a picture's row is total, outside, rework, downtime, job or [WHO] iteration N: {label}"
        who, iteration, options = found.group(1), int(found.group(2)), tuple((found.group(3) or "").split())
        if who and who.startswith("rl."):  # a span name: its share of the window
            rows = self.json("--by", "name", *options)["iterations"]
            names = next(row["names"] for row in rows if row["iteration"] == iteration)
            share = next(item for item in names if item["name"] == who)
            return {"wall": share["wall_s"], "span": share["span_s"]}
        if who:  # a process, by its service name
            rows = self.json("--by", "process", *options)["iterations"]
            return figures_of(
                next(row for row in rows if row["iteration"] == iteration and row["process"].split("@")[0] == who)
            )
        return figures_of(next(row for row in self.json(*options)["iterations"] if row["iteration"] == iteration))


def assert_figure(stated: str, actual: Any, where: str) -> None:
    if stated.endswith("%"):
        digits = len(stated.split(".")[1]) - 1 if "." in stated else 0
        assert round(actual * 100, digits) == float(stated[:-1]), where
    elif stated.endswith("x"):
        assert f"{actual:.2f}x" == stated, where
    elif re.fullmatch(r"-?\d+(\.\d+)?", stated):
        assert actual == pytest.approx(float(stated), abs=1e-9), where
    else:
        assert actual == stated, where


@pytest.mark.parametrize(("name", "picture"), pictures(), ids=[name for name, _ in pictures()])
def test_the_picture_shows_the_figures_goodput_reports(name: str, picture: str, tmp_path):
    assert name in PICTURES, f"no trace for the picture {name}: add one to PICTURES"
    reports = Reports(write_trace(tmp_path / f"{name}.jsonl", PICTURES[name]))
    stated = [line[3:] for line in picture.splitlines() if line.startswith("=> ")]
    assert stated, f"the picture {name} states no figures (=> lines)"
    for line in stated:
        label, figures = line.split(": ", 1)
        actual = reports.figures(label)
        for figure in figures.split(", "):
            key, value = figure.rsplit(" ", 1)
            assert key in actual, f"{name}: {label} has no {key} (it has {sorted(actual)})"
            assert_figure(value, actual[key], f"{name}: {label}: {figure} (goodput reports {actual[key]})")


def test_every_picture_is_on_a_page():
    assert sorted(name for name, _ in pictures()) == sorted(PICTURES)


# --- what the prose says ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["report"], ["report", "--by", "name"], ["check"]], ids=" ".join)
def test_the_answer_does_not_depend_on_the_memory_limit(args, monkeypatch):
    """docs/performance.md: `GOODPUT_MEMORY_LIMIT=64MB goodput report --format json` prints the same bytes."""
    monkeypatch.chdir(REPO)
    outputs = []
    for env in ({}, {"GOODPUT_MEMORY_LIMIT": "64MB"}):
        words = [*args, "sample_traces/grpo_restart/", "--format", "json", "--no-cache"]
        result = CliRunner().invoke(app, words, terminal_width=200, env=env)
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1]


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", text)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.M)
    }


@pytest.mark.parametrize("page", [REPO / "README.md", *PAGES], ids=lambda page: page.name)
def test_the_links_lead_to_pages_and_headings_that_exist(page: Path):
    for target, anchor in re.findall(r"\]\(((?!https?:)[^)#\s]*)(?:#([^)\s]+))?\)", page_text(page)):
        linked = (page.parent / target).resolve() if target else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in heading_anchors(page_text(linked)), f"{page.name}: {target}#{anchor}"
