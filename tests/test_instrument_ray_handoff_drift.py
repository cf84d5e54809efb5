"""Keep the two halves of the Ray hand-off wired at review time rather than at runtime.

A method decorated with `accepts_trace_context` that no caller dispatches with a carrier silently starts its own
trace; a dispatch to an undecorated method only warns at runtime. This scans the repository's own code (src/ and
examples/) for the first and requires the second somewhere: `dispatch_with_trace_context(handle.<method>...)`, or a
by-name call that spreads `**trace_context_kwargs()` next to the method's name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("src", "examples")


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _method_name_of(expr: ast.expr) -> str | None:
    """`handle.method`, `handle.method.options(...)` -> "method"."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "options":
        expr = expr.func.value
    return expr.attr if isinstance(expr, ast.Attribute) else None


def decorated_and_dispatched(files: list[Path], root: Path) -> tuple[dict[str, str], set[str]]:
    """(method name -> where it is decorated, names dispatched with a carrier) over `files`."""
    decorated: dict[str, str] = {}
    dispatched: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _decorator_name(d) == "accepts_trace_context" for d in node.decorator_list
            ):
                decorated[node.name] = f"{path.relative_to(root)}:{node.lineno}"
            if not isinstance(node, ast.Call):
                continue
            if _decorator_name(node) == "dispatch_with_trace_context" and node.args:
                name = _method_name_of(node.args[0])
                if name:
                    dispatched.add(name)
            spreads_carrier = any(
                kw.arg is None
                and isinstance(kw.value, ast.Call)
                and _decorator_name(kw.value) == "trace_context_kwargs"
                for kw in node.keywords
            )
            if spreads_carrier:
                dispatched.update(
                    a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                )
                name = _method_name_of(node.func.value) if isinstance(node.func, ast.Attribute) else None
                if name and node.func.attr == "remote":
                    dispatched.add(name)
    return decorated, dispatched


def undispatched(root: Path) -> dict[str, str]:
    files = sorted(p for folder in SCANNED if (root / folder).is_dir() for p in (root / folder).rglob("*.py"))
    decorated, dispatched = decorated_and_dispatched(files, root)
    return {name: where for name, where in decorated.items() if name not in dispatched}


@pytest.mark.slow
def test_every_context_accepting_method_is_dispatched_with_a_carrier():
    assert undispatched(REPO) == {}


def test_the_drift_scan_flags_a_method_nobody_dispatches(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "actors.py").write_text(
        "from instrument import accepts_trace_context, dispatch_with_trace_context, trace_context_kwargs\n"
        "class Worker:\n"
        "    @accepts_trace_context\n"
        "    def wired(self): ...\n"
        "    @accepts_trace_context\n"
        "    async def streamed(self): ...\n"
        "    @accepts_trace_context\n"
        "    def by_name(self): ...\n"
        "    @accepts_trace_context\n"
        "    def forgotten(self): ...\n"
        "def drive(w, group):\n"
        "    dispatch_with_trace_context(w.wired)\n"
        "    dispatch_with_trace_context(w.streamed.options(num_returns='streaming'))\n"
        "    group.run_all_workers_single_data('by_name', **trace_context_kwargs())\n",
        encoding="utf-8",
    )
    assert list(undispatched(tmp_path)) == ["forgotten"]
