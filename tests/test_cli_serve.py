"""`goodput watch --serve`'s Prometheus endpoint (SPEC section 13, "Metrics out"): the latest refresh's gauges at
`/metrics`, scraped over real HTTP on the loopback interface and read back with prometheus_client's own parser. Each
refresh is a real watcher's of the sample run, some of its figures replaced by hand."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from cli.serve import MetricsServer, parse_serve_address
from conftest import invoke
from rollup import InputError, OptionError
from rollup.accounting import Figures
from rollup.report import Recent
from rollup.watch import LiveRun, LiveState

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "grpo_sync"
FAMILIES = {"goodput_wall_seconds", "goodput_ratio", "goodput_gpu_ratio", "goodput_iteration", "goodput_spans"}
WALL_PARTS = ["productive", "overhead", "idle", "wasted", "unaccounted"]
SPANS_READ = 5120


@pytest.fixture(scope="module")
def report() -> dict:
    """The sample run's `report --format json`, whose iterations and total a watch refresh carries."""
    result = invoke(["report", str(SAMPLE), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def recent_stretch(end_ns: int, minutes: int, productive_s: int, overhead_s: int) -> Recent:
    """A `recent` stretch of the last `minutes` of trace time: idle 3 s, wasted 1.5 s, the rest unaccounted."""
    wall_ns, s = minutes * 60 * 10**9, 10**9
    buckets = {"productive": productive_s * s, "overhead": overhead_s * s, "idle": 3 * s, "wasted": 3 * s // 2}
    return Recent(end_ns - wall_ns, end_ns, Figures(wall_ns, buckets, wall_ns - sum(buckets.values())))


@pytest.fixture(scope="module")
def watched() -> LiveState:
    """A watcher's refresh of the sample run."""
    run = LiveRun([SAMPLE])
    try:
        return run.refresh()
    finally:
        run.close()


@pytest.fixture
def state(watched) -> LiveState:
    """One refresh: the last rows, the total, the 1- and 5-minute stretches, and a 15-minute one with nothing read
    (None); no run id."""
    end_ns = watched.rows[-1].row.end_ns
    recent = {"1m": recent_stretch(end_ns, 1, 42, 9), "5m": recent_stretch(end_ns, 5, 195, 60), "15m": None}
    return replace(watched, spans=SPANS_READ, files=4, rows=watched.rows[-3:], recent=recent, run_id=None)


@pytest.fixture
def serve():
    """Make `MetricsServer(host, port)` (port 0: one the system picks) and close each one after the test."""
    made: list[MetricsServer] = []

    def start(host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        made.append(MetricsServer(host, port))
        return made[-1]

    yield start
    for server in made:
        server.close()


def url(server: MetricsServer, path: str = "/metrics") -> str:
    host, port = server.address
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


def fetch(server: MetricsServer, path: str = "/metrics", method: str = "GET") -> tuple[int, dict[str, str], str]:
    """The status, headers and body of one request."""
    request = urllib.request.Request(url(server, path), method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read().decode()


def scrape(server: MetricsServer, path: str = "/metrics") -> str:
    status, headers, body = fetch(server, path)
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE_LATEST
    return body


def parsed(text: str) -> dict:
    """The families of a scrape by name, as Prometheus reads them."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def values(family, label: str | None = None) -> dict:
    """A family's samples: value by the value of `label` (by None for an unlabelled family)."""
    return {None if label is None else sample.labels[label]: sample.value for sample in family.samples}


def raw_exchange(server: MetricsServer, request: bytes) -> bytes:
    """Send `request` as it stands on a socket of our own and read the answer until the server closes."""
    with socket.create_connection(server.address, timeout=60) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_a_refresh_is_served_as_gauges_with_help_and_type(serve, state, report):
    server = serve()
    server.update(state)
    text = scrape(server)
    for name in FAMILIES:
        assert f"# TYPE {name} gauge\n" in text
        assert f"# HELP {name} " in text
    families = parsed(text)
    assert set(families) == FAMILIES
    for family in families.values():
        assert family.type == "gauge"
        assert family.documentation

    total = report["total"]
    wall = values(families["goodput_wall_seconds"], "bucket")
    assert wall == {part: total[f"{part}_s"] for part in WALL_PARTS}
    assert sum(wall.values()) == pytest.approx(total["wall_s"])  # the parts are the whole wall clock
    ratios = values(families["goodput_ratio"], "window")
    assert ratios == {"total": total["goodput"], "1m": 42.0 / 60.0, "5m": 195.0 / 300.0}  # 15m read nothing: no sample
    assert "gpu" in total  # the sample's processes hold GPUs
    assert values(families["goodput_gpu_ratio"]) == {None: total["gpu"]["goodput"]}
    assert values(families["goodput_iteration"]) == {None: report["iterations"][-1]["iteration"]}
    assert values(families["goodput_spans"]) == {None: SPANS_READ}


@pytest.mark.parametrize("run_id", ["grpo-sync-7", None])
def test_every_sample_carries_the_run_id_when_one_is_given(serve, state, run_id):
    server = serve()
    server.update(replace(state, run_id=run_id))
    samples = [sample for family in parsed(scrape(server)).values() for sample in family.samples]
    assert len(samples) == 5 + 3 + 1 + 1 + 1
    for sample in samples:
        assert sample.labels.get("run_id") == run_id


def test_a_null_figure_has_no_sample_rather_than_a_zero(serve, state):
    minute = state.recent["1m"]
    assert minute is not None
    empty_minute = replace(minute, figures=Figures())  # no wall clock to divide
    recent = {"1m": empty_minute, "5m": None, "15m": None}  # the longer stretches: nothing read
    # No complete iteration, no wall clock in the total (so no seconds of it either), no GPUs held.
    unknown = replace(state, rows=(), total=Figures(), gpus=None, recent=recent, run_id="grpo-sync-7")
    server = serve()
    server.update(unknown)
    families = parsed(scrape(server))
    assert set(families) == FAMILIES  # each family is still described
    for name in ("goodput_wall_seconds", "goodput_ratio", "goodput_gpu_ratio", "goodput_iteration"):
        assert families[name].samples == [], name
    assert values(families["goodput_spans"]) == {None: SPANS_READ}  # always known


def test_a_refresh_before_any_span_serves_the_spans_read_alone(serve, tmp_path):
    """A real watcher's first refresh of a folder still empty: 0 spans read, and no other figure (a wall clock of
    0 s by bucket once drew a drop to zero at every restart)."""
    run = LiveRun([tmp_path])
    try:
        nothing = run.refresh()
    finally:
        run.close()
    server = serve()
    server.update(nothing)
    samples = [(f.name, s.value) for f in parsed(scrape(server)).values() for s in f.samples]
    assert samples == [("goodput_spans", 0.0)]


def test_before_the_first_refresh_the_families_have_no_samples_and_an_update_replaces_the_last(serve, state):
    server = serve()
    families = parsed(scrape(server))
    assert set(families) == FAMILIES
    assert all(family.samples == [] for family in families.values())
    server.update(state)
    server.update(replace(state, spans=SPANS_READ + 64))
    assert values(parsed(scrape(server))["goodput_spans"]) == {None: SPANS_READ + 64}


def test_any_other_path_is_not_found(serve, state):
    server = serve()  # one server for every path: closing one costs a tenth of a second
    server.update(state)
    for path in ["/", "/metrics/x", "/metricsx", "/favicon.ico", "/metrics/"]:
        status, _, body = fetch(server, path)
        assert status == 404, path
        assert "goodput_spans" not in body, path


def test_head_answers_as_get_does_without_the_body(serve, state):
    server = serve()
    server.update(state)
    body = scrape(server)
    status, headers, head_body = fetch(server, method="HEAD")
    assert (status, head_body) == (200, "")
    assert headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert int(headers["Content-Length"]) == len(body.encode())


def test_a_query_string_is_ignored(serve, state):
    server = serve()
    server.update(replace(state, run_id="grpo-sync-7"))
    whole = scrape(server)
    asked_for_one = scrape(server, "/metrics?name[]=goodput_spans")  # prometheus_client's own handler would obey
    assert asked_for_one == whole
    assert set(parsed(asked_for_one)) == FAMILIES


def test_a_post_is_refused_without_reading_its_body(serve, state):
    server = serve()
    server.update(state)
    # A body announced and never sent: a server reading it would wait for it and answer nothing.
    answer = raw_exchange(server, b"POST /metrics HTTP/1.1\r\nHost: goodput\r\nContent-Length: 1000000\r\n\r\n")
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split()[1] == b"405", answer
    assert b"\r\nAllow: GET, HEAD\r\n" in rest
    assert b"goodput_spans" not in answer
    assert fetch(server)[0] == 200  # and it goes on serving


def test_a_method_http_server_does_not_know_is_refused(serve):
    server = serve()
    answer = raw_exchange(server, b"BREW /metrics HTTP/1.1\r\nHost: goodput\r\n\r\n")
    assert answer.split(b"\r\n", 1)[0].split()[1] == b"501", answer


def test_no_request_is_logged(serve, state, capfd):
    server = serve()
    server.update(state)
    fetch(server)
    fetch(server, "/")
    fetch(server, method="HEAD")
    raw_exchange(server, b"POST /metrics HTTP/1.1\r\nHost: goodput\r\nContent-Length: 5\r\n\r\n")
    raw_exchange(server, b"BREW /metrics HTTP/1.1\r\n\r\n")
    raw_exchange(server, b"not http at all\r\n\r\n")
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_client_that_resets_its_connection_is_not_reported(serve, state, capfd):
    server = serve()
    server.update(state)
    for _ in range(5):
        connection = socket.create_connection(server.address, timeout=60)
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close: a reset
        connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: goodput\r\n\r\n")
        connection.close()
    wait_for_answers_to_finish()
    assert fetch(server)[0] == 200
    assert capfd.readouterr() == ("", "")


def wait_for_answers_to_finish() -> None:
    """Until no thread of a server is answering a connection (each is socketserver's `process_request_thread`, and
    ends within the server's client timeout at the latest)."""
    while answering := [t for t in threading.enumerate() if t.name.endswith("(process_request_thread)")]:
        for thread in answering:
            if thread.ident is not None:  # started: a thread still starting is listed too, and cannot be joined yet
                thread.join()
        time.sleep(0.01)


def test_a_port_alone_serves_on_the_loopback_address_only(serve):
    host, port = parse_serve_address("0")
    server = serve(host, port)
    assert server.address[0] == "127.0.0.1"
    assert server.address[1] > 0  # the port the system chose
    assert fetch(server)[0] == 200


def test_an_ipv6_address_in_brackets_is_served(serve, state):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine's loopback has no IPv6")
    server = serve(*parse_serve_address("[::1]:0"))
    server.update(state)
    assert server.address[0] == "::1"
    assert values(parsed(scrape(server))["goodput_spans"]) == {None: SPANS_READ}


def test_a_port_taken_is_an_input_error_naming_it(serve):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InputError) as raised:
            serve("127.0.0.1", port)
    message = str(raised.value)
    assert f"127.0.0.1:{port}" in message
    assert "already in use" in message
    assert "\n" not in message


def test_an_address_of_no_interface_here_is_an_input_error_naming_it(serve):
    with pytest.raises(InputError) as raised:
        serve("192.0.2.1", 9464)  # TEST-NET-1, documentation only: no interface has it (binding sends nothing)
    assert str(raised.value) == "cannot serve metrics on 192.0.2.1:9464: not an address of this machine"


def test_close_stops_serving_and_frees_the_port(serve):
    server = MetricsServer("127.0.0.1", 0)
    port = server.address[1]
    assert fetch(server)[0] == 200
    server.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=60).close()
    again = serve("127.0.0.1", port)  # a listener still holding the port would make this fail: in use
    assert again.address == ("127.0.0.1", port)
    assert fetch(again)[0] == 200


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("metrics-host:9100", ("metrics-host", 9100)),
        ("[::1]:9464", ("::1", 9464)),
        ("[::]:9464", ("::", 9464)),
        ("65535", ("127.0.0.1", 65535)),
    ],
)
def test_serve_addresses(text, address):
    assert parse_serve_address(text) == address


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("x", "expected PORT or HOST:PORT"),
        ("", "expected PORT or HOST:PORT"),
        ("70000", "expected a port from 0 to 65535, got 70000"),
        ("0.0.0.0:70000", "expected a port from 0 to 65535, got 70000"),
        (":", "expected a host before the colon"),
        (":9464", "expected a host before the colon"),
        ("localhost:", "expected a port number after the colon"),
        ("localhost:http", "expected a port number after the colon"),
        ("localhost:+80", "expected a port number after the colon"),
        ("-1", "expected PORT or HOST:PORT"),
        (" 9464", "expected PORT or HOST:PORT"),
        ("::1:9464", "an IPv6 address in brackets"),
        ("[127.0.0.1]:9464", "expected an IPv6 address inside the brackets"),
        ("[::1]9464", "expected PORT or HOST:PORT"),
    ],
)
def test_bad_serve_addresses_are_option_errors(text, problem):
    with pytest.raises(OptionError) as raised:
        parse_serve_address(text)
    assert raised.value.option == "--serve"
    assert problem in raised.value.message
