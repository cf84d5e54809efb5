"""`goodput lint` (SPEC section 15): planted sources for every rule and every way of spelling a call, the ignore
comment, files that do not parse, folders and globs, the output shapes and exit codes, and the example job's
planted mistake."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from conftest import invoke

REPO = Path(__file__).resolve().parents[1]

# Each way a module may name the API: (import lines, what comes before a function's name, before a group's).
SPELLINGS = {
    "from-instrument": ("from instrument import RLSpanGroup, managed_span, efficiency_span, umbrella_span", "",
                        "RLSpanGroup."),
    "from-nemo": ("from nemo_rl.telemetry.instrumentation import managed_span, efficiency_span, umbrella_span\n"
                  "from nemo_rl.telemetry.span_groups import RLSpanGroup", "", "RLSpanGroup."),
    "aliases": ("from instrument import RLSpanGroup as G, managed_span as span, umbrella_span as umbrella_span",
                "", "G."),
    "module-alias": ("import instrument as inst", "inst.", "inst.RLSpanGroup."),
    "nemo-module": ("from nemo_rl.telemetry import instrumentation as tel\n"
                    "from nemo_rl.telemetry import span_groups", "tel.", "span_groups.RLSpanGroup."),
    "dotted": ("import nemo_rl.telemetry.instrumentation\nimport instrument.groups",
               "nemo_rl.telemetry.instrumentation.", "instrument.groups.RLSpanGroup."),
}  # fmt: skip


def lint_of(tmp_path: Path, source: str, name: str = "job.py", *extra: str) -> dict:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    result = invoke(["lint", str(path), "--format", "json", *extra])
    assert result.exit_code in (0, 1), result.output
    payload = json.loads(result.stdout)
    assert result.exit_code == (1 if payload["summary"]["errors"] else 0)
    return payload


def rules_at(payload: dict) -> list[tuple[str, int]]:
    return [(f["rule"], f["line"]) for f in payload["findings"]]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_nested_bucket_and_the_group_rules_in_every_spelling(tmp_path, spelling):
    imports, at, groups = SPELLINGS[spelling]
    span = "span" if spelling == "aliases" else "managed_span"
    source = f"""\
{imports}

def step():
    with {at}{span}({groups}GENERATION, "rl.grpo.generation"):
        with {at}{span}("reward", "rl.grpo.reward"):
            pass
    with {at}umbrella_span({groups}LOGPROB, "rl.grpo.logprob"):
        pass
    with {at}{span}({groups}U_ROLLOUT, "rl.grpo.rollout"):
        pass
    with {at}{span}("genration", "rl.grpo.generation"):
        pass
