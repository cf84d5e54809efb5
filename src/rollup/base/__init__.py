"""The vocabulary every room shares: the errors a user acts on, the normalized span row and its node columns,
the store's table names, DuckDB connections held to the memory limit, 64-bit columns shared with Arrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from instrument._lazy import lazy_exports

_HOMES: dict[str, str] = {
    "GoodputError": "errors",
    "InputError": "errors",
    "TraceFormatError": "errors",
    "OptionError": "errors",
}
__all__ = list(_HOMES)
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)

if TYPE_CHECKING:
    from .errors import GoodputError, InputError, OptionError, TraceFormatError
