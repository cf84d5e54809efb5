"""A boxed table fitted to a terminal too narrow for it, with every figure whole.

Left to itself, rich shrinks every column alike once the wide ones are folded, and cuts numbers ("0.95" for 0.956).
Here each column says how it gives way (`Fit`), and the first plan that fits is drawn. The columns marked to go
first are left out, named in a line below (ids only a script needs, the report's span-seconds); then headers wrap
onto two lines or take a short form, names are shortened (a process keeps its service name, a span name its tail;
a legend below gives them in full)
and text folds between words; then the columns marked to go next go, and so on; last, words break too. Long text
(a check's message) goes below the table as numbered notes, and once there are notes the columns marked to go join
them instead of being lost. If even that is too wide, the table is split into parts one below the other, each
repeating its key columns. A figure is never folded, cut or elided.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len, chop_cells

Kind = Literal["figure", "id", "text", "elide"]

LONG_TEXT = 40  # a text column wider than this is prose: folded at no less than this, else written below the table
TEXT_MIN = 12  # text folds no narrower than this (or its own width)
ELIDE_MIN = 6  # nor is a name shortened below this ("…" and five characters), nor below what tells names apart
_BREAKS = " _/-.@:,;"  # where a word may break when it is wider than its column


@dataclass(frozen=True)
class Fit:
    """How a column gives way when the table is too wide.

    `kind`: a figure or an id is never folded or shortened; text folds; an `elide` column (process and span names)
    is shortened with an ellipsis (`elide`), a legend below giving each in full. `drop`: left out at narrow
    widths, lowest number first (0: kept). `short`: the header to use when the full one does not fit its column
    even on two lines. `key`: repeated in each part when the table must be split into parts one below the other
    (else the row number is).
    """

    kind: Kind = "text"
    drop: int = 0
    short: str | None = None
    key: bool = False


def fold(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells, broken at spaces, a word wider than that after one of `_BREAKS`
    and, as a last resort, anywhere."""
    lines = _fold(text, width, hard=True)
    assert lines is not None
    return lines


def _fold(text: str, width: int, *, hard: bool) -> list[str] | None:
    """`fold`; without `hard`, None where a word would have to be cut between two of `_BREAKS`."""
    width = max(width, 1)
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            joined = f"{line} {word}" if line else word
            if cell_len(joined) <= width:
                line = joined
                continue
            if line and cell_len(word) > width:  # a word too wide for any line starts beside the text before it
                cut = _break_at(word, width - cell_len(line) - 1)
                if cut:
                    line, word = f"{line} {word[:cut]}", word[cut:]
            if line:
                lines.append(line)
            while cell_len(word) > width:
                cut = _break_at(word, width)
                if not cut and not hard:
                    return None
                head = word[:cut] if cut else chop_cells(word, width)[0]
                lines.append(head)
                word = word[len(head) :]
            line = word
        lines.append(line)
    return lines


def _break_at(word: str, room: int) -> int:
    """Where to break `word` so that its head fits in `room` cells: after the last of `_BREAKS` that does (0: none)."""
    cut = max((i + 1 for i, ch in enumerate(word[: max(room, 0)]) if ch in _BREAKS and i > 0), default=0)
    return cut if cut and cell_len(word[:cut]) <= room else 0


def elide(text: str, width: int, *, with_pid: bool = False) -> str:
    """`text` in `width` cells when it is wider. A process name (`service@host:pid`, `instance [host:pid]`, SPEC
    section 1) keeps its service or instance name first: whole, then as much of its tail as fits after "…"; or,
    when the name alone does not fit, its start before "…", and with `with_pid` its pid after (`grpo-dr…:12253`:
    what tells apart two processes of one service). Other text keeps its tail behind "…" (a span name's last
    part)."""
    if cell_len(text) <= width:
        return text
    cut = min((i for i in (text.find("@"), text.find(" [")) if i > 0), default=-1)
    if cut < 0:
        return "…" + _tail(text, width - 1)
    head = text[:cut]
    if cell_len(head) + 2 <= width:
        return head + "…" + _tail(text[cut:], width - cell_len(head) - 1)
    pid = text[text.rfind(":") :] if with_pid and text.rfind(":") > cut else ""
    room = width - 1 - cell_len(pid)
    if room < 1:
        return "…" + _tail(text, width - 1)
    return chop_cells(head, room)[0] + "…" + pid


