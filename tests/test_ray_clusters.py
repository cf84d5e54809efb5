"""Workers as real clusters run them (SPEC section 2): an actor that never calls configure(), and a driver that ends
the way jobs end (os._exit right after the last ray.get; ray.kill then ray.shutdown), on a cluster the job starts
itself and on one started before it with `ray start --head`, where no variable of the driver reaches the workers;
there, too, an actor records the GPUs Ray assigned it (SPEC section 12) and the driver none. And actors whose
decorated method is called with no carrier (`.options(...).remote()`, a bare `.remote()`): recorded, GPUs and all,
where the job started the cluster; said once in each worker's log, and the job unharmed, where it did not.

Each driver is a real process running a real script; the trace files it leaves are read back with goodput itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import invoke, read_json_lines_records
from instrument.wire import RESOURCE_FLEET, RESOURCE_GPU_IDS, RESOURCE_GPUS

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DRIVER = textwrap.dedent(
    """
    import os, sys, time
    import ray
    import instrument
    from instrument import (
        RLSpanGroup, accepts_trace_context, dispatch_with_trace_context, iteration_scope, managed_span, umbrella_span,
    )

    ending, address, trace_dir, run_id = sys.argv[1:5]
    instrument.configure(service_name="driver", span_groups="all", exporter="otlp-file", path=trace_dir, run_id=run_id)
    if address == "start":
        ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR")
    else:
        ray.init(address=address, logging_level="ERROR")


    @ray.remote
    class Rollout:  # never calls instrument.configure()
        @accepts_trace_context
        def generate(self, step):
            for _ in range(3):
                with managed_span(RLSpanGroup.GENERATION, "rl.toy.generation"):
                    time.sleep(0.005)
            return step


    actor = Rollout.remote()
    with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.job"):
        for step in range(1, 4):
            with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
                ray.get(dispatch_with_trace_context(actor.generate, step))
    instrument.shutdown()  # the driver's own spans; the worker's must already be in its file
    if ending == "kill":
        ray.kill(actor)
        ray.shutdown()
    os._exit(0)
    """
)


def run_script(tmp_path: Path, name: str, text: str, *args: str, env: dict[str, str]) -> str:
    """Write `text` to `tmp_path/name` and run it with `args` to its end, which must be exit 0; its stdout."""
    script = tmp_path / name
    script.write_text(text)
    result = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def run_driver(tmp_path: Path, ending: str, address: str, env: dict[str, str]) -> tuple[Path, str]:
    """Run the driver script to its end; the folder of traces it left, and its run id."""
    traces = tmp_path / "traces"
    run_id = f"test-{ending}-{os.getpid()}-{time.monotonic_ns()}"
    run_script(tmp_path, "driver.py", DRIVER, ending, address, str(traces), run_id, env=env)
    return traces, run_id


def spans_of(traces: Path) -> list[dict]:
    result = invoke(
        [
            "query", str(traces), "--format", "json",
            "SELECT span_id, parent_span_id, trace_id, name, service, run_id, iteration FROM spans",
        ]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_every_worker_span_arrived(traces: Path, run_id: str) -> None:
    spans = spans_of(traces)
    steps = {row["span_id"]: row for row in spans if row["name"] == "rl.toy.step"}
    generation = [row for row in spans if row["name"] == "rl.toy.generation"]
    assert len(steps) == 3
    assert len(generation) == 3 * 3  # three steps, three spans each: none lost at the driver's exit or the kill
    for row in generation:
        step = steps[row["parent_span_id"]]  # under the driver's step ...
        assert (row["trace_id"], row["iteration"]) == (step["trace_id"], step["iteration"])
        assert row["service"] == "Rollout"  # ... named for the actor's class ...
        assert row["run_id"] == run_id  # ... in the driver's attempt
    assert {row["run_id"] for row in spans} == {run_id}
    worker_files = [path.name for path in traces.iterdir() if path.name.startswith("Rollout-")]
    assert len(worker_files) == 1, sorted(path.name for path in traces.iterdir())
    report = invoke(["report", str(traces), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert all(row["productive_s"] > 0 for row in json.loads(report.stdout)["iterations"])


def clean_environment() -> dict[str, str]:
    """The environment with no GOODPUT_* variable: nothing of a driver's choice may reach a worker through it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GOODPUT_")}
    env["RAY_AUTH_MODE"] = "disabled"
    env.pop("RAY_ADDRESS", None)
    return env


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_a_cluster_the_job_starts_loses_no_worker_span(tmp_path, ending):
    traces, run_id = run_driver(tmp_path, ending, "start", clean_environment())
    assert_every_worker_span_arrived(traces, run_id)


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclasses.dataclass(frozen=True)
class StartedCluster:
    address: str
    temp_dir: Path  # Ray's logs are under it: session_latest/logs/


