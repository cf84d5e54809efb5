"""Run ids (SPEC section 7) and what a carrier hands on (SPEC section 2), as a job and its workers see them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from urllib.parse import unquote

import pytest
import ray

import instrument
from conftest import read_framed_records, read_json_lines_records
from instrument import RLSpanGroup, accepts_trace_context, dispatch_with_trace_context, managed_span, umbrella_span
from instrument.wire import ENV_RUN_ID, RESOURCE_RUN_ID


def resource_of(path) -> dict:
    (record, *_) = read_framed_records(path)
    attributes = record.resource_spans[0].resource.attributes
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in attributes}


def write_one_span(**configure_args) -> dict:
    instrument.configure(exporter="otlp-file", span_groups="all", **configure_args)
    with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.job"):
        pass
    instrument.shutdown()
    (path,) = configure_args["path"].iterdir()
    return resource_of(path)


def test_an_explicit_run_id_names_the_attempt_and_reaches_child_processes(tmp_path):
    resource = write_one_span(service_name="driver", path=tmp_path / "a", run_id="grpo-attempt-2")
    assert resource[RESOURCE_RUN_ID] == "grpo-attempt-2"
    assert os.environ[ENV_RUN_ID] == "grpo-attempt-2"


@pytest.mark.slow
def test_without_one_a_run_id_is_made_once_and_every_process_started_afterwards_shares_it(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_RUN_ID, raising=False)
    resource = write_one_span(service_name="driver", path=tmp_path / "a")
    made = resource[RESOURCE_RUN_ID]
    assert re.fullmatch(r"driver-\d{8}T\d{6}-[0-9a-f]{6}", made), made
    again = write_one_span(service_name="driver", path=tmp_path / "b")  # configure() again: the same attempt
    assert again[RESOURCE_RUN_ID] == made
    child = textwrap.dedent(
        f"""
        import instrument
        from instrument import RLSpanGroup, umbrella_span
        instrument.configure(service_name="worker", exporter="json-file", path={str(tmp_path / "c")!r})
        with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.worker_job"):
            pass
        """
    )
    subprocess.run([sys.executable, "-c", child], env=dict(os.environ), check=True, timeout=60)
    (path,) = (tmp_path / "c").iterdir()
    (record,) = read_json_lines_records(path)
    attributes = {kv["key"]: kv["value"] for kv in record["resourceSpans"][0]["resource"]["attributes"]}
    assert attributes[RESOURCE_RUN_ID] == {"stringValue": made}


def test_a_carrier_hands_on_the_run_id_and_the_set_up(tmp_path):
    instrument.configure(
        service_name="driver", exporter="json-file", path=tmp_path, span_groups="per_step", run_id="r9"
    )
    with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
        carrier = instrument.current_trace_carrier()
    handed = dict(unquote(item).split("=", 1) for item in carrier["baggage"].split(","))
    assert handed["goodput.run_id"] == "r9"
    assert handed["goodput.span_groups"] == "per_step"
    assert handed["goodput.exporter"] == "json-file"
    assert handed["goodput.trace_path"] == str(tmp_path)


@ray.remote
class Learner:
    """Calls configure() bare, as workers do: named for its class, not for the tool."""

    def __init__(self):
        instrument.configure()

    def service(self):
        from instrument.provider import STATE

        return STATE.provider.resource.attributes["service.name"]


@ray.remote
class Critic:
    """Never calls configure(): set up from the first carrier it receives."""

    @accepts_trace_context
    def score(self):
        with managed_span(RLSpanGroup.REWARD, "rl.toy.reward"):
            pass
        from instrument.provider import STATE

        resource = STATE.provider.resource.attributes
        return resource["service.name"], resource[RESOURCE_RUN_ID]


@pytest.mark.slow
@pytest.mark.ray
def test_a_bare_configure_in_an_actor_is_named_for_its_class(ray_cluster):
    learner = Learner.remote()
    try:
        assert ray.get(learner.service.remote()) == "Learner"
    finally:
        ray.kill(learner)


@pytest.mark.slow
@pytest.mark.ray
def test_an_actor_that_never_configures_is_set_up_like_its_caller_and_its_spans_are_written_by_the_return(
    ray_cluster, tmp_path
):
    instrument.configure(service_name="driver", exporter="otlp-file", path=tmp_path, span_groups="all", run_id="r7")
    critic = Critic.remote()
    try:
        with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
            service, run_id = ray.get(dispatch_with_trace_context(critic.score))
    finally:
        ray.kill(critic)  # no atexit handler runs: what is in the file was written before the call returned
    assert (service, run_id) == ("Critic", "r7")
    (critic_file,) = [name for name in os.listdir(tmp_path) if name.startswith("Critic-")]
    spans = [
        span.name
        for record in read_framed_records(tmp_path / critic_file)
        for resource_spans in record.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]
    assert spans == ["rl.toy.reward"]


@ray.remote
class Generator:
    """Ends a span, works without the GIL, and looks at its own trace file while the call still runs."""

    @accepts_trace_context
    def generate(self):
        import time

        from instrument.provider import STATE

        with managed_span(RLSpanGroup.GENERATION, "rl.toy.generation"):
            pass
        deadline = time.monotonic() + 10  # GIL-free work: the writer thread writes the span meanwhile
        path = STATE.processor.span_exporter.file_path  # set as the exporter opens its file
        while not (path is not None and path.exists() and path.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.05)  # a busy machine may take longer than a kernel; the call has not returned either way
            path = STATE.processor.span_exporter.file_path
        return str(path) if path is not None else None, path.stat().st_size if path is not None else 0


@pytest.mark.slow
@pytest.mark.ray
def test_spans_of_a_dispatched_call_are_written_while_it_works_not_only_as_it_returns(ray_cluster, tmp_path):
    instrument.configure(service_name="driver", exporter="otlp-file", path=tmp_path, span_groups="all", run_id="r8")
    generator = Generator.remote()
    try:
        with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
            path, size_during_the_call = ray.get(dispatch_with_trace_context(generator.generate))
    finally:
        ray.kill(generator)
    assert path is not None and size_during_the_call > 0
    assert [span.name for record in read_framed_records(path) for rs in record.resource_spans
            for ss in rs.scope_spans for span in ss.spans] == ["rl.toy.generation"]  # fmt: skip
