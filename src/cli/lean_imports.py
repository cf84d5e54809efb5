"""pyarrow without numpy, for a process that is the `goodput` command and nothing else.

pyarrow imports numpy whenever numpy is installed, only to convert to and from numpy arrays, which goodput never
does; numpy's import is a third of what a small command pays before its first query (0.08-0.17 s of 0.3-0.5 s,
measured with `python -X importtime`). `skip_numpy_for_pyarrow()` makes the first `import pyarrow` of the process run
as if numpy were absent, which pyarrow supports (numpy is optional to it), and leaves numpy importable afterwards. It
imports nothing itself, so `goodput --help` still imports no pyarrow at all.

Only the command's entry point may call it: in a library user's process pyarrow must keep its numpy interop.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _PyarrowWithoutNumpy(importlib.abc.MetaPathFinder):
    """Finds pyarrow's modules as the other finders do, and runs each one's import with numpy hidden, until some
    other module imports numpy (from then on pyarrow's later modules see it, as they would have)."""

    hiding = 0  # imports of pyarrow modules under way, nested: numpy is hidden while any is

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] != "pyarrow" or sys.modules.get("numpy", False) is not False:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _HidingNumpy(spec.loader, self)
        return spec


class _HidingNumpy(importlib.abc.Loader):
    def __init__(self, loader: Any, finder: _PyarrowWithoutNumpy) -> None:
        self.loader = loader
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        finder = self.finder
        if not finder.hiding:
            sys.modules["numpy"] = None  # type: ignore[assignment]  # `import numpy` raises ImportError meanwhile
        finder.hiding += 1
        try:
            self.loader.exec_module(module)
        finally:
            finder.hiding -= 1
            if not finder.hiding and sys.modules.get("numpy", False) is None:
                del sys.modules["numpy"]


def skip_numpy_for_pyarrow() -> None:
    """From now on, pyarrow's modules import without numpy (see the module's docstring)."""
    if "pyarrow" not in sys.modules and not any(isinstance(f, _PyarrowWithoutNumpy) for f in sys.meta_path):
        sys.meta_path.insert(0, _PyarrowWithoutNumpy())