@pytest.fixture(scope="module")
def started_cluster():
    """A cluster started before the job, as `ray start --head` starts one: its own temp dir and ports, in a session
    of its own, ended by its process group (never `ray stop`, which would stop every Ray process on the machine)."""
    ports = gcs, node_manager, object_manager, client = _free_ports(4)
    # The workers' ports: a range below the kernel's ephemeral ones (where the four above come from) and clear of
    # them, or Ray refuses to start ("a port number ... that is used by other components").
    low = _free_ports(1)[0] % 15_000 + 10_000
    while any(low <= port <= low + 200 for port in ports):
        low = (low + 250) % 15_000 + 10_000
    temp_dir = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    command = [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--num-cpus=2", "--num-gpus=4",
        f"--port={gcs}", f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}",
        f"--ray-client-server-port={client}", f"--min-worker-port={low}", f"--max-worker-port={low + 200}",
        "--include-dashboard=false", f"--temp-dir={temp_dir}", "--node-ip-address=127.0.0.1",
    ]  # fmt: skip
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 - closed when the fixture ends
    process = subprocess.Popen(command, env=clean_environment(), stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    address = f"127.0.0.1:{gcs}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (Path(temp_dir) / "ray-start.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", gcs), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "ray start did not come up"
                time.sleep(0.5)
        time.sleep(2)  # the raylet registers after the GCS listens
        yield StartedCluster(address, Path(temp_dir))
    finally:
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)  # every process of its session: raylet, GCS, workers
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


@pytest.mark.parametrize("ending", ["exit", "kill"])
def test_a_cluster_started_before_the_job_loses_no_worker_span(tmp_path, started_cluster, ending):
    traces, run_id = run_driver(tmp_path, ending, started_cluster.address, clean_environment())
    assert_every_worker_span_arrived(traces, run_id)


GPU_DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import ray
    import instrument
    from instrument import RLSpanGroup, accepts_trace_context, dispatch_with_trace_context, managed_span, umbrella_span

    address, trace_dir = sys.argv[1:3]
    instrument.configure(service_name="driver", span_groups="all", exporter="json-file", path=trace_dir)
    ray.init(address=address, logging_level="ERROR")


    @ray.remote(num_cpus=0, num_gpus=1)
    class Policy:  # never calls instrument.configure()
        @accepts_trace_context
        def train(self):
            with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.toy.policy_update"):
                pass
            return os.getpid(), sorted(map(str, ray.get_gpu_ids()), key=int)


    actor = Policy.remote()
    with umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
        pid, gpus = ray.get(dispatch_with_trace_context(actor.train))
    instrument.shutdown()
    print(json.dumps({"driver": os.getpid(), "actor": pid, "gpus": gpus}))
    os._exit(0)
    """
)


def held_in(traces: Path, pid: int) -> dict:
    """What the file of process `pid` says it holds: its GPU and fleet resource attributes, as OTLP JSON spells them."""
    (path,) = [path for path in traces.iterdir() if path.name.endswith(f"-{pid}.jsonl")]
    (record, *_) = read_json_lines_records(path)
    holding_keys = (RESOURCE_GPU_IDS, RESOURCE_GPUS, RESOURCE_FLEET)
    attributes = record["resourceSpans"][0]["resource"]["attributes"]
    return {kv["key"]: kv["value"] for kv in attributes if kv["key"] in holding_keys}


def test_an_actor_on_a_cluster_started_before_the_job_records_the_gpus_ray_assigned_it(tmp_path, started_cluster):
    traces = tmp_path / "traces"
    printed = run_script(tmp_path, "gpu_driver.py", GPU_DRIVER, started_cluster.address, str(traces),
                         env=clean_environment())  # fmt: skip
    told = json.loads(printed.splitlines()[-1])
    assert len(told["gpus"]) == 1  # one of the cluster's four
    assert held_in(traces, told["actor"]) == {
        RESOURCE_GPU_IDS: {"arrayValue": {"values": [{"stringValue": gpu} for gpu in told["gpus"]]}}
    }
    assert held_in(traces, told["driver"]) == {}  # told nothing: Ray's ids are the workers'


CARRIERLESS_DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    import ray
    import instrument
    from instrument import RLSpanGroup, accepts_trace_context, iteration_scope, managed_span, umbrella_span

    address, trace_dir, temp_dir = sys.argv[1:4]
    instrument.configure(service_name="driver", span_groups="all", exporter="otlp-file", path=trace_dir)
    if address == "start":
        ray.init(num_cpus=1, num_gpus=4, include_dashboard=False, logging_level="ERROR", _temp_dir=temp_dir)
    else:
        ray.init(address=address, logging_level="ERROR")


    @ray.remote(num_cpus=0, num_gpus=1)
    class Policy:  # never calls instrument.configure(), and no call hands it a carrier
        @accepts_trace_context
        def train(self, step):
            with managed_span(RLSpanGroup.POLICY_UPDATE, "rl.toy.policy_update"):
                time.sleep(0.01)
            return os.getpid(), step


    policies = [Policy.remote() for _ in range(4)]
    answers = []
    with umbrella_span(RLSpanGroup.U_JOB, "rl.toy.job"):
        for step in range(1, 3):
            with iteration_scope(step), umbrella_span(RLSpanGroup.U_STEP, "rl.toy.step"):
                refs = [policy.train.options(name="train").remote(step) for policy in policies[:2]]  # the issue's
                refs += [policy.train.remote(step) for policy in policies[2:]]  # and the bare call
                answers += ray.get(refs)
    instrument.shutdown()
    print(json.dumps({"workers": sorted({pid for pid, _ in answers}), "steps": sorted(step for _, step in answers)}))
    os._exit(0)  # as jobs end: the workers' spans must be in their files already
    """
)


