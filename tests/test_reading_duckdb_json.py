"""DuckDB's direct read of JSON Lines (`read.duckdb_json`) against the careful reader: the same rows, or it hands
over."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import PROPERTY_TESTS, invoke
from rollup.base.schema import ACCOUNTING_SCHEMA, SPAN_SCHEMA
from rollup.read.chunks import convert_chunk, plan_chunks
from rollup.read.formats import duckdb_json
from rollup.read.sniff import compression_of
from rollup.store.span_store import open_store
from test_reading_formats import (
    COMPRESSIONS,
    compressed_copy,
    make_sdk_spans,
    write_official_json_lines,
    write_project_json_lines,
)
from tracebuild import S, step, write_trace

REPO = Path(__file__).resolve().parent.parent
COLUMNS = ACCOUNTING_SCHEMA.names


def fast_rows(path: Path):
    """The rows `duckdb_json` reads from `path`, sorted, into a table and into Parquet alike; None when it hands
    the file to the careful reader."""
    table, parquet = _direct_rows(path, parquet=False), _direct_rows(path, parquet=True)
    assert table == parquet
    return table


def _direct_rows(path: Path, *, parquet: bool):
    connection = duckdb.connect()
    folder = Path(tempfile.mkdtemp(prefix="goodput-direct-"))  # where its Parquet goes (not beside a sample trace)
    try:
        claimed = duckdb_json.load_json_lines(
            connection, [str(path)], compression_of(str(path)), "direct", folder if parquet else None
        )
        if not claimed:
            assert not connection.execute("SELECT * FROM duckdb_tables()").fetchall()  # nor any staging table
            assert not connection.execute("SELECT * FROM duckdb_views() WHERE NOT internal").fetchall()
            assert not list(folder.iterdir())  # nor any file of it left behind
            return None
        rows = connection.execute(f"SELECT {', '.join(COLUMNS)} FROM direct ORDER BY span_id, trace_id").fetchall()
        assert claimed == {str(path): len(rows)}
        if parquet:
            (rowids,) = connection.execute("SELECT count(DISTINCT rowid) FROM direct").fetchone()
            assert rowids == len(rows) and not connection.execute("SELECT * FROM duckdb_tables()").fetchall()
        return rows
    finally:
        connection.close()
        shutil.rmtree(folder)


def careful_rows(path: Path, out_dir: Path, schema=ACCOUNTING_SCHEMA):
    """The careful reader's rows for `path`, of `schema` projected to the accounting columns, sorted."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for chunk in plan_chunks(str(path), target_bytes=1 << 12):
        out = out_dir / f"{chunk.index}-{schema is SPAN_SCHEMA}.parquet"
        if convert_chunk(chunk, str(out), schema=schema).spans:
            table = pq.read_table(out).select(COLUMNS)
            rows.extend(tuple(row.values()) for row in table.to_pylist())
            out.unlink()
    return sorted(rows, key=lambda row: (row[1], row[0]))


def store_rows(path: Path):
    """What `goodput report --no-cache` loads: the uncached store of the accounting columns (fast, else careful)."""
    with open_store([path], use_cache=False, accounting=True) as store:
        table = store.sql(f"SELECT {', '.join(COLUMNS)} FROM spans ORDER BY span_id, trace_id")
        return [tuple(row.values()) for row in table.to_pylist()], [entry.tables for entry in store.entries]


# --- files it claims ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sdk_spans():
    return make_sdk_spans()


@pytest.mark.slow
@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("writer", [write_project_json_lines, write_official_json_lines])
def test_real_writers_are_read_directly_with_the_careful_readers_rows(tmp_path, sdk_spans, writer, compression):
    writer(tmp_path / "t.jsonl", sdk_spans)
    path = compressed_copy(tmp_path / "t.jsonl", compression)
    fast = fast_rows(path)
    assert fast is not None and len(fast) == len(sdk_spans)
    assert fast == careful_rows(path, tmp_path / "lean") == careful_rows(path, tmp_path / "full", SPAN_SCHEMA)


