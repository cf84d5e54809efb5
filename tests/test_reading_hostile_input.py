"""Hostile input: whatever the bytes, reading a file ends in spans or a GoodputError, never a traceback.

Arbitrary bytes and mutations of valid files (bits flipped, cut short, bytes inserted), plain and compressed, go
through the same calls a load makes. Inputs that once broke a reader live in `tests/corpus/` and are replayed.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import struct
import tempfile
from pathlib import Path

import pytest
import zstandard
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from rollup.base.errors import GoodputError
from rollup.read.chunks import convert_chunk, plan_chunks

CORPUS = Path(__file__).parent / "corpus"
# GOODPUT_FUZZ_EXAMPLES=5000 for a longer hunt; an input it finds belongs in tests/corpus/.
FUZZ = settings(
    max_examples=int(os.environ.get("GOODPUT_FUZZ_EXAMPLES", "100")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def read_everything(data: bytes, name: str = "input") -> int:
    """Write `data` to a file and load it as a command would: plan, convert every chunk. The spans read."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        spans = 0
        for chunk in plan_chunks(str(path), target_bytes=256):  # tiny chunks: cutting is under test too
            spans += convert_chunk(chunk, str(Path(folder) / f"out-{chunk.index}.parquet"), batch_rows=7).spans
        return spans


def survives(data: bytes) -> None:
    """Reading `data` either works or raises a GoodputError; anything else fails the test."""
    with contextlib.suppress(GoodputError):
        read_everything(data)


# --- valid seeds ----------------------------------------------------------------------------------------------------


def _message(seed: int) -> trace_pb2.TracesData:
    def value(**kwargs) -> common_pb2.AnyValue:
        return common_pb2.AnyValue(**kwargs)

    flags = value(array_value=common_pb2.ArrayValue(values=[value(bool_value=True)]))
    nested = common_pb2.KeyValue(key="a", value=flags)
    attributes = [
        common_pb2.KeyValue(key="rl.bucket", value=value(string_value="productive")),
        common_pb2.KeyValue(key="rl.iteration", value=value(int_value=seed)),
        common_pb2.KeyValue(key="d", value=value(double_value=seed / 3)),
        common_pb2.KeyValue(key="b", value=value(bytes_value=bytes([seed, 255]))),
        common_pb2.KeyValue(key="kv", value=value(kvlist_value=common_pb2.KeyValueList(values=[nested]))),
    ]
    spans = [
        trace_pb2.Span(
            trace_id=bytes([seed]) * 16,
            span_id=bytes([seed, index]) * 4,
            parent_span_id=b"" if index == 0 else bytes([seed, 0]) * 4,
            name=f"span-{index}",
            kind=index % 4,
            start_time_unix_nano=1_700_000_000_000_000_000 + index,
            end_time_unix_nano=1_700_000_000_000_000_100 + index,
            attributes=attributes,
            status=trace_pb2.Status(code=index % 3, message="m" if index else ""),
        )
        for index in range(3)
    ]
    message = trace_pb2.TracesData()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name", value=value(string_value="svc"))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "fuzz"
    scope_spans.spans.extend(spans)
    return message


def _json_line(message: trace_pb2.TracesData) -> str:
    """The message as one OTLP JSON line: proto3's JSON mapping with hex ids."""
    document = MessageToDict(message)
    for span in document["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in span:
                span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document)


_MESSAGES = [_message(seed).SerializeToString() for seed in (1, 2, 3)]
SEEDS = {
    "framed": b"".join(struct.pack(">I", len(m)) + m for m in _MESSAGES),
    "bare": _MESSAGES[0],
    "json-lines": "".join(_json_line(_message(seed)) + "\n" for seed in (1, 2, 3)).encode(),
    "json-document": json.dumps(json.loads(_json_line(_message(4))), indent=1).encode(),
}
COMPRESS = {
    "plain": lambda data: data,
    "gzip": lambda data: gzip.compress(data, mtime=0),
    "zstd": lambda data: zstandard.ZstdCompressor().compress(data),
}


