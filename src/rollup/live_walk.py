"""The lineage of a few spans walked in Python (`goodput watch`): what `lineage.build_lineage` gives each span, for
the spans of one refresh and the pending spans below them, from their loaded ancestors.

A refresh brings a few hundred spans; the walk in SQL is some twenty statements, each a few milliseconds however
few the rows (bench/watch.py), where this walk is a dictionary lookup a span. It hands down what `lineage._walk`
hands down (a parent's effective iteration, the span that iteration is from, its chain of bucketed ancestors) and
says where each span's chain of loaded parents ends (the parent not read that a pending span waits for). A chain
caught in a parent cycle, or ids held by two spans, is left to the SQL walk (`Unwalked`): rare, and its rules for
them (the nearest visit counts) are the SQL's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .lineage import MAX_DEPTH

Key = tuple[int, int]  # (tkey, skey): a span's trace and id, as the walk joins them


@dataclass(frozen=True)
class Node:
    """What the walk reads of a span: its parent's id (None at a root), its id text, bucket flag and iteration."""

    pkey: int | None
    span_id: str
    bucketed: bool
    iteration: int | None


@dataclass(frozen=True)
class Lineage:
    """What one span inherits (LINEAGE's columns of `lineage.LINEAGE_COLUMNS` but `inverted_ns`, its own), and the
    parent id its chain of loaded parents ends at (`waits_for`: None at a root)."""

    eff_iteration: int | None
    ancestor_iteration: int | None
    ancestor_iteration_span: str | None
    bucketed_chain: tuple[str, ...]
    has_parent: bool
    waits_for: int | None


class Unwalked(Exception):
    """The walk met a parent cycle or an id held twice: the SQL walk takes these spans."""


@dataclass(frozen=True)
class _Handed:
    eff_iteration: int | None
    holder: str | None
    chain: tuple[str, ...]
    waits_for: int | None  # where the chain above this node ends (its own parent, when that is not loaded)


def walk(
    spans: dict[Key, Node], look_up: Callable[[set[Key]], dict[Key, Node]], not_loaded: Callable[[Key], bool]
) -> dict[Key, Lineage]:
    """The lineage of each of `spans` (the new spans and the pending ones below them). `look_up(keys)` gives the
    loaded spans among `keys` (those it does not give are not loaded); `not_loaded(key)` is True of a key known not
    to be loaded without asking (a parent pending spans already wait for). Raises Unwalked."""
    nodes = dict(spans)
    absent: set[Key] = set()
    wanted = {(t, n.pkey) for (t, _), n in spans.items() if n.pkey is not None}
    for _ in range(MAX_DEPTH + 1):  # every loaded ancestor, a generation at a time
        wanted = {key for key in wanted if key not in nodes and key not in absent}
        if not wanted:
            break
        known_absent = {key for key in wanted if not_loaded(key)}
        found = look_up(wanted - known_absent) if wanted - known_absent else {}
        absent |= wanted - found.keys()
        nodes.update(found)
        wanted = {(t, n.pkey) for (t, _), n in found.items() if n.pkey is not None}
    handed: dict[Key, _Handed] = {}

    def hand_down(key: Key) -> _Handed:
        """What loaded span `key` hands its children (`lineage._walk`'s reached rows), walked up iteratively."""
        path: list[Key] = []
        on_path: set[Key] = set()
        at = key
        while at not in handed:
            if at in on_path or len(path) > MAX_DEPTH:
                raise Unwalked("a parent cycle")
            path.append(at)
            on_path.add(at)
            parent = nodes[at].pkey
            up = None if parent is None else (at[0], parent)
            if up is None or up not in nodes:  # the top of the loaded chain: hands its own
                node = nodes[at]
                handed[at] = _Handed(
                    node.iteration,
                    node.span_id if node.iteration is not None else None,
                    (node.span_id,) if node.bucketed else (),
                    parent,
                )
                path.pop()
                break
            at = up
        for below in reversed(path):
            node = nodes[below]
            assert node.pkey is not None
            above = handed[(below[0], node.pkey)]
            handed[below] = _Handed(
                node.iteration if node.iteration is not None else above.eff_iteration,
                node.span_id if node.iteration is not None else above.holder,
                (*above.chain, node.span_id) if node.bucketed else above.chain,
                above.waits_for,
            )
        return handed[key]

    out: dict[Key, Lineage] = {}
    for key, node in spans.items():
        parent = None if node.pkey is None else (key[0], node.pkey)
        if parent is None or parent not in nodes:
            out[key] = Lineage(node.iteration, None, None, (), False, node.pkey)
            continue
        above = hand_down(parent)
        own = node.iteration if node.iteration is not None else above.eff_iteration
        out[key] = Lineage(own, above.eff_iteration, above.holder, above.chain, True, above.waits_for)
    return out


def unique_keys(keys: Iterable[Key]) -> bool:
    """Whether no key is given twice (two spans with one id: the SQL walk's nearest-visit rule applies)."""
    seen: set[Key] = set()
    for key in keys:
        if key in seen:
            return False
        seen.add(key)
    return True