def shortened(values: Sequence[str], width: int) -> dict[str, str]:
    """Each of `values` as `elide` shortens it to `width`, the pids kept only when the names alone do not tell
    the values apart (two processes of one service)."""
    distinct = {v for v in values if v}
    plain = {v: elide(v, width) for v in distinct}
    if len(set(plain.values())) == len(distinct):
        return plain
    return {v: elide(v, width, with_pid=True) for v in distinct}


def _tail(text: str, width: int) -> str:
    """The end of `text` in at most `width` cells."""
    tail = text[len(text) - max(width, 0) :]
    while tail and cell_len(tail) > width:
        tail = tail[1:]
    return tail


def _header_lines(header: str, short: str | None, width: int) -> list[str] | None:
    """The header in at most two lines of `width`, broken only between words; then the short form; else None."""
    for text in (header, short):
        if text is None:
            continue
        lines = _fold(text, width, hard=False)
        if lines is not None and len(lines) <= 2:
            return lines
    return None


def _header_min(header: str, short: str | None) -> int:
    return next(w for w in range(1, cell_len(header) + 1) if _header_lines(header, short, w) is not None)


def _elide_min(values: Sequence[str], natural: int) -> int:
    """The narrowest width (at least ELIDE_MIN) at which the shortened names are still told apart."""
    distinct = {v for v in values if v}
    width = min(natural, ELIDE_MIN)
    while width < natural and len(set(shortened(list(distinct), width).values())) < len(distinct):
        width += 1
    return width


@dataclass
class _Plan:
    kept: list[int]  # columns in the table, in order
    noted: list[int]  # columns written below it, per row
    dropped: list[int]  # columns left out (only while there are no notes)


_NUMBER = -1  # the column of row numbers, shown when rows have notes or the table is split


