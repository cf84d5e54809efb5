"""Columns of OTLP JSON records, as DuckDB's `json_transform` hands them over in Arrow, normalized to the span row.

Ids to lowercase hex (from hex as the OTLP spec writes them, or base64 as protobuf's own JSON mapping and Grafana
Tempo do), enums from names or numbers, 64-bit times from digits or numbers, attribute lists to maps of rendered
text. Column by column with Arrow compute; Python only for the rare values Arrow cannot take (base64 ids, bytes,
arrays and maps), each rendered as the protobuf reader renders it.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from rollup.base.schema import ATTRIBUTE_MAP

from ..values import RENDER_SCALARS_SQL, render_value
from .json_shape import VALUE, json_any_value, json_integer

if TYPE_CHECKING:
    import duckdb

_VALUE_CACHE_LIMIT = 200_000


class BadRow(Exception):
    """A value of row `row` (of the column being normalized) that cannot be read; the caller names its line.

    `path` is where the value sits within that row's JSON object (`("attributes", 3, "value", "intValue")`), so a
    record of many lines (a pretty-printed document) can be named by the line the value itself is on
    (`json_positions`). A caller that hands the row on to its parent's column prefixes the path (`within`).
    """

    def __init__(self, row: int, problem: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(problem)
        self.row = row
        self.problem = problem
        self.path = path

    def within(self, row: int, problem: str, *prefix: str | int) -> BadRow:
        """The same bad value, seen from the row `row` of the enclosing column, under `prefix` there."""
        return BadRow(row, problem, (*prefix, *self.path))


class NeedsFullTransform(Exception):
    """A goodput attribute holds a kind of value the lean transform does not read."""


def field(array: pa.Array, name: str) -> pa.Array:
    """A struct array's child `name` with the struct's own nulls applied (a missing object reads as nulls)."""
    return pc.struct_field(array, name)


def enum(texts: pa.Array, names: dict[str, int]) -> pa.Array:
    """An OTLP enum column given as numbers or (proto3 JSON) names; missing is 0, an unknown name null."""

    def number(text: str | None) -> int | None:
        if text is None:
            return 0
        if text in names:
            return names[text]
        return json_integer(text)

    encoded = pc.dictionary_encode(texts, null_encoding="encode")
    return pa.array([number(text) for text in encoded.dictionary.to_pylist()], pa.int64()).take(encoded.indices)


def hex_ids(texts: pa.Array, byte_length: int) -> pa.Array:
    """Ids of `byte_length` bytes as lowercase hex, from hex or from padded base64 (24 characters for a 16-byte trace
    id, 12 for an 8-byte span id: never a valid hex id of either length). Anything else is left as written, in lower
    case, for the id check to report."""
    lowered = pc.utf8_lower(texts)
    base64_length = 4 * -(-byte_length // 3)
    candidates = pc.and_(pc.equal(pc.utf8_length(texts), base64_length), pc.ends_with(texts, "=")).fill_null(False)
    if not pc.any(candidates).as_py():
        return lowered
    rows = pc.indices_nonzero(candidates)
    decoded = [_base64_hex(text, byte_length) for text in texts.take(rows).to_pylist()]
    mask = pc.replace_with_mask(candidates, candidates, pa.array([hex_id is not None for hex_id in decoded]))
    return pc.replace_with_mask(lowered, mask, pa.array([hex_id for hex_id in decoded if hex_id], pa.string()))


def _base64_hex(text: str, byte_length: int) -> str | None:
    try:
        raw = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == byte_length else None


def times(texts: pa.Array, key: str, whose: str = "a span") -> pa.Array:
    """Times written as digits or numbers (proto3 JSON's uint64) as int64; missing is 0, as protobuf omits it.

    `key` is the field they were read from (`startTimeUnixNano`), `whose` what holds it: BadRow names both."""
    try:
        return pc.cast(texts, pa.int64()).fill_null(0)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        parsed = [None if text is None else json_integer(text) for text in texts.to_pylist()]
        unusable = (
            row for row, value in enumerate(parsed) if texts[row].is_valid and (value is None or value >= 1 << 63)
        )
        bad = next(unusable, None)
        if bad is not None:
            problem = f"{whose} has {key} {texts[bad].as_py()!r}, expected an integer count of nanoseconds"
            raise BadRow(bad, problem, (key,)) from None
        return pa.array(parsed, pa.int64()).fill_null(0)


def first_corrupt_int(texts: pa.Array) -> int | None:
    """The first row of an `intValue` column (as written: digits, or a number's text) that holds no int64, which
    `values.RENDER_SCALARS_SQL` would render as nothing; None when every one is an int64 or missing."""
    if texts.null_count == len(texts):
        return None
    try:
        pc.cast(texts, pa.int64())  # digits with an optional minus, within int64: what json_integer accepts
        return None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return next(
            row for row, text in enumerate(texts.to_pylist()) if text is not None and json_integer(text) is None
        )


def list_offsets(lists: pa.Array) -> pa.Array:
    """int32 offsets of a list column, a missing list counted as empty."""
    lengths = pc.list_value_length(lists).fill_null(0)
    return pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths.cast(pa.int32()))])


class AttributeRenderer:
    """Renders OTLP JSON attribute lists to maps of text with one DuckDB connection: scalars by DuckDB
    (`values.RENDER_SCALARS_SQL`), bytes, arrays and maps by Python, each distinct JSON text once."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self.connection = connection
        self._value_cache: dict[tuple[str, str], str | None] = {}

    def maps(self, lists: pa.Array, names: Callable[[str], str], keep: frozenset[str] | None = None) -> pa.MapArray:
        """One map per list (a missing list is an empty map); BadRow names the list of a value that does not decode.

        With `keep`, each map holds only those keys (a projection that leaves the full maps out). Value kinds the
        transform did not ask for read as missing; a kept entry left without text then raises NeedsFullTransform.
        """
        offsets = list_offsets(lists)
        entries = lists.flatten()
        keys = field(entries, "key").fill_null("")
        self._refuse_corrupt_ints(entries, keys, offsets, names)
        if keep is not None:  # only these keys are wanted: drop the others before rendering anything
            wanted = pc.is_in(keys, value_set=pa.array(sorted(keep), pa.string()))
            offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(wanted.cast(pa.int32()))]).take(
                offsets
            )
            entries, keys = entries.filter(wanted), keys.filter(wanted)
        if not len(entries):  # no attribute at all (events and links, mostly): nothing to ask DuckDB
            empty = pa.array([], pa.string())
            return pa.MapArray.from_arrays(offsets, empty, empty, type=ATTRIBUTE_MAP)
        values = field(entries, "value")
        transformed = {child.name for child in values.type}

        def kind(name: str, type_: pa.DataType) -> pa.Array:
            return field(values, names(name)) if names(name) in transformed else pa.nulls(len(values), type_)

        scalars = pa.table(
            {
                "s": kind("stringValue", pa.string()),
                "b": kind("boolValue", pa.bool_()),
                "i": kind("intValue", pa.string()),
                "d": kind("doubleValue", pa.float64()),
            }
        )
        self.connection.register("goodput_values", scalars)
        try:
            rendered = self.connection.sql(RENDER_SCALARS_SQL.format(relation="goodput_values")).to_arrow_table()
            texts = rendered.column("text").combine_chunks()
        finally:
            self.connection.unregister("goodput_values")
        if len(texts) != len(keys):  # DuckDB keeps a plain projection's row order; make sure it did
            raise RuntimeError("attribute rendering lost rows")
        if len(transformed) < len(VALUE):  # a lean transform: only strings and ints, which DuckDB rendered
            if texts.null_count:
                raise NeedsFullTransform
            return pa.MapArray.from_arrays(offsets, keys, texts, type=ATTRIBUTE_MAP)
        others = {name: field(values, names(name)) for name in ("bytesValue", "arrayValue", "kvlistValue")}
        unrendered = pc.and_(pc.is_null(texts), pc.is_valid(pc.coalesce(*others.values())))
        if pc.any(unrendered).as_py():
            texts = self._render_others(texts, unrendered, others, offsets)
        return pa.MapArray.from_arrays(offsets, keys, texts, type=ATTRIBUTE_MAP)

    @staticmethod
    def _refuse_corrupt_ints(entries: pa.Array, keys: pa.Array, offsets: pa.Array, names: Callable[[str], str]) -> None:
        """BadRow for the first entry whose `intValue` is no int64 (`"notanint"`, `1.5`, past 64 bits): a corrupt
        value, an error as corruption is (SPEC section 3), not an attribute quietly left empty. Every entry is
        looked at, the ones a lean read leaves out included, so both reads fail the same file."""
        values = field(entries, "value") if len(entries) else None
        if values is None or names("intValue") not in {child.name for child in values.type}:
            return
        ints = field(values, names("intValue"))
        bad = first_corrupt_int(ints)
        if bad is None:
            return
        row = bisect.bisect_right(offsets.to_pylist(), bad) - 1
        problem = (
            f"attribute {keys[bad].as_py()!r} has intValue {ints[bad].as_py()!r}, "
            "expected a 64-bit integer (as a string or a number)"
        )
        raise BadRow(row, problem, ("attributes", bad - offsets[row].as_py(), "value", "intValue"))

    def _render_others(
        self, texts: pa.Array, unrendered: pa.Array, others: dict[str, pa.Array], offsets: pa.Array
    ) -> pa.Array:
        """Bytes, arrays and maps, rendered in Python (each distinct JSON text once)."""
        rows = pc.indices_nonzero(unrendered).to_pylist()
        columns = {name: column.take(pa.array(rows, pa.int64())).to_pylist() for name, column in others.items()}
        rendered = []
        for position, row in enumerate(rows):
            name, raw = next((name, items[position]) for name, items in columns.items() if items[position] is not None)
            key = (name, raw)
            if key not in self._value_cache:
                if len(self._value_cache) > _VALUE_CACHE_LIMIT:
                    self._value_cache.clear()
                try:
                    value = raw if name == "bytesValue" else json.loads(raw)
                    self._value_cache[key] = render_value(json_any_value({name: value}))
                except (ValueError, RecursionError) as error:
                    span = bisect.bisect_right(offsets.to_pylist(), row) - 1
                    where = ("attributes", row - offsets[span].as_py(), "value", name)
                    raise BadRow(span, f"an attribute value does not decode ({error})", where) from None
            rendered.append(self._value_cache[key])
        return pc.replace_with_mask(texts, unrendered, pa.array(rendered, pa.string()))