def run_carrierless_driver(tmp_path: Path, address: str) -> tuple[Path, list[int]]:
    """Run the driver whose actors get no carrier; the folder of traces it left and its workers' pids. The job
    itself must come through whole: exit 0, every step of every worker answered."""
    traces = tmp_path / "traces"
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    printed = run_script(tmp_path, "carrierless_driver.py", CARRIERLESS_DRIVER, address, str(traces), temp_dir,
                         env=clean_environment())  # fmt: skip
    told = json.loads(printed.splitlines()[-1])
    assert len(told["workers"]) == 4 and told["steps"] == [1, 1, 1, 1, 2, 2, 2, 2]
    return traces, told["workers"]


def test_workers_called_without_a_carrier_on_a_cluster_the_job_starts_are_recorded_gpus_and_all(tmp_path):
    # ray.init() after configure(): the workers inherit the driver's GOODPUT_* variables, so they record from those.
    traces, workers = run_carrierless_driver(tmp_path, "start")
    spans = spans_of(traces)
    trained = [row for row in spans if row["name"] == "rl.toy.policy_update"]
    assert len(trained) == 4 * 2
    assert all(row["service"] == "Policy" and row["parent_span_id"] is None for row in trained)  # roots of their own
    assert {row["run_id"] for row in spans} == {row["run_id"] for row in spans if row["service"] == "driver"}
    assert sorted(path.name for path in traces.iterdir() if path.name.startswith("Policy-")) == sorted(
        f"Policy-{socket.gethostname()}-{pid}.otlp" for pid in workers
    )
    report = invoke(["report", str(traces), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["gpus"]["count"] == 4  # each worker's ray.get_gpu_ids(), one GPU apiece


def test_workers_called_without_a_carrier_on_a_cluster_started_before_the_job_say_so_once(tmp_path, started_cluster):
    # No variable of the driver reaches these workers and no carrier comes: nothing can be recorded, and each says so.
    traces, workers = run_carrierless_driver(tmp_path, started_cluster.address)
    assert [path.name for path in traces.iterdir() if not path.name.startswith("driver-")] == []
    logs = started_cluster.temp_dir / "session_latest" / "logs"
    for pid in workers:
        (err,) = logs.glob(f"worker-*-{pid}.err")
        said = [line for line in err.read_text().splitlines() if "goodput" in line]
        assert len(said) == 1, said  # once, though the worker was called twice
        assert "Policy.train was called with no goodput trace carrier" in said[0]
        assert "nothing of this worker is recorded" in said[0]