def fit_table_text(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    fits: Sequence[Fit],
    *,
    width: int,
    right: Sequence[bool],
    title: str | None = None,
    title_justify: str = "center",
    section_at: int | None = None,
) -> str:
    """The table at `width` columns by the first plan that fits (see the module's docstring)."""
    count = len(headers)
    data = [max((cell_len(row[i]) for row in rows), default=0) for i in range(count)]
    long_text = [i for i in range(count) if fits[i].kind == "text" and data[i] > LONG_TEXT]
    levels = sorted({fit.drop for fit in fits if fit.drop})
    elide_min = {i: _elide_min([row[i] for row in rows], data[i]) for i in range(count) if fits[i].kind == "elide"}
    header_min = [_header_min(h, fit.short) for h, fit in zip(headers, fits, strict=True)]
    number_width = len(str(len(rows)))
    longest_word = [
        max((cell_len(word) for row in rows for word in row[i].split(" ")), default=0) if fits[i].kind == "text" else 0
        for i in range(count)
    ]

    def dropped_at(level: int) -> list[int]:
        return [i for i in range(count) if fits[i].drop and fits[i].drop in levels[:level]]

    def plans() -> Iterator[tuple[_Plan, tuple[int, ...]]]:
        """Each plan with the stages to try it at (see `widths_for`): the first columns to go go before any header
        wraps, the next only once headers wrap and names are shortened, and words break only once all are gone."""
        last = len(levels)
        for level in range(last + 1):
            stages = (0,) if level == 0 and levels else (0, 1, 2, 3) if level == last else (0, 1, 2)
            if long_text:
                if level == 0:
                    yield _Plan(list(range(count)), [], []), stages
                noted = sorted(set(long_text) | set(dropped_at(level)))
                yield _Plan([i for i in range(count) if i not in noted], noted, []), stages
            else:
                dropped = dropped_at(level)
                yield _Plan([i for i in range(count) if i not in dropped], [], dropped), stages

    def widths_for(columns: Sequence[int], stage: int, fixed: Sequence[int] = ()) -> list[int] | None:
        """Content widths of `columns` at stage 0 (headers on one line), 1 (headers wrapped or short), 2 (names
        shortened, text folded between words; those in `fixed` no wider than that) or 3 (words broken too); None
        when they do not fit."""
        mins, room = [], []
        for i in columns:
            if i == _NUMBER:
                mins.append(number_width)
                room.append(0)
                continue
            head = cell_len(headers[i]) if stage == 0 else header_min[i]
            kind = fits[i].kind
            if i in long_text:
                low = max(LONG_TEXT, head)
            elif stage >= 2 and kind == "text":
                low = max(min(data[i], TEXT_MIN if stage == 3 else max(TEXT_MIN, longest_word[i])), head)
            elif stage >= 2 and kind == "elide":
                low = max(elide_min[i], head)
            else:
                low = max(data[i], head)
            mins.append(low)
            room.append(0 if i in fixed else max(data[i], head) - low)
        spare = width - sum(mins) - 3 * len(mins) - 1
        if spare < 0:
            return None
        # What is left goes to folded text first, the widest shortfall first, then to shortened names.
        for kinds in (("text",), ("elide",)):
            while spare:
                wanting = [k for k, i in enumerate(columns) if room[k] and fits[i].kind in kinds]
                if not wanting:
                    break
                k = max(wanting, key=lambda k: room[k])
                mins[k] += 1
                room[k] -= 1
                spare -= 1
        return mins

    def draw(plan: _Plan, blocks: list[tuple[list[int], list[int]]]) -> str:
        return _draw(headers, rows, fits, plan, blocks, right, width, title, title_justify, section_at)

    for plan, stages in plans():
        columns = ([_NUMBER] if plan.noted else []) + plan.kept
        for stage in stages:
            widths = widths_for(columns, stage)
            if widths is not None:
                return draw(plan, [(columns, widths)])
    # Last resort: the table split into parts one below the other, each repeating the key columns (else the row
    # number) at the same width, the other columns shared out evenly among as few parts as fit.
    keys = [i for i in plan.kept if fits[i].key] or [_NUMBER]
    if plan.noted and _NUMBER not in keys:
        keys = [_NUMBER, *keys]
    rest = [i for i in plan.kept if i not in keys]
    for parts in range(1, len(rest) + 1):
        size, extra = divmod(len(rest), parts)
        groups, start = [], 0
        for part in range(parts):
            end = start + size + (part < extra)
            groups.append(keys + rest[start:end])
            start = end
        sized = [(group, widths_for(group, 3, keys)) for group in groups]
        if all(w is not None for _, w in sized):
            return draw(plan, [(group, w or []) for group, w in sized])
    return _notes_only(headers, rows, width, title)


def _draw(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    fits: Sequence[Fit],
    plan: _Plan,
    blocks: list[tuple[list[int], list[int]]],
    right: Sequence[bool],
    width: int,
    title: str | None,
    title_justify: str,
    section_at: int | None,
) -> str:
    """The table (or its blocks, one below the other), then the notes, the legend of shortened names and what was
    left out."""
    legend: dict[int, dict[str, str]] = {}  # column: {shortened: full}
    short_forms: dict[tuple[int, int], dict[str, str]] = {}  # (column, width): {full: shortened}

    def cell(row_index: int, i: int, size: int) -> str:
        if i == _NUMBER:
            return str(row_index + 1)
        text = rows[row_index][i]
        if fits[i].kind == "elide" and cell_len(text) > size:
            forms = short_forms.get((i, size))
            if forms is None:
                forms = short_forms[(i, size)] = shortened([row[i] for row in rows], size)
            short = forms[text]
            legend.setdefault(i, {}).setdefault(short, text)
            return short
        return text

    out: list[str] = []
    for number, (columns, widths) in enumerate(blocks):
        if number:
            out.append("")
        elif title is not None:
            table_width = sum(widths) + 3 * len(widths) + 1
            if cell_len(title) <= table_width:
                pad_left = 0 if title_justify == "left" else (table_width - cell_len(title)) // 2
                out.append(" " * pad_left + title)
            else:
                out += fold(title, width)
        heads = [
            "#" if i == _NUMBER else "\n".join(_header_lines(headers[i], fits[i].short, size) or [headers[i]])
            for i, size in zip(columns, widths, strict=True)
        ]
        body = ([cell(index, i, size) for i, size in zip(columns, widths, strict=True)] for index in range(len(rows)))
        flush = [True if i == _NUMBER else right[i] for i in columns]
        out += _boxed(heads, body, widths, flush, section_at)
    for index, row in enumerate(rows):
        out += _note(index + 1, [(headers[i], row[i]) for i in plan.noted], width)
    for i, names in legend.items():
        out += [line for short, full in names.items() for line in fold(f"{headers[i]} {short} is {full}", width)]
    if plan.dropped:
        left_out = ", ".join(headers[i] for i in plan.dropped)
        out += fold(f"left out at {width} columns: {left_out}; --format csv has them", width)
    return "\n".join(out) + "\n"


