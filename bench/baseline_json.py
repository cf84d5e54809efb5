"""Baseline B of bench/ingest.py: DuckDB alone reads an OTLP JSON Lines file, for the same sums (several ways).

Each line is one export batch; DuckDB reads the lines, turns just the fields the sums need into typed structs
(start and end times, each attribute's key and string or int value), unnests batches down to spans and sums the
durations per (`rl.iteration`, `rl.bucket`). It reads no ids and keeps no attribute map, so it is a floor no
general-purpose loader can go under. Prints `iteration,bucket,sum_ns` rows (empty for a missing value) on stdout.

Formulations (`--formulation`), wall time of the whole process on the 1M-span bench trace (603 MB), 2 cores:
- `objects` (default: the formulation the issue names): `read_ndjson_objects` + `json_transform` + `unnest`,
  attributes picked with `list_filter`: 1.8-2.2 s (a list comprehension in place of `list_filter` times the same);
- `read-json-records`: `read_json` with the struct given as its column type and `records = true`, which parses each
  line once instead of twice: 1.5 s, the fastest (bench/ingest.py shows it as baseline B');
- `objects-map`: as `objects`, attributes looked up through `map_from_entries`: 4.0 s;
- `read-json`: as `read-json-records` but leaving `records` to DuckDB's detection: 8.1 s.
Usage: python bench/baseline_json.py FILE [--formulation NAME]
"""

from __future__ import annotations

import argparse
import sys

import duckdb

# Only what the sums need: the times, and each attribute's key with the two value kinds rl.bucket and rl.iteration use.
SPANS_STRUCT = (
    '{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"UBIGINT","endTimeUnixNano":"UBIGINT",'
    '"attributes":[{"key":"VARCHAR","value":{"stringValue":"VARCHAR","intValue":"BIGINT"}}]}]}]}]}'
)
SPANS_COLUMN_TYPE = (
    "STRUCT(scopeSpans STRUCT(spans STRUCT(startTimeUnixNano UBIGINT, endTimeUnixNano UBIGINT, "
    "attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, intValue BIGINT))[])[])[])[]"
)

_UNNEST_TO_SPANS = """
    resource_spans AS (SELECT unnest(batch.resourceSpans) AS resource_spans FROM batches),
    scope_spans AS (SELECT unnest(resource_spans.scopeSpans) AS scope_spans FROM resource_spans),
    spans AS (SELECT unnest(scope_spans.spans) AS span FROM scope_spans)
"""

_SUM_BY_LIST_FILTER = """
SELECT list_filter(span.attributes, lambda a: a.key = 'rl.iteration')[1].value.intValue AS iteration,
       list_filter(span.attributes, lambda a: a.key = 'rl.bucket')[1].value.stringValue AS bucket,
       sum(span.endTimeUnixNano - span.startTimeUnixNano) AS sum_ns
FROM spans GROUP BY ALL
"""

_SUM_BY_MAP = """
SELECT attributes['rl.iteration'].intValue AS iteration, attributes['rl.bucket'].stringValue AS bucket,
       sum(span.endTimeUnixNano - span.startTimeUnixNano) AS sum_ns
FROM (SELECT span, map_from_entries(span.attributes) AS attributes FROM spans) GROUP BY ALL
"""

FORMULATIONS = {
    "objects": f"""
        WITH batches AS (SELECT json_transform(json, '{SPANS_STRUCT}') AS batch FROM read_ndjson_objects($path)),
        {_UNNEST_TO_SPANS} {_SUM_BY_LIST_FILTER}""",
    "objects-map": f"""
        WITH batches AS (SELECT json_transform(json, '{SPANS_STRUCT}') AS batch FROM read_ndjson_objects($path)),
        {_UNNEST_TO_SPANS} {_SUM_BY_MAP}""",
    "read-json-records": f"""
        WITH batches AS (
            SELECT {{'resourceSpans': resourceSpans}} AS batch
            FROM read_json($path, format = 'newline_delimited', records = true,
                           columns = {{resourceSpans: '{SPANS_COLUMN_TYPE}'}})
        ),
        {_UNNEST_TO_SPANS} {_SUM_BY_LIST_FILTER}""",
    "read-json": f"""
        WITH batches AS (
            SELECT {{'resourceSpans': resourceSpans}} AS batch
            FROM read_json($path, format = 'newline_delimited', columns = {{resourceSpans: '{SPANS_COLUMN_TYPE}'}})
        ),
        {_UNNEST_TO_SPANS} {_SUM_BY_LIST_FILTER}""",
}
DEFAULT_FORMULATION = "objects"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--formulation", choices=sorted(FORMULATIONS), default=DEFAULT_FORMULATION)
    args = parser.parse_args()
    rows = duckdb.connect().execute(FORMULATIONS[args.formulation], {"path": args.path}).fetchall()
    out = sys.stdout
    for iteration, bucket, total_ns in rows:
        out.write(f"{'' if iteration is None else iteration},{bucket or ''},{total_ns}\n")


if __name__ == "__main__":
    main()
