"""Where a value sits in the text of an OTLP JSON record: the line it is on in a pretty-printed document.

The careful reader (`otlp_json`) learns that a value is bad from DuckDB's columns, which keep no positions: it knows
the value by its place in the nesting (`SpanPlaces`: the resource spans, scope spans and span it belongs to, and
within that the key, `json_columns.BadRow.path`). `line_within` walks the record's own text along that path,
stepping over the values beside it with Python's JSON scanner (in C), and gives the line the value's key is on.
So an error names the line of the bad value itself, never that of another value holding the same text. Only an
error pays for the walk, and only in a record of many lines: a JSON Lines record is all on its own line. Text that
is not JSON at all is placed by Python's own parser (`json_problem`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .json_shape import LEGACY_NAMES, WRAPPER, snake_name

Path = tuple[str | int, ...]

_BLANK = re.compile(r"[ \t\n\r]*")
_SCANNER = json.JSONDecoder()
# The other names a record's keys are read under (`json_shape`): Tempo's wrapper, the pre-1.0 names.
_OTHER_NAMES = {"resourceSpans": (WRAPPER,), **{today: (legacy,) for today, legacy in LEGACY_NAMES.items()}}


def list_item(lists: pa.Array, row: int) -> tuple[int, int]:
    """(the list that holds row `row` of the flattened `lists`, the row's index within that list)."""
    parents = pc.list_parent_indices(lists)
    parent = parents[row].as_py()
    return parent, row - pc.index(parents, parent).as_py()


class SpanPlaces:
    """Where each resource spans and each span of a decoded block came from: its record, and its path there.

    Built from the nested lists the transform gave (`rss`, one list per record; `scope_lists`, one per resource
    spans; `span_lists`, one per scope spans), whose flattened rows the batch's columns follow.
    """

    def __init__(self, rss: pa.Array, scope_lists: pa.Array | None = None, span_lists: pa.Array | None = None) -> None:
        self._lists = (rss, scope_lists, span_lists)

    def _parent(self, level: int, row: int) -> tuple[int, int]:
        lists = self._lists[level]
        assert lists is not None, "a span's place asked of resource spans alone"
        return list_item(lists, row)

    def resource(self, row: int) -> tuple[int, Path]:
        """(record, path) of resource spans `row`."""
        record, index = self._parent(0, row)
        return record, ("resourceSpans", index)

    def span(self, row: int) -> tuple[int, Path]:
        """(record, path) of span `row`."""
        scope_row, index = self._parent(2, row)
        resource_row, scope_index = self._parent(1, scope_row)
        record, path = self.resource(resource_row)
        return record, (*path, "scopeSpans", scope_index, "spans", index)


def json_problem(text: bytes) -> tuple[str, int]:
    """What Python's parser says is wrong with the JSON `text`, and on which of its lines (1 when it cannot say)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"{error.msg} (column {error.colno})", error.lineno
    except (ValueError, RecursionError) as error:
        return str(error) or type(error).__name__, 1
    return "rejected by the JSON parser", 1


def line_within(text: bytes, path: Path) -> int:
    """How many lines into the record `text` the value at `path` is (the line of its key; of its first character
    for an element of a list): 0 for a record on one line, or when the path cannot be followed (the record's own
    line is then the best there is). Keys are matched under every name the readers accept (proto3 JSON's
    snake_case, Tempo's wrapper, the pre-1.0 names)."""
    if b"\n" not in text.rstrip():
        return 0
    try:
        document = text.decode("utf-8")
        _, position = _walk(document, _skip(document, 0), path)
    except (UnicodeDecodeError, ValueError, IndexError, RecursionError):
        return 0
    return document.count("\n", 0, position)


def _skip(text: str, position: int) -> int:
    match = _BLANK.match(text, position)
    return match.end() if match else position


def _walk(text: str, position: int, path: Path) -> tuple[int, int]:
    """(steps of `path` followed, position reached) from the value at `position`. Of several keys that may hold a
    step (a record with `resourceSpans` and `batches`), the one that leads furthest."""
    if not path:
        return 0, position
    step, rest = path[0], path[1:]
    if isinstance(step, int):
        if not text.startswith("[", position):
            return 0, position
        for index, element in enumerate(_elements(text, position)):
            if index == step:
                followed, reached = _walk(text, element, rest)
                return followed + 1, reached
        return 0, position
    if not text.startswith("{", position):
        return 0, position
    names = _spellings(step)
    best = (0, position)
    for key, key_at, value_at in _members(text, position):
        if key in names:
            followed, reached = _walk(text, value_at, rest) if rest else (0, key_at)
            if not followed:
                reached = key_at
            if followed == len(rest):
                return followed + 1, reached
            best = max(best, (followed + 1, reached), key=lambda pair: pair[0])
    return best


def _spellings(key: str) -> set[str]:
    names = (key, *_OTHER_NAMES.get(key, ()))
    return {spelling for name in names for spelling in (name, snake_name(name))}


def _members(text: str, position: int) -> Iterator[tuple[str, int, int]]:
    """(key, where the key starts, where its value starts) of each member of the object at `position`; a value not
    descended into is stepped over once the caller asks for the next member."""
    position = _skip(text, position + 1)
    while text.startswith('"', position):
        key, after = _SCANNER.raw_decode(text, position)
        colon = _skip(text, after)
        if not text.startswith(":", colon):
            return
        value_at = _skip(text, colon + 1)
        yield key, position, value_at
        _, end = _SCANNER.raw_decode(text, value_at)
        position = _skip(text, end)
        if not text.startswith(",", position):
            return
        position = _skip(text, position + 1)


def _elements(text: str, position: int) -> Iterator[int]:
    """Where each element of the list at `position` starts."""
    position = _skip(text, position + 1)
    if text.startswith("]", position):
        return
    while True:
        yield position
        _, end = _SCANNER.raw_decode(text, position)
        position = _skip(text, end)
        if not text.startswith(",", position):
            return
        position = _skip(text, position + 1)
