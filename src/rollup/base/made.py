"""A sequence whose items are made when they are read, and then let go: what a long answer hands to a writer in
place of a list (a report's rows, a run's critical paths), so that writing it never holds it all."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar, overload

_Item = TypeVar("_Item")


class MadeOnRead(Sequence[_Item]):
    """`length` items, item `i` being `make(i)`, made each time it is read."""

    def __init__(self, length: int, make: Callable[[int], _Item]) -> None:
        self._length, self._make = length, make

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> _Item: ...
    @overload
    def __getitem__(self, index: slice) -> list[_Item]: ...
    def __getitem__(self, index: int | slice) -> _Item | list[_Item]:
        if isinstance(index, slice):
            return [self._make(i) for i in range(self._length)[index]]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(index)
        return self._make(index)

    def __iter__(self) -> Iterator[_Item]:
        return (self._make(i) for i in range(self._length))