@pytest.mark.slow
def test_the_shipped_sample_traces_are_read_directly(tmp_path):
    files = sorted((REPO / "sample_traces").rglob("*.jsonl"))
    assert files
    for path in files:
        fast = fast_rows(path)
        assert fast is not None, path
        assert fast == careful_rows(path, tmp_path / path.stem)


@pytest.mark.slow
def test_processes_follow_the_resource_rules(tmp_path):
    resources = {
        "instance": [("service.instance.id", {"stringValue": "i-1"}), ("service.name", {"stringValue": "svc"})],
        "host-pid": [("host.name", {"stringValue": "h"}), ("process.pid", {"intValue": 42})],
        "empty-instance": [("service.instance.id", {"stringValue": ""}), ("service.name", {"stringValue": "svc"})],
        "later-wins": [("service.name", {"stringValue": "a"}), ("service.name", {"stringValue": "b"})],
        "nothing": [],
    }
    lines = []
    for index, (label, attributes) in enumerate(resources.items()):
        span = {"traceId": f"{index:032x}", "spanId": f"{index + 1:016x}", "name": label}
        resource = {"attributes": [{"key": key, "value": value} for key, value in attributes]}
        lines.append({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]})
    path = tmp_path / "resources.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fast = fast_rows(path)
    assert fast == careful_rows(path, tmp_path / "c")
    assert {row[3]: row[6] for row in fast} == {
        "instance": "i-1",
        "host-pid": "unknown_service@h:42",
        "empty-instance": "svc",
        "later-wins": "b",
        "nothing": "unknown_service",
    }


def test_what_a_process_holds_is_read_alike_and_only_an_unusual_array_goes_to_the_careful_reader(tmp_path):
    """`holding` (SPEC section 12): the GPU attributes' texts as one JSON object, null for a process told nothing;
    a span's own goodput.fleet is its `fleet`."""
    gpu = [("goodput.gpu.ids", {"stringValue": "0,1"}), ("host.name", {"stringValue": "n1"}),
           ("goodput.fleet", {"stringValue": "Trainer"}), ("dl.world_size", {"intValue": "8"})]  # fmt: skip
    lines = []
    for index, attributes in enumerate([gpu, [("host.name", {"stringValue": "n1"})]]):
        span = {
            "traceId": f"{index:032x}",
            "spanId": f"{index + 1:016x}",
            "name": f"p{index}",
            "attributes": [{"key": "goodput.fleet", "value": {"stringValue": "Rollout"}}] if index else [],
        }
        resource = {"attributes": [{"key": key, "value": value} for key, value in attributes]}
        lines.append({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]})
    path = tmp_path / "gpus.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fast = fast_rows(path)
    assert fast == careful_rows(path, tmp_path / "c")
    named = [dict(zip(COLUMNS, row, strict=True)) for row in fast]
    assert [(row["name"], row["holding"], row["fleet"]) for row in named] == [
        ("p0", '{"goodput.gpu.ids":"0,1","goodput.fleet":"Trainer","host.name":"n1","dl.world_size":"8"}', None),
        ("p1", None, "Rollout"),
    ]
    ids = {"arrayValue": {"values": [{"stringValue": "0"}, {"stringValue": "1"}]}}
    lines[0]["resourceSpans"][0]["resource"]["attributes"][0]["value"] = ids
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fast = fast_rows(path)  # an array of plain strings, as the instrumentation writes the ids, is read directly
    assert fast == careful_rows(path, tmp_path / "a")
    holdings = {row[COLUMNS.index("name")]: row[COLUMNS.index("holding")] for row in fast}
    assert json.loads(holdings["p0"])["goodput.gpu.ids"] == '["0","1"]'
    for unusual in ([{"stringValue": 'a"b'}], [{"intValue": "3"}], [{"stringValue": "0"}, {"boolValue": True}]):
        lines[0]["resourceSpans"][0]["resource"]["attributes"][0]["value"] = {"arrayValue": {"values": unusual}}
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert fast_rows(path) is None, unusual  # the careful reader's to render
        assert careful_rows(path, tmp_path / "u")


# --- files it hands over, and what the user then sees ---------------------------------------------------------------