def _boxed(
    heads: Sequence[str],
    body: Iterable[Sequence[str]],
    widths: Sequence[int],
    flush: Sequence[bool],
    section_at: int | None,
) -> list[str]:
    """The lines of a boxed table as rich draws one; a cell wider than its column folds onto more lines."""

    def pad(text: str, size: int, to_right: bool) -> str:
        gap = " " * (size - cell_len(text))
        return f" {gap}{text} " if to_right else f" {text}{gap} "

    def lines(cells: Sequence[str], edge: str, bottom: bool) -> list[str]:
        """One row, as the lines it takes (headers sit at the bottom of theirs, cells at the top)."""
        if all(cell_len(c) <= w and "\n" not in c for c, w in zip(cells, widths, strict=True)):
            parts = (pad(c, w, f) for c, w, f in zip(cells, widths, flush, strict=True))
            return [(edge + edge.join(parts) + edge).rstrip()]
        stacks = [fold(c, w) for c, w in zip(cells, widths, strict=True)]
        height = max(len(s) for s in stacks)
        stacks = [([""] * (height - len(s)) + s) if bottom else (s + [""] * (height - len(s))) for s in stacks]
        return [
            (edge + edge.join(pad(s[n], w, f) for s, w, f in zip(stacks, widths, flush, strict=True)) + edge).rstrip()
            for n in range(height)
        ]

    def rule(left: str, fill: str, middle: str, end: str) -> str:
        return left + middle.join(fill * (size + 2) for size in widths) + end

    out = [rule("┏", "━", "┳", "┓"), *lines(heads, "┃", True), rule("┡", "━", "╇", "┩")]
    for index, cells in enumerate(body):
        if index == section_at:
            out.append(rule("├", "─", "┼", "┤"))
        out += lines(cells, "│", False)
    out.append(rule("└", "─", "┴", "┘"))
    return out


def _note(number: int, fields: Sequence[tuple[str, str]], width: int) -> list[str]:
    """`1. header: value  header: value`, the short fields packed on a line, a long one folded on lines of its
    own; nothing for a row whose noted fields are all empty."""
    prefix = f"{number}. "
    room = max(width - len(prefix), 1)
    lines: list[str] = []
    current = ""
    for header, value in fields:
        if not value:
            continue
        text = f"{header}: {value}"
        if current and cell_len(current) + 2 + cell_len(text) <= room:
            current += "  " + text
            continue
        if current:
            lines.append(current)
        current = text
        if cell_len(text) > room:
            *full, current = fold(text, room)
            lines += full
    if current:
        lines.append(current)
    return [(prefix if n == 0 else " " * len(prefix)) + line for n, line in enumerate(lines)]


def _notes_only(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, title: str | None) -> str:
    """Every row as a note, when not even one column and its number fit beside each other."""
    out = fold(title, width) if title is not None else []
    for index, row in enumerate(rows):
        out += _note(index + 1, list(zip(headers, row, strict=True)), width)
    return "\n".join(out) + "\n"
