"""Process identity (SPEC section 1) on traces as NeMo-RL's nemo-lens writes them: shared instance ids, no groups."""

from __future__ import annotations

import json

import duckdb
import pytest

from conftest import invoke
from rollup.read.values import host_pid, host_pid_sql, process_key, process_key_sql
from tracebuild import S, write_trace

RUN = "grpo-20261130-abc123"
HOST = "gpu-node-7"


def nemo_lens(rank: int, pid: int) -> dict:
    """A nemo-lens resource: `<run id>-rank<N>` is shared by the driver and the rank-0 worker of every group."""
    return {
        "service.name": "nemo-rl",
        "service.instance.id": f"{RUN}-rank{rank}",
        "host.name": HOST,
        "process.pid": pid,
        "nemo.run.id": RUN,
        "dl.rank": rank,
        "dl.world_size": 2,
    }


RESOURCES = {"driver": nemo_lens(0, 100), "policy0": nemo_lens(0, 200), "policy1": nemo_lens(1, 300)}


def nemo_lens_trace() -> list[S]:
    """Step 1 [0, 10) s on the driver; `rl.grpo.generation` concurrently on the driver's rank-0 policy worker and
    on the driver itself, as two processes that share the instance id; no `rl.span_group` anywhere."""
    return [
        S("step1", "rl.grpo.step", 0, 10, iteration=1),
        S("gen-driver", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", process="driver"),
        S("gen-rank0", "rl.grpo.generation", 2, 6, parent="step1", bucket="productive", process="policy0"),
        S("gen-rank1", "rl.grpo.generation", 2, 7, parent="step1", bucket="productive", process="policy1"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["framed", "jsonl"])
def test_processes_that_share_an_instance_id_stay_apart(tmp_path, shape):
    path = write_trace(tmp_path / f"run.{shape}", nemo_lens_trace(), shape, resources=RESOURCES)
    for extra in ([], ["--no-cache"]):
        checked = invoke(["check", str(path), "--format", "json", *extra])
        assert checked.exit_code == 0, checked.output  # no false self-overlap between driver and rank-0 worker
        assert json.loads(checked.stdout)["findings"] == []
        by_process = invoke(["report", str(path), "--by", "process", "--format", "json", *extra])
        assert by_process.exit_code == 0, by_process.output
        rows = json.loads(by_process.stdout)["iterations"]
        assert {row["process"]: row["productive_s"] for row in rows} == {
            f"{RUN}-rank0 [{HOST}:100]": 5.0 - 1.0,
            f"{RUN}-rank0 [{HOST}:200]": 6.0 - 2.0,
            f"{RUN}-rank1": 7.0 - 2.0,  # its name is its own: nothing appended
        }


def test_a_name_shared_in_one_file_is_told_apart_in_the_spans_listing_too(tmp_path):
    path = write_trace(tmp_path / "run.otlp", nemo_lens_trace(), resources=RESOURCES)
    listed = invoke(["spans", str(path), "--iteration", "1", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    generation = [row["process"] for row in json.loads(listed.stdout) if row["name"] == "rl.grpo.generation"]
    assert sorted(generation) == [f"{RUN}-rank0 [{HOST}:100]", f"{RUN}-rank0 [{HOST}:200]", f"{RUN}-rank1"]


def test_without_an_instance_id_a_process_is_shown_as_service_at_host_pid(tmp_path):
    resources = {"w": {"service.name": "learner", "host.name": "node-1", "process.pid": 4242}}
    spans = [S("step1", "rl.grpo.step", 0, 2, iteration=1, process="w")]
    path = write_trace(tmp_path / "run.jsonl", spans, "jsonl", resources=resources)
    result = invoke(["query", str(path), "SELECT process, host_pid, run_id FROM spans"])
    assert result.exit_code == 0, result.output
    assert "learner@node-1:4242" in result.stdout and "node-1:4242" in result.stdout


@pytest.mark.parametrize("shape", ["framed", "jsonl", "json-document"])
def test_a_host_without_a_pid_and_neither_under_one_service_are_two_processes(tmp_path, shape):
    """SPEC 1: the instance id, else the service name, with host and pid whichever are present; so a process with
    only `host.name` and one with neither, both of service `svc`, are told apart (found by a differential fuzz)."""
    resources = {
        "hosted": {"service.name": "svc", "host.name": "node-1"},
        "bare": {"service.name": "svc"},
        "pid-only": {"service.name": "svc", "process.pid": 7},
    }
    spans = [S("step1", "rl.grpo.step", 0, 10, iteration=1, process="hosted")]
    spans += [S(f"g-{p}", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", process=p)
              for p in resources]  # fmt: skip
    path = write_trace(tmp_path / f"run.{shape}", spans, shape, resources=resources)
    for extra in ([], ["--no-cache"]):
        checked = json.loads(invoke(["check", str(path), "--format", "json", *extra]).stdout)
        assert not [f for f in checked["findings"] if f["rule"] == "self-overlap"]  # three processes, no overlap
        rows = json.loads(invoke(["report", str(path), "--by", "process", "--format", "json", *extra]).stdout)
        assert sorted(row["process"] for row in rows["iterations"]) == ["svc", "svc@7", "svc@node-1"]
    shared = {p: {**r, "service.instance.id": "inst"} for p, r in resources.items()}  # one instance id for all
    path = write_trace(tmp_path / f"shared.{shape}", spans, shape, resources=shared)
    rows = json.loads(invoke(["report", str(path), "--by", "process", "--format", "json"]).stdout)["iterations"]
    assert sorted(row["process"] for row in rows) == ["inst [7]", "inst [?]", "inst [node-1]"]


# A host alone whose text is a pid's (digits), or a host's and a pid's (a colon: `node:7`, an IPv6 address), beside
# the process it would be mistaken for: each pair is two processes (SPEC section 1), whatever the text.
LOOKALIKES = {
    "host-digits": {"service.name": "svc", "host.name": "7"},
    "pid": {"service.name": "svc", "process.pid": 7},
    "host-with-colon": {"service.name": "svc", "host.name": "node:7"},
    "host-and-pid": {"service.name": "svc", "host.name": "node", "process.pid": 7},
    "ipv6-host": {"service.name": "svc", "host.name": "fe80::1"},
}


@pytest.mark.parametrize("shape", ["framed", "jsonl", "json-document"])
def test_a_host_alone_is_never_taken_for_a_pid_or_a_host_and_pid(tmp_path, shape):
    spans = [S("step1", "rl.grpo.step", 0, 10, iteration=1, process="pid")]
    spans += [S(f"g-{p}", "rl.grpo.generation", 1, 5, parent="step1", bucket="productive", process=p)
              for p in LOOKALIKES]  # fmt: skip
    path = write_trace(tmp_path / f"run.{shape}", spans, shape, resources=LOOKALIKES)
    for extra in ([], ["--no-cache"]):
        rows = json.loads(invoke(["report", str(path), "--by", "process", "--format", "json", *extra]).stdout)
        assert sorted(row["process"] for row in rows["iterations"]) == [
            "svc@7",  # pid 7 alone
            "svc@7:",  # host 7 alone: an empty pid after it
            "svc@fe80::1:",
            "svc@node:7",  # host node, pid 7
            "svc@node:7:",  # host node:7 alone
        ]
        assert all(row["productive_s"] == 5.0 - 1.0 for row in rows["iterations"])  # none merged with another
    shared = {p: {**r, "service.instance.id": "inst"} for p, r in LOOKALIKES.items()}
    path = write_trace(tmp_path / f"shared.{shape}", spans, shape, resources=shared)
    rows = json.loads(invoke(["report", str(path), "--by", "process", "--format", "json"]).stdout)["iterations"]
    assert sorted(row["process"] for row in rows) == [
        "inst [7:]", "inst [7]", "inst [fe80::1:]", "inst [node:7:]", "inst [node:7]"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "resource",
    [
        *LOOKALIKES.values(),
        {"service.name": "svc", "host.name": "node-1"},
        {"service.name": "svc"},
        {"service.instance.id": "i", "host.name": "12"},
        {"host.name": "", "process.pid": "3"},
        {"host.name": "h\n:x"},
        {"host.name": "٣"},  # a digit, but not an ASCII one: no pid looks like it
        {},
    ],
)
def test_duckdb_tells_processes_apart_exactly_as_python_does(resource):
    """The direct JSON reader's SQL (`process_key_sql`, `host_pid_sql`) against the careful reader's Python."""
    texts = {key: str(value) for key, value in resource.items()}
    attributes = [{"k": key, "v": value} for key, value in texts.items()]

    def value(key: str) -> str:
        return f"list_filter(attrs, lambda e: e.k = '{key}')[-1].v"

    relation = "(SELECT $a::STRUCT(k VARCHAR, v VARCHAR)[] AS attrs)"
    sql = f"SELECT {process_key_sql(value)}, {host_pid_sql(value)} FROM {relation}"
    assert duckdb.connect().execute(sql, {"a": attributes}).fetchone() == (process_key(texts), host_pid(texts))