def one_span_line(**changes) -> dict:
    span = {
        "traceId": "ab" * 16,
        "spanId": "cd" * 8,
        "parentSpanId": "ef" * 8,
        "name": "rl.grpo.generation",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "rl.bucket", "value": {"stringValue": "productive"}},
            {"key": "rl.iteration", "value": {"intValue": "3"}},
        ],
    }
    span.update(changes)
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [span]}]}]}


def with_resource_attribute(key: str, value: dict) -> dict:
    line = one_span_line()
    line["resourceSpans"][0]["resource"]["attributes"].append({"key": key, "value": value})
    return line


HANDED_OVER = {
    "snake-case": b'{"resource_spans": [{"scope_spans": [{"spans": [{"trace_id": "' + b"ab" * 16 + b'"}]}]}]}\n',
    "no-resource-spans": json.dumps(one_span_line()).encode() + b'\n{"resourceLogs": []}\n',
    "short-id": json.dumps(one_span_line(spanId="abcd")).encode() + b"\n",
    "bool-bucket": json.dumps(one_span_line(attributes=[{"key": "rl.bucket", "value": {"boolValue": True}}])).encode()
    + b"\n",
    "zero-padded-iteration": json.dumps(
        one_span_line(attributes=[{"key": "rl.iteration", "value": {"stringValue": "007"}}])
    ).encode()
    + b"\n",
    "double-iteration": json.dumps(
        one_span_line(attributes=[{"key": "rl.iteration", "value": {"doubleValue": 4.0}}])
    ).encode()
    + b"\n",
    "time-with-exponent": json.dumps(one_span_line(startTimeUnixNano=1.7e18)).encode() + b"\n",
    # An intValue that is no integer, in an attribute the accounting does not even read: the careful reader's error.
    "int-value-not-an-int": json.dumps(
        one_span_line(attributes=[{"key": "tokens", "value": {"intValue": "notanint"}}])
    ).encode()
    + b"\n",
    "resource-int-value-past-64-bits": json.dumps(with_resource_attribute("n", {"intValue": "9" * 20})).encode()
    + b"\n",
    "torn-tail": json.dumps(one_span_line()).encode() + b'\n{"resourceSpans": [{"scop',
    "not-utf8": json.dumps(one_span_line(name="caf\u00e9"), ensure_ascii=False).encode().replace(b"\xc3\xa9", b"\xe9")
    + b"\n",
    "no-span": b'{"resourceSpans": []}\n',
    "bad-line-in-the-middle": json.dumps(one_span_line()).encode()
    + b"\n{oops\n"
    + json.dumps(one_span_line()).encode()
    + b"\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", HANDED_OVER)
def test_anything_it_is_not_sure_of_goes_to_the_careful_reader(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(HANDED_OVER[name])
    assert fast_rows(path) is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["double-iteration", "zero-padded-iteration", "torn-tail", "bool-bucket"])
def test_a_handed_over_file_still_loads_as_the_careful_reader_reads_it(tmp_path, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(HANDED_OVER[name])
    rows, tables = store_rows(path)
    assert tables == [[]]  # read by the careful reader
    assert rows == careful_rows(path, tmp_path / "c")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, message",
    [
        ("bad-line-in-the-middle", "line 2: not valid JSON"),
        ("not-utf8", "not a trace file"),
        ("short-id", "line 1: a span has spanId 'abcd'"),
        ("no-span", "not a trace file"),
        ("int-value-not-an-int", "line 1: attribute 'tokens' has intValue 'notanint', expected a 64-bit integer"),
        ("resource-int-value-past-64-bits", f"line 1: attribute 'n' has intValue '{'9' * 20}', expected a 64-bit"),
    ],
)
def test_report_without_cache_words_bad_json_lines_as_the_careful_reader_does(tmp_path, name, message):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(HANDED_OVER[name])
    uncached = invoke(["report", "--no-cache", str(path)])
    cached = invoke(["report", str(path)])  # the cache is filled by the careful reader alone
    assert uncached.exit_code == cached.exit_code == 2, uncached.output
    assert uncached.output == cached.output
    assert f"{path}" in uncached.output and message in uncached.output
    assert "Traceback" not in uncached.output


