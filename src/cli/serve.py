"""The Prometheus endpoint of `goodput watch --serve`: the latest refresh's figures at `/metrics` (SPEC section 13), so
Grafana can graph goodput while a job runs.

The figures are gauges of a registry of our own (no process or platform metrics: they would describe goodput's own
process, not the run), rendered by prometheus_client in the Prometheus text format. The server answers `GET` and
`HEAD /metrics` and nothing else, reads no request body and obeys no query string: what it serves is decided by the
last refresh alone, never by the client. It runs in daemon threads beside the refresh loop and logs nothing, so the
watch's own output stays what it was.

The watch command should import this module only when `--serve` is given: http.server and prometheus_client would
slow down `goodput --help`, which imports every command's module.
"""

from __future__ import annotations

import errno
import re
import socket
import socketserver
import sys
import threading
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from rollup import InputError, OptionError
from rollup.report import FIGURES

if TYPE_CHECKING:
    from rollup.accounting import Figures
    from rollup.watch import LiveState

LOOPBACK = "127.0.0.1"  # `--serve PORT` alone: the figures of a run stay on its machine unless an interface is named
METRICS_PATH = "/metrics"
# How often the serving thread looks for `close()`: close waits up to this long, and the thread wakes this often.
SHUTDOWN_POLL_S = 0.1
# A client that opens a connection and sends nothing is dropped after this long, so it cannot hold a thread forever.
CLIENT_TIMEOUT_S = 30

# The parts the wall clock is charged to (the buckets and `unaccounted`), as the report declares them.
_WALL_PARTS = tuple(figure for figure in FIGURES if figure.stacked)

_HOST_PORT = re.compile(r"\[(?P<bracketed>[^\]]*)\]:(?P<bracketed_port>[^:]*)|(?P<host>[^:\[\]]*):(?P<port>[^:]*)")


def parse_serve_address(text: str) -> tuple[str, int]:
    """`--serve PORT` -> ("127.0.0.1", PORT); `--serve HOST:PORT` -> (HOST, PORT); `[::1]:9464` for IPv6.

    A host is never implied but the loopback one: binding every interface is said as `0.0.0.0:9464`, so a run's
    figures are not offered to the network by accident. Port 0 lets the system choose one (`MetricsServer.address`
    says which). A bad value raises `OptionError("--serve", ...)`."""
    if re.fullmatch(r"[0-9]+", text):
        return LOOPBACK, _port(text)
    match = _HOST_PORT.fullmatch(text)
    if match is None:
        raise OptionError(
            "--serve", f"expected PORT or HOST:PORT (an IPv6 address in brackets: [::1]:9464), got {text!r}"
        )
    if match["bracketed"] is not None:
        host, port = match["bracketed"], match["bracketed_port"]
        if ":" not in host:
            raise OptionError("--serve", f"expected an IPv6 address inside the brackets, got {text!r}")
    else:
        host, port = match["host"], match["port"]
    if not host:
        raise OptionError("--serve", f"expected a host before the colon (0.0.0.0 for every interface), got {text!r}")
    if not re.fullmatch(r"[0-9]+", port):
        raise OptionError("--serve", f"expected a port number after the colon, got {text!r}")
    return host, _port(port)


def _port(digits: str) -> int:
    port = int(digits)
    if port > 65535:
        raise OptionError("--serve", f"expected a port from 0 to 65535, got {port}")
    return port