"""
    first = len(imports.splitlines()) + 3  # the line of the first `with`
    payload = lint_of(tmp_path, source)
    assert rules_at(payload) == [
        ("nested-bucket", first + 1), ("leaf-at-umbrella", first + 3), ("umbrella-at-leaf", first + 5),
        ("unknown-group", first + 7),
    ]  # fmt: skip
    messages = [f["message"] for f in payload["findings"]]
    assert "'rl.grpo.reward' (reward) is opened inside 'rl.grpo.generation' (generation)" in messages[0]
    assert "umbrella_span() and RLSpanGroup.U_ROLLOUT" in messages[2] and "did you mean 'generation'?" in messages[3]
    assert [f["severity"] for f in payload["findings"]] == ["error", "error", "warning", "warning"]


def test_nested_bucket_through_with_items_decorators_async_and_one_call_deep(tmp_path):
    payload = lint_of(
        tmp_path,
        """\
        from instrument import RLSpanGroup, efficiency_span, managed_span, trace_fn, umbrella_span


        def several_items():
            with managed_span(RLSpanGroup.LOGPROB, "lp"), efficiency_span("idle/refit_bubble"):  # 5
                pass
            with (
                umbrella_span(RLSpanGroup.U_STEP, "step"),
                managed_span(RLSpanGroup.REWARD, "r"),
                efficiency_span("wasted/failed_trajectory"),  # 10
            ):
                pass


        @trace_fn(RLSpanGroup.POLICY_UPDATE, "train")
        def train():
            with managed_span(RLSpanGroup.CHECKPOINT, "ckpt"):  # 17
                pass


        async def rollout():
            async with managed_span(RLSpanGroup.GENERATION, "gen"):
                score()  # 23
                async with efficiency_span("idle/buffer_starvation"):  # 24
                    pass


        def score():
            with managed_span(RLSpanGroup.REWARD, "r"):
                pass


        class Worker:
            def step(self):
                with managed_span(RLSpanGroup.GENERATION, "gen"):
                    self.score()  # 36
                    def later():  # defined here, run elsewhere: not inside
                        with managed_span(RLSpanGroup.REWARD, "r"):
                            pass
                    yield later

            def score(self):
                with managed_span(RLSpanGroup.REWARD, "r"):
                    pass


        def fine():
            with managed_span(RLSpanGroup.GENERATION, "gen"):
                pass
            with managed_span(RLSpanGroup.REWARD, "r"):  # after, not inside
                pass
            with efficiency_span("init/total"):  # unbucketed: a span over start-up
                with efficiency_span("idle/refit_event_wait"):  # unbucketed: a collector wait
                    with managed_span(RLSpanGroup.GENERATION, "gen"):
                        pass
    """,
    )
    assert rules_at(payload) == [("nested-bucket", line) for line in (5, 10, 17, 23, 24, 36)]
    assert "score() opens 'r' (reward) inside 'gen' (generation)" in payload["findings"][3]["message"]


def test_carriers_dispatched_and_not_across_files(tmp_path):
    (tmp_path / "workers.py").write_text(
        textwrap.dedent("""\
        from nemo_rl.telemetry.instrumentation import accepts_trace_context


        class Worker:
            @accepts_trace_context
            def generate(self, batch):
                return batch

            def refit(self, weights):
                return weights
    """)
    )
    (tmp_path / "loop.py").write_text(
        textwrap.dedent("""\
        import ray
        from nemo_rl.telemetry.instrumentation import dispatch_with_trace_context as dispatch


        def loop(worker):
            ray.get(worker.generate.remote([1]))  # 6: its spans start a trace of their own
            ray.get(dispatch(worker.generate, [1]))
            ray.get(dispatch(worker.refit, [2]))  # 8: refit takes no carrier
            ray.get(worker.refit.remote([2]))  # no carrier to hand over: fine
    """)
    )
    result = invoke(["lint", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1, result.output
    found = [(Path(f["path"]).name, f["rule"], f["line"]) for f in json.loads(result.stdout)["findings"]]
    assert found == [("loop.py", "undispatched-carrier", 6), ("loop.py", "dispatch-undecorated", 8)]


def test_a_carrier_method_called_through_options_is_flagged_as_a_bare_remote_is(tmp_path):
    # `.options(...).remote()` drops the carrier just as `.remote()` does (SPEC section 15): the user's report of
    # workers that wrote nothing came from calls of this shape.
    (tmp_path / "loop.py").write_text(
        textwrap.dedent("""\
        import ray
        from instrument import accepts_trace_context, dispatch_with_trace_context


        @ray.remote
        class Worker:
            @accepts_trace_context
            def generate(self, batch):
                return batch

            def refit(self, weights):
                return weights


        def loop(worker):
            ray.get(worker.generate.options(num_returns=1).remote([1]))  # 16
            ray.get(worker.generate.options(name="a").options(num_returns=1).remote([1]))  # 17: chained
            ray.get(dispatch_with_trace_context(worker.generate.options(num_returns=1), [1]))  # the carrier goes
            ray.get(worker.refit.options(name="r").remote([2]))  # no carrier to hand over: fine
            Worker.options(num_gpus=1).remote()  # an actor, not a method
    """)
    )
    result = invoke(["lint", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["findings"]
    assert [(f["rule"], f["line"]) for f in findings] == [("undispatched-carrier", 16), ("undispatched-carrier", 17)]
    assert (
        "generate accepts a trace context (@accepts_trace_context) but is called with .options(...).remote()"
        in (findings[0]["message"])
    )
    assert "call dispatch_with_trace_context(worker.generate.options(num_returns=1), ...)" in findings[0]["message"]


def test_an_efficiency_span_started_and_never_ended(tmp_path):
    payload = lint_of(
        tmp_path,
        """\
        import instrument


        def wait(queue):
            span = instrument.start_efficiency_span("idle/buffer_starvation")  # 5: never ended
            queue.get()


        def waits_and_ends(queue):
            span = instrument.start_efficiency_span("idle/buffer_starvation")
            try:
                queue.get()
            finally:
                span.end()


        def hands_it_back():
            span = instrument.start_efficiency_span("idle/refit_bubble")
            return span
    """,
    )
    assert rules_at(payload) == [("unended-efficiency-span", 5)]
    assert payload["findings"][0]["severity"] == "warning"


def test_names_not_imported_from_the_instrumentation_are_not_judged(tmp_path):
    payload = lint_of(
        tmp_path,
        """\
        from contextlib import nullcontext as managed_span
        from my_tracing import trace_fn, RLSpanGroup


        def step(group):
            with managed_span("reward", "x"):
                with managed_span("reward", "y"):
                    pass
            import instrument
            with instrument.managed_span(group, "a group in a variable: not read"):
                with instrument.managed_span(group, "b"):
                    pass
    """,
    )
    assert payload["findings"] == [] and payload["summary"] == {"files": 1, "errors": 0, "warnings": 0}


def test_the_ignore_comment_silences_its_rule_on_its_line_only(tmp_path):
    payload = lint_of(
        tmp_path,
        """\
        from instrument import RLSpanGroup, managed_span


        def step():
            with managed_span(RLSpanGroup.GENERATION, "g"):
                with managed_span(RLSpanGroup.REWARD, "r"):  # goodput: ignore[nested-bucket]
                    pass
                with managed_span("rewrd", "r"):  # goodput: ignore[unknown-group, leaf-at-umbrella]
                    pass
                with managed_span(RLSpanGroup.REWARD, "r"):  # goodput: ignore[unknown-group]
                    pass
    """,
    )
    assert rules_at(payload) == [("nested-bucket", 8), ("nested-bucket", 10)]


def test_the_text_is_ruffs_shape_with_a_summary_line(tmp_path):
    path = tmp_path / "job.py"
    path.write_text("from instrument import umbrella_span\n\nwith umbrella_span('reward', 'r'):\n    pass\n")
    result = invoke(["lint", str(path)])
    assert result.exit_code == 1
    first, summary = result.stdout.splitlines()
    assert re.fullmatch(rf"{re.escape(str(path))}:3:6: leaf-at-umbrella umbrella_span\(\) is given .*", first)
    assert summary == "Found 1 error and 0 warnings in 1 file."
    clean = tmp_path / "clean.py"
    clean.write_text("import instrument\n")
    result = invoke(["lint", str(clean), str(tmp_path / "*.py")])
    assert result.exit_code == 1 and result.stdout.splitlines()[-1] == "Found 1 error and 0 warnings in 2 files."
    ok = invoke(["lint", str(clean)])
    assert ok.exit_code == 0 and ok.stdout == "All checks passed! (1 file)\n"
    written = tmp_path / "out.json"
    assert invoke(["lint", str(path), "--format", "json", "--output", str(written)]).exit_code == 1
    payload = json.loads(written.read_text())
    assert set(payload) == {"findings", "summary"}
    assert [set(f) for f in payload["findings"]] == [{"rule", "severity", "path", "line", "col", "message"}]
    assert payload["summary"] == {"files": 1, "errors": 1, "warnings": 0}


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def f(:\n    pass\n", "line 1, column 7: does not parse: invalid syntax"),
        ("x = 1\nif x:\nprint(x)\n", "line 3"),
        (b"x = '\xff'\n", "cannot read it as Python source"),
    ],
)
def test_a_file_that_does_not_parse_is_exit_2_naming_it_and_its_line(tmp_path, source, says):
    path = tmp_path / "broken.py"
    path.write_bytes(source.encode() if isinstance(source, str) else source)
    result = invoke(["lint", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(path) in result.stderr and says in result.stderr, result.stderr


def test_a_path_that_does_not_exist_is_exit_2(tmp_path):
    result = invoke(["lint", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "missing: no such file or folder" in result.stderr
    result = invoke(["lint", str(tmp_path / "nothing-*.py")])
    assert result.exit_code == 2


def test_a_folder_is_read_recursively_leaving_hidden_folders_and_environments_out(tmp_path):
    bad = "from instrument import umbrella_span\numbrella_span('reward', 'r')\n"
    for place in ("a/b/c.py", ".venv/lib/x.py", ".hidden/y.py", "venv/z.py", "a/not_python.txt"):
        (tmp_path / place).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / place).write_text(bad)
    payload = json.loads(invoke(["lint", str(tmp_path), "--format", "json"]).stdout)
    assert [Path(f["path"]).relative_to(tmp_path).as_posix() for f in payload["findings"]] == ["a/b/c.py"]
    assert payload["summary"]["files"] == 1


def test_the_examples_are_clean_and_the_buggy_modes_planted_mistake_is_found_without_its_ignore(tmp_path):
    clean = invoke(["lint", str(REPO / "examples")])
    assert clean.exit_code == 0, clean.output
    workers = REPO / "examples" / "grpo_toy" / "workers.py"
    text = workers.read_text()
    planted = [n for n, line in enumerate(text.splitlines(), 1) if "goodput: ignore[nested-bucket]" in line]
    assert len(planted) == 2  # the sync worker's and the streaming worker's
    (tmp_path / "workers.py").write_text(re.sub(r"  # goodput: ignore\[nested-bucket\].*", "", text))
    found = json.loads(invoke(["lint", str(tmp_path), "--format", "json"]).stdout)["findings"]
    assert [(f["rule"], f["line"]) for f in found] == [("nested-bucket", line) for line in planted]
    assert all("_score_inline() opens 'rl.grpo.reward' (reward) inside 'rl.grpo.generation'" in f["message"]
               for f in found)  # fmt: skip


# SPEC section 15's table of rules and severities, as the contract states it (a copy: the repository reads nothing
# outside itself). A rule added to the contract is added here and to `rollup.lint.rules.SEVERITY` alike.
SPEC_RULES = {
    "nested-bucket": "error",
    "leaf-at-umbrella": "error",
    "umbrella-at-leaf": "warning",
    "undispatched-carrier": "error",
    "dispatch-undecorated": "warning",
    "unended-efficiency-span": "warning",
    "unknown-group": "warning",
}


def test_the_rules_and_severities_are_specs():
    from rollup.lint.rules import SEVERITY

    assert SEVERITY == SPEC_RULES