@pytest.mark.slow
def test_report_without_cache_gives_the_cached_report(tmp_path):
    spans = [step("s1", 1, 0, 10), S("g", "rl.grpo.generation", 1, 6, parent="s1", bucket="productive")]
    spans += [S("w", "rl.worker", 2, 5, parent="g", bucket="idle", process="worker")]
    path = write_trace(tmp_path / "run.jsonl", spans, "jsonl", batches=2)
    cached = invoke(["report", "--format", "json", str(path)])
    uncached = invoke(["report", "--format", "json", "--no-cache", str(path)])
    assert cached.exit_code == uncached.exit_code == 0
    assert json.loads(cached.stdout) == json.loads(uncached.stdout)
    assert json.loads(uncached.stdout)["iterations"][0]["productive_s"] == 5.0


# --- the two readers agree on whatever the mapping allows -----------------------------------------------------------

_HEX = "0123456789abcdefABCDEF"


def _ids(length: int):
    return st.text(alphabet=_HEX, min_size=length, max_size=length)


def _int_value(number: int):
    return st.sampled_from([{"intValue": str(number)}, {"intValue": number}])


_VALUES = {
    "rl.bucket": st.one_of(
        st.sampled_from(["productive", "overhead", "idle", "wasted", "bogus", ""]).map(lambda t: {"stringValue": t}),
        st.integers(-3, 3).flatmap(_int_value),
        st.just({"boolValue": False}),
        st.just({}),
    ),
    "rl.iteration": st.one_of(
        st.integers(-2, 10**12).flatmap(_int_value),
        st.sampled_from(["4", "+4", "04", "4.0", "x", "-0", "99999999999999999999"]).map(lambda t: {"stringValue": t}),
        st.just({"doubleValue": 5.0}),
    ),
    "rl.span_group": st.sampled_from(["step", "generation", "job", ""]).map(lambda t: {"stringValue": t}),
    "goodput.fleet": st.one_of(
        st.sampled_from(["Trainer", ""]).map(lambda t: {"stringValue": t}), st.just({"boolValue": True})
    ),  # fmt: skip
    "other": st.one_of(st.just({"doubleValue": 0.5}), st.just({"arrayValue": {"values": []}})),
}
_ATTRIBUTE = st.sampled_from(sorted(_VALUES)).flatmap(
    lambda key: _VALUES[key].map(lambda value: {"key": key, "value": value})
)
_TIME = st.one_of(
    st.integers(0, 2**63 - 1).flatmap(lambda n: st.sampled_from([str(n), n])),
    st.just("0017"),
    st.just(None),
)


@st.composite
def _span(draw) -> dict:
    span_id = draw(st.one_of(_ids(16), _ids(16), _ids(16), st.just("not-hex")))  # now and then a file to refuse
    span = {"traceId": draw(_ids(32)), "spanId": span_id, "name": draw(st.sampled_from(["rl.grpo.step", "x"]))}
    parent = draw(st.one_of(st.none(), st.just(""), _ids(16)))
    if parent is not None:
        span["parentSpanId"] = parent
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        value = draw(_TIME)
        if value is not None:
            span[key] = value
    span["attributes"] = draw(st.lists(_ATTRIBUTE, max_size=4))
    return span


_RESOURCE_ATTRIBUTE = st.tuples(
    st.sampled_from(["service.instance.id", "host.name", "process.pid", "service.name", "other", "goodput.gpu.ids",
                     "goodput.gpus", "goodput.fleet", "rl.worker_group", "dl.world_size", "dl.rank"]),
    st.one_of(
        st.sampled_from(["a", "b", "", "0,1", 'say "1"', "back\\slash", "tab\t", "é"]).map(
            lambda t: {"stringValue": t}
        ),
        st.integers(0, 99).flatmap(_int_value),
        st.just({"boolValue": True}),
        st.sampled_from([[{"stringValue": "0"}, {"stringValue": "1"}], [], [{"stringValue": 'a"b'}],
                         [{"intValue": "3"}], [{"stringValue": "é,x"}]]).map(lambda v: {"arrayValue": {"values": v}}),
        st.just({"arrayValue": {}}),
    ),
).map(lambda pair: {"key": pair[0], "value": pair[1]})  # fmt: skip