def shown_address(host: str, port: int) -> str:
    """`HOST:PORT` as a user writes it, the IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _RefreshCollector:
    """A custom collector (prometheus_client's pattern) whose `collect()` yields the gauges of the latest refresh.

    The gauges are built once per refresh, in `update`, and swapped in as one tuple: a scrape reads one refresh's
    figures, never half of two, and a refresh the gauges cannot be made of fails in the refresh loop that gave it
    rather than in a scrape nobody watches."""

    def __init__(self) -> None:
        # Before the first refresh, the families with no samples: nothing has been read yet, and a `goodput_spans 0`
        # would draw a drop to zero in a graph each time a watch restarts, where there is only no answer yet.
        self.families: tuple[GaugeMetricFamily, ...] = tuple(_families(None))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return iter(self.families)


def _families(state: LiveState | None) -> list[GaugeMetricFamily]:
    """The gauges of one refresh (None: the families without samples), each sample labelled with the run's id when
    it has one attempt (`LiveState.run_id`).

    A figure that is not known (the total's seconds and goodput before it has any wall clock, a stretch with
    nothing read, a run without GPUs, no complete iteration yet) has no sample rather than a 0: Grafana draws a
    gap, where a fake zero would read as a run doing no work. The spans read are always known (0 before any)."""
    run_id = None if state is None else state.run_id
    run_label = [] if run_id is None else ["run_id"]
    run_value = [] if run_id is None else [run_id]
    wall = GaugeMetricFamily(
        "goodput_wall_seconds",
        "Wall-clock seconds of the run so far charged to each bucket, and those no bucketed span covered "
        "(unaccounted); together they are the run's wall clock.",
        labels=["bucket", *run_label],
    )
    ratio = GaugeMetricFamily(
        "goodput_ratio",
        "Goodput, productive seconds over wall-clock seconds: of the run so far (window total) and of the last "
        "1, 5 and 15 minutes of trace time.",
        labels=["window", *run_label],
    )
    gpu_ratio = GaugeMetricFamily(
        "goodput_gpu_ratio",
        "GPU goodput of the run so far: productive GPU-seconds over the GPU-seconds its processes held.",
        labels=run_label,
    )
    iteration = GaugeMetricFamily("goodput_iteration", "The newest complete iteration.", labels=run_label)
    spans = GaugeMetricFamily("goodput_spans", "Spans read so far.", labels=run_label)
    families = [wall, ratio, gpu_ratio, iteration, spans]
    if state is None:
        return families

    for figure in _WALL_PARTS if state.total.wall_ns else ():  # no window yet: no wall clock to divide up
        seconds = figure.value(state.total)
        if seconds is not None:
            wall.add_metric([figure.key.removesuffix("_s"), *run_value], seconds)
    windows: dict[str, Figures | None] = {"total": state.total}
    windows |= {label: None if recent is None else recent.figures for label, recent in state.recent.items()}
    for window, figures in windows.items():
        if figures is not None and figures.goodput is not None:
            ratio.add_metric([window, *run_value], figures.goodput)
    if state.gpus is not None and state.gpus.goodput is not None:
        gpu_ratio.add_metric(run_value, state.gpus.goodput)
    if state.newest_iteration is not None:
        iteration.add_metric(run_value, float(state.newest_iteration))
    spans.add_metric(run_value, float(state.spans))
    return families


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A TCP server that answers each connection in a daemon thread. Not http.server's `HTTPServer`, whose bind
    looks the host's name up in DNS for a name nothing here reads (a lookup that can hang on a machine without DNS).
    """

    allow_reuse_address = True  # a port freed by close() can be bound again at once, past connections in TIME_WAIT
    daemon_threads = True  # a scrape under way never keeps the command from exiting

    def __init__(self, address: tuple[Any, ...], family: socket.AddressFamily, registry: CollectorRegistry) -> None:
        self.address_family = family
        self.registry = registry
        super().__init__(address, _MetricsHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Say nothing of a client that went away mid-request (a scraper giving up resets the connection); anything
        else is a bug in goodput, and socketserver's traceback on stderr says so."""
        if not isinstance(sys.exception(), ConnectionError):
            super().handle_error(request, client_address)


class _MetricsHandler(BaseHTTPRequestHandler):
    """`GET` and `HEAD /metrics`: the metrics; any other path 404; POST, PUT, PATCH and DELETE 405 (other methods
    501, as http.server answers them). Nothing the client sends past the request line and headers is read."""

    timeout = CLIENT_TIMEOUT_S

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, send_body: bool) -> None:
        # The path alone decides: a query string (`?name[]=...`, which prometheus_client's own handler obeys) is
        # ignored, so the full metrics are always what is served.
        if urlsplit(self.path).path != METRICS_PATH:
            self._plain(HTTPStatus.NOT_FOUND, f"not found: goodput serves {METRICS_PATH} only\n", send_body)
            return
        body = generate_latest(cast(_Server, self.server).registry)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _refuse(self) -> None:
        self._plain(HTTPStatus.METHOD_NOT_ALLOWED, f"method not allowed: GET {METRICS_PATH}\n", True, Allow="GET, HEAD")

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def _plain(self, status: HTTPStatus, text: str, send_body: bool, **headers: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Say nothing: http.server writes a line to stderr for every request, over the watch's own output."""


class MetricsServer:
    """The `/metrics` endpoint of one `goodput watch --serve`: bound when made, serving in a daemon thread until
    `close()`, showing what the last `update` gave."""

    def __init__(self, host: str, port: int) -> None:
        """Bind HOST:PORT and start serving. A port taken, a host that is no address of this machine or a name
        that does not resolve raises `InputError` naming HOST:PORT and why."""
        self._collector = _RefreshCollector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        where = shown_address(host, port)
        try:
            family, _, _, _, address = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
            self._server = _Server(address, family, registry)
        except OSError as error:
            raise InputError(f"cannot serve metrics on {where}: {_why(error)}") from None
        bound = self._server.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(SHUTDOWN_POLL_S,), name=f"goodput metrics {where}", daemon=True
        )
        self._thread.start()

    def update(self, state: LiveState) -> None:
        """Serve the metrics of one refresh from now on, each sample labelled with the run's id when it has one
        attempt. Safe to call from any thread."""
        self._collector.families = tuple(_families(state))

    def close(self) -> None:
        """Stop serving and free the port (calling it again does nothing more)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _why(error: OSError) -> str:
    """Why a bind failed, in a user's words."""
    if isinstance(error, socket.gaierror):
        return f"no such host ({error.strerror})"
    if error.errno == errno.EADDRINUSE:
        return "address already in use (another program listens there: pick another port)"
    if error.errno == errno.EADDRNOTAVAIL:
        return "not an address of this machine"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need root)"
    return error.strerror or str(error)