def test_seeds_are_valid_traces():
    assert {name: read_everything(data) for name, data in SEEDS.items()} == {
        "framed": 9,
        "bare": 3,
        "json-lines": 9,
        "json-document": 3,
    }


# --- mutations ------------------------------------------------------------------------------------------------------

_TOKENS = [b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\\ud800", b"NaN", b"-", b"1e999", b"\n", b"\x00", b"\xff"]


@st.composite
def mutated(draw, seeds=SEEDS) -> bytes:
    """A seed with a few flips, cuts, insertions and deletions, then compressed (or mutated after compressing)."""
    data = bytearray(seeds[draw(st.sampled_from(sorted(seeds)))])
    compression = draw(st.sampled_from(sorted(COMPRESS)))
    mutate_compressed = compression != "plain" and draw(st.booleans())
    if mutate_compressed:
        data = bytearray(COMPRESS[compression](bytes(data)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        where = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "byte", "cut", "insert", "token", "delete", "length"]))
        if action == "flip":
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif action == "byte":
            data[where] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[where:]
        elif action == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=16))
        elif action == "token":
            data[where:where] = draw(st.sampled_from(_TOKENS)) * draw(st.integers(1, 3))
        elif action == "delete":
            del data[where : where + draw(st.integers(1, 32))]
        else:  # a plausible but wrong frame length
            data[where:where] = struct.pack(">I", draw(st.integers(0, 2**32 - 1)))
    return bytes(data) if mutate_compressed else COMPRESS[compression](bytes(data))


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=2048))
def test_arbitrary_bytes(data):
    survives(data)


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=512), st.sampled_from(["gzip", "zstd"]))
def test_arbitrary_bytes_compressed(data, compression):
    survives(COMPRESS[compression](data))


@pytest.mark.slow
@FUZZ
@given(mutated())
def test_mutated_valid_files(data):
    survives(data)


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.binary(min_size=1, max_size=64))
def test_valid_file_with_arbitrary_tail(seed, tail):
    survives(SEEDS[seed] + tail)


# --- pathological but well-formed ------------------------------------------------------------------------------------


def _deep_any_value(depth: int) -> bytes:
    """An AnyValue nested `depth` arrays deep, encoded by hand (the generated classes refuse to build it)."""
    encoded = b"\x0a\x01x"  # string_value "x"
    for _ in range(depth):
        array = b"\x0a" + _varint(len(encoded)) + encoded  # ArrayValue.values
        encoded = b"\x2a" + _varint(len(array)) + array  # AnyValue.array_value
    return encoded


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)


@pytest.mark.parametrize("depth", [50, 200, 5_000])
def test_deeply_nested_values(depth):
    key_value = b"\x0a\x01k" + b"\x12" + _varint(len(_deep_any_value(depth))) + _deep_any_value(depth)
    span = bytes.fromhex("0a10" + "ab" * 16 + "1208" + "cd" * 8) + b"\x4a" + _varint(len(key_value)) + key_value
    scope_spans = b"\x12" + _varint(len(span)) + span
    resource_spans = b"\x12" + _varint(len(scope_spans)) + scope_spans
    message = b"\x0a" + _varint(len(resource_spans)) + resource_spans
    survives(struct.pack(">I", len(message)) + message)

    text = '{"stringValue": "x"}'
    for _ in range(depth):
        text = '{"arrayValue": {"values": [' + text + "]}}"
    line = (
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "ab" * 16 + '", "spanId": "' + "cd" * 8
        + '", "attributes": [{"key": "k", "value": ' + text + "}]}]}]}]}\n"
    )  # fmt: skip
    survives(line.encode())


# --- the corpus -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(CORPUS.iterdir()) if CORPUS.is_dir() else [], ids=lambda p: p.name)
def test_corpus(path):
    survives(path.read_bytes())