@st.composite
def _json_lines(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        resource_spans = []
        for _ in range(draw(st.integers(1, 2))):
            resource = {"attributes": draw(st.lists(_RESOURCE_ATTRIBUTE, max_size=4))}
            spans = draw(st.lists(_span(), min_size=1, max_size=4))
            resource_spans.append({"resource": resource, "scopeSpans": [{"spans": spans}]})
        lines.append(json.dumps({"resourceSpans": resource_spans}))
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.slow
@settings(PROPERTY_TESTS, max_examples=10)
@given(data=_json_lines())
def test_whenever_it_reads_a_file_it_reads_what_the_careful_reader_reads(tmp_path, data):
    path = tmp_path / "generated.jsonl"
    path.write_bytes(data)
    try:
        careful = careful_rows(path, tmp_path / "careful")
    except Exception as error:  # noqa: BLE001 - a file the careful reader refuses must not be read directly either
        assert fast_rows(path) is None, error
        return
    fast = fast_rows(path)
    if fast is not None:
        assert fast == careful
    assert careful == careful_rows(path, tmp_path / "full", SPAN_SCHEMA)


@pytest.mark.slow
def test_plain_files_of_the_usual_shape_are_claimed(tmp_path):
    """The generator above may hand most files over; files as exporters write them must not be."""
    spans = [step(f"s{i}", i, i * 10, i * 10 + 9) for i in range(1, 30)]
    spans += [
        S(f"g{i}", "rl.grpo.generation", i * 10, i * 10 + 5, parent=f"s{i}", bucket="productive") for i in range(1, 30)
    ]
    path = write_trace(tmp_path / "usual.jsonl", spans, "jsonl", batches=3)
    assert fast_rows(path) == careful_rows(path, tmp_path / "c")
    rows, tables = store_rows(path)
    assert tables == [["direct_spans"]] and len(rows) == len(spans)


def test_loading_reports_progress_up_to_the_whole_file(tmp_path):
    spans = [step(f"s{i}", i, i * 10, i * 10 + 9) for i in range(1, 200)]
    path = write_trace(tmp_path / "p.jsonl", spans, "jsonl", batches=20)
    calls = []
    with open_store([path], use_cache=False, accounting=True, progress=lambda *a: calls.append(a)) as store:
        assert store.entries[0].tables == ["direct_spans"]
    size = path.stat().st_size
    assert calls and calls[-1] == (size, size)
    assert all(done <= total for done, total in calls)


def _span_of(line: dict) -> dict:
    return line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]


ODD_TYPES = {
    "name-number": lambda line: _span_of(line).update(name=5),
    "name-object": lambda line: _span_of(line).update(name={"a": 1}),
    "spans-string": lambda line: line["resourceSpans"][0]["scopeSpans"][0].update(spans="x"),
    "scope-spans-object": lambda line: line["resourceSpans"][0].update(scopeSpans={"spans": []}),
    "attributes-object": lambda line: _span_of(line).update(attributes={"a": 1}),
    "value-string": lambda line: _span_of(line)["attributes"][0].update(value="productive"),
    "string-value-number": lambda line: _span_of(line)["attributes"][0].update(value={"stringValue": 5}),
    "string-value-object": lambda line: _span_of(line)["attributes"][0].update(value={"stringValue": {"x": 1}}),
    "key-number": lambda line: _span_of(line)["attributes"][0].update(key=5),
    "resource-spans-object": lambda line: line.update(resourceSpans={"a": 1}),
    "resource-list": lambda line: line["resourceSpans"][0].update(resource=[1]),
    "time-bool": lambda line: _span_of(line).update(startTimeUnixNano=True),
    "time-negative": lambda line: _span_of(line).update(startTimeUnixNano="-5"),
    "null-span": lambda line: line["resourceSpans"][0]["scopeSpans"][0].update(spans=[None]),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ODD_TYPES)
def test_json_of_odd_types_is_read_as_the_careful_reader_reads_it_or_handed_over(tmp_path, name):
    line = one_span_line()
    ODD_TYPES[name](line)
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps(line) + "\n")
    fast = fast_rows(path)
    if fast is not None:
        assert fast == careful_rows(path, tmp_path / "c")


@pytest.mark.slow
def test_several_files_share_one_table_that_the_lineage_walks_as_it_is(tmp_path):
    from rollup.base.nodes import NODE_TABLE_COLUMNS
    from rollup.report.as_json import report_json
    from rollup.report.build import build_report

    folder = REPO / "sample_traces" / "grpo_async"
    assert len(list(folder.glob("*.jsonl"))) > 1
    with open_store([folder], use_cache=False, accounting=True) as store:
        assert store.nodes_table == "direct_spans"
        assert all(entry.tables == ["direct_spans"] for entry in store.entries)
        columns = [row[0] for row in store.connection.execute("DESCRIBE direct_spans").fetchall()]
        assert tuple(columns) == NODE_TABLE_COLUMNS  # a table: these few spans fit the memory limit
        direct = report_json(build_report(store))
    with open_store([folder], cache_dir=tmp_path / "cache") as store:  # the careful reader, through the cache
        assert store.nodes_table is None
        careful = report_json(build_report(store))
    assert direct == careful


@pytest.mark.slow
def test_many_files_go_in_one_query_and_only_the_doubtful_ones_go_to_the_careful_reader(tmp_path):
    folder = tmp_path / "run"
    for index in range(40):
        spans = [step(f"s{index}", index, index * 10, index * 10 + 9, trace=f"t{index}")]
        spans += [
            S(f"g{index}", "rl.x", index * 10, index * 10 + 5, parent=f"s{index}", bucket="idle", trace=f"t{index}")
        ]
        write_trace(folder / f"p{index:02d}.jsonl", spans, "jsonl")
    (folder / "p05.jsonl").write_bytes(HANDED_OVER["bool-bucket"])  # read by DuckDB, but not sure
    torn = json.dumps(one_span_line(spanId="ee" * 8)).encode() + b'\n{"resourceSpans": [{"scop'
    (folder / "p06.jsonl").write_bytes(torn)  # refused by DuckDB: then one by one
    gzip_path = write_trace(folder / "p07.jsonl", [step("z", 99, 0, 1, trace="tz")], "jsonl+gz")

    # One query over the plain files: DuckDB refuses p06 (halving), is unsure of p05 (left out of a claimed query's
    # rows), alike into a table and into Parquet.
    plain = sorted(str(p) for p in folder.glob("*.jsonl") if p != gzip_path)
    loads = []
    for into in (None, Path(tempfile.mkdtemp(prefix="goodput-direct-"))):
        connection = duckdb.connect()
        claimed = duckdb_json.load_json_lines(connection, plain, None, "direct", into)
        loads.append((claimed, connection.execute(f"SELECT {', '.join(COLUMNS)} FROM direct ORDER BY ALL").fetchall()))
        connection.close()
        if into is not None:
            shutil.rmtree(into)
    assert loads[0] == loads[1]
    assert set(loads[0][0]) == set(plain) - {str(folder / "p05.jsonl"), str(folder / "p06.jsonl")}

    with open_store([folder], use_cache=False, accounting=True) as store:
        tables = {entry.path.name: entry.tables for entry in store.entries}
        assert tables.pop("p05.jsonl") == tables.pop("p06.jsonl") == []
        assert set(map(tuple, tables.values())) == {("direct_spans",)} and gzip_path.name in tables
        assert store.nodes_table is None  # some spans came from Parquet parts
        rows = store.sql(f"SELECT {', '.join(COLUMNS)} FROM spans ORDER BY span_id, trace_id").to_pylist()
    careful = []
    for path in sorted(folder.iterdir()):
        careful += careful_rows(path, tmp_path / "c" / path.name)
    assert [tuple(row.values()) for row in rows] == sorted(careful, key=lambda row: (row[1], row[0]))
