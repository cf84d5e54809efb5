"""The code's seams: the front doors, the import graph, and each rule that lives in Python and SQL held to one answer
on one input."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import rollup
from instrument.wire import (
    EVALUATE_SPAN_NAME,
    JOB_SPAN_NAME,
    SETUP_SPAN_NAME,
    STARTUP_SPAN_NAME,
    STEP_SPAN_NAME,
    efficiency_span_name,
)
from rollup.base.schema import IS_JOB_SQL, IS_STEP_SQL, IS_UMBRELLA_SQL
from rollup.read.formats.json_shape import LEAN_RECORD, RECORD, duckdb_type
from rollup.read.values import (
    PROCESS_KEYS,
    RENDER_SCALARS_SQL,
    canonical_int_sql,
    process_key,
    process_key_sql,
    render_value,
    string_or_int_sql,
)

SRC = Path(rollup.__file__).resolve().parent.parent

# What a library user calls (open a store; report, check, critical, diff, timeline, spans, ingest; `SpanStore.sql` is
# query), the options and results they take and give, the Ray runner, and the error family. Everything else is reached
# through its room (`rollup.report.FIGURES`, `rollup.watch.LiveRun`, ...).
FRONT_DOOR = {
    "open_store", "SpanStore", "ingest", "build_report", "Report", "ReportOptions", "report_json",
    "check_findings", "Check", "CheckOptions", "Finding", "build_critical", "CriticalOptions",
    "measure", "compare", "Diff", "build_timeline", "Timeline", "spans_in_window", "RayRunner",
    "GoodputError", "InputError", "TraceFormatError", "OptionError",
}  # fmt: skip

# The rooms of `rollup`, each a folder answering one question, and the rooms each may import (besides its own). The
# order runs from the bottom up: reading a room needs only the rooms below it.
MAY_IMPORT = {
    "base": set(),  # the vocabulary: errors, the span row, table names, connections, 64-bit columns
    "read": {"base"},  # trace files in, Arrow and Parquet out
    "store": {"base", "read"},  # the spans kept, their lineage, the sets every question takes
    "accounting": {"base", "read", "store"},  # windows, frames, charges, GPU-seconds, the rows
    "checks": {"base", "store", "accounting"},  # the rules
    "critical": {"base", "store", "accounting"},  # what each step waited on
    "lint": {"base"},  # source, before the job runs
    "report": {"base", "store", "accounting", "checks", "critical"},  # the report, its JSON and figures, diff
    "timeline": {"base", "store", "accounting", "critical"},  # spans in a window, the Perfetto trace
    "runners": {"base", "read", "store", "accounting", "checks", "critical"},  # parts computed as Ray tasks
    "watch": {"base", "read", "store", "accounting", "checks", "report"},  # the live run
}
# A room holds about a dozen modules at most: a reader guesses the file from the question.
ROOM_MODULES = 12


def _rooms() -> dict[str, list[Path]]:
    rooms: dict[str, list[Path]] = {}
    for path in sorted((SRC / "rollup").iterdir()):
        if path.is_dir() and (path / "__init__.py").exists():
            rooms[path.name] = sorted(p for p in path.rglob("*.py") if p.name != "__init__.py")
    return rooms


def test_the_rollup_front_door_lists_what_the_cli_and_users_call_and_each_name_resolves():
    assert set(rollup.__all__) == FRONT_DOOR
    for name in rollup.__all__:
        assert getattr(rollup, name) is not None, name
    with pytest.raises(AttributeError):
        rollup.no_such_name  # noqa: B018 - the attribute access is the test


def test_each_room_has_a_front_door_whose_names_resolve():
    import importlib

    for room in _rooms():
        module = importlib.import_module(f"rollup.{room}")
        assert module.__doc__, room
        for name in getattr(module, "__all__", []):
            assert getattr(module, name) is not None, (room, name)


def test_rollup_is_folders_by_question_each_of_about_a_dozen_modules_and_no_module_beside_them():
    rooms = _rooms()
    assert set(rooms) == set(MAY_IMPORT)
    assert [p.name for p in (SRC / "rollup").glob("*.py")] == ["__init__.py"]
    for room, modules in rooms.items():
        for folder in {p.parent for p in modules}:
            assert len([p for p in modules if p.parent == folder]) <= ROOM_MODULES, (room, folder)


@pytest.mark.slow
def test_each_room_imports_only_the_rooms_below_it():
    edges = _module_graph()

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == "rollup" and len(parts) > 1 else None

    crossings = {
        (module, target)
        for module, targets in edges.items()
        for target in targets
        if room(module) is not None
        and room(target) not in (None, room(module))
        and room(target) not in MAY_IMPORT[room(module)]
    }
    assert not crossings, sorted(crossings)
    # The order is a layering: no two rooms may import each other, directly or through others.
    for start in MAY_IMPORT:
        seen, todo = set(), list(MAY_IMPORT[start])
        while todo:
            room_name = todo.pop()
            assert room_name != start, f"rooms in a circle through {start}"
            if room_name not in seen:
                seen.add(room_name)
                todo.extend(MAY_IMPORT[room_name])


def test_the_cli_calls_the_library_through_the_front_door_or_a_rooms_front_door_only():
    source = "\n".join(path.read_text(encoding="utf-8") for path in sorted((SRC / "cli").rglob("*.py")))
    imported = set(re.findall(r"(?:from|import) rollup(\.[\w.]+)?", source))
    assert imported <= {""} | {f".{room}" for room in MAY_IMPORT}, imported


def test_typer_and_rich_live_in_the_cli_alone():
    for package in ("rollup", "instrument"):
        for path in sorted((SRC / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"^\s*(from|import) (typer|rich)\b", text, re.M), path


def _module_graph() -> dict[str, set[str]]:
    """Every module under src/ and the modules it imports (at the top, inside functions and under TYPE_CHECKING
    alike: a cycle is a cycle whenever its imports run)."""
    modules = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = ([base] if node.module else []) + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges[name].add(target)
    return edges


@pytest.mark.slow
def test_the_import_graph_has_no_cycle():
    edges = _module_graph()
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        path.append(module)
        for target in sorted(edges[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(edges):
        visit(module)


@pytest.mark.slow
def test_no_module_of_the_library_imports_the_cli():
    edges = _module_graph()
    for module, targets in edges.items():
        if module.split(".")[0] in ("rollup", "instrument"):
            assert not any(t.split(".")[0] == "cli" for t in targets), module


@pytest.mark.slow
@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import rollup, rollup.report.figures, rollup.base.errors", ("duckdb", "pyarrow", "opentelemetry.sdk")),
        ("import cli", ("duckdb", "pyarrow", "opentelemetry.sdk", "plotly")),
        ("import instrument, instrument.groups, instrument.wire", ("opentelemetry.sdk", "ray")),
    ],
)
def test_front_doors_import_nothing_heavy_until_a_name_is_used(statement, absent):
    code = f"import sys; {statement}; print([m for m in {list(absent)!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# --- attribute values: render_value and its SQL twin on the same inputs ---------------------------------------------

SCALARS = [
    ("s", "text"), ("s", ""), ("s", "ünï"), ("i", "0"), ("i", "-17"), ("i", "9223372036854775807"),
    ("i", "00042"), ("b", True), ("b", False), ("d", 0.1), ("d", 1e100), ("d", -2.5e-12), ("d", 3.0),
    ("d", 123456789.125), ("d", float("inf")), ("d", float("-inf")),
]  # fmt: skip


def _python_text(kind: str, value):
    return render_value(int(value) if kind == "i" else value)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "value"), SCALARS)
def test_duckdb_renders_a_scalar_attribute_exactly_as_python_does(kind, value):
    row = {"s": None, "i": None, "b": None, "d": None, kind: value}
    connection = duckdb.connect()
    connection.execute("CREATE TABLE scalar_values (s VARCHAR, i VARCHAR, b BOOLEAN, d DOUBLE)")
    connection.execute("INSERT INTO scalar_values VALUES ($s, $i, $b, $d)", row)
    (text,) = connection.execute(RENDER_SCALARS_SQL.format(relation="scalar_values")).fetchall()[0]
    assert text == _python_text(kind, value)


@pytest.mark.parametrize(
    ("value", "sure"),
    [({"stringValue": "x"}, True), ({"intValue": "42"}, True), ({"intValue": "-7"}, True),
     ({"intValue": "007"}, False), ({"intValue": "+7"}, False), ({"intValue": "99999999999999999999"}, False)],
)  # fmt: skip
def test_the_direct_readers_string_or_int_rule_gives_render_values_text_or_nothing(value, sure):
    connection = duckdb.connect()
    structure = duckdb_type({"value": {"stringValue": "VARCHAR", "intValue": "VARCHAR"}})
    fields = {"stringValue": value.get("stringValue"), "intValue": value.get("intValue")}
    (text,) = connection.execute(
        f"SELECT {string_or_int_sql('e')} FROM (SELECT {{'value': $v}}::{structure} AS e)", {"v": fields}
    ).fetchone()
    if sure:
        python = render_value(value["stringValue"] if "stringValue" in value else int(value["intValue"]))
        assert text == python
    else:
        assert text is None  # left to the careful reader, which renders every kind


def test_canonical_int_sql_keeps_only_canonical_digits():
    connection = duckdb.connect()
    for text, kept in [("12", True), ("-3", True), ("012", False), ("1.0", False), ("x", False)]:
        (value,) = connection.execute(f"SELECT {canonical_int_sql('$t')}", {"t": text}).fetchone()
        assert (value == text) is kept and (value is None) is not kept, text


# --- the process of SPEC section 1: process_key and its SQL twin ---------------------------------------------------

RESOURCES = [
    {"service.instance.id": "run7-rank0", "host.name": "h", "process.pid": "1", "service.name": "driver"},
    {"host.name": "node-3", "process.pid": "4242", "service.name": "worker"},
    {"host.name": "node-3", "service.name": "worker"},
    {"process.pid": "9", "service.name": "worker"},
    {"service.name": "solo"},
    {"service.instance.id": "", "host.name": "h", "process.pid": "2"},
    {"service.name": ""},
    {},
]


@pytest.mark.slow
@pytest.mark.parametrize("resource", RESOURCES)
def test_duckdb_names_the_process_exactly_as_python_does(resource):
    connection = duckdb.connect()
    attributes = [{"k": key, "v": value} for key, value in resource.items()]
    sql = process_key_sql(lambda key: f"list_filter(attrs, lambda e: e.k = '{key}')[-1].v")
    (process,) = connection.execute(
        f"SELECT {sql} FROM (SELECT $attrs::STRUCT(k VARCHAR, v VARCHAR)[] AS attrs)", {"attrs": attributes}
    ).fetchone()
    assert process == process_key(resource)
    assert set(resource) <= set(PROCESS_KEYS)


# --- the JSON shape: one declaration, two readers -------------------------------------------------------------------


def test_the_lean_record_is_a_projection_of_the_full_one_and_duckdb_accepts_its_type():
    def keys(structure):
        if isinstance(structure, dict):
            return {key: keys(value) for key, value in structure.items()}
        if isinstance(structure, list):
            return [keys(structure[0])]
        return None

    def within(lean, full):
        if isinstance(lean, dict):
            return all(key in full and within(value, full[key]) for key, value in lean.items())
        if isinstance(lean, list):
            return within(lean[0], full[0])
        return True

    assert within(keys(LEAN_RECORD), keys(RECORD))
    connection = duckdb.connect()
    for structure in (LEAN_RECORD, RECORD):
        connection.execute(f"SELECT NULL::{duckdb_type(structure['resourceSpans'])}")


# --- span names: what instrument builds is what the rollup recognizes ----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "is_job", "is_step", "is_umbrella"),
    [
        (JOB_SPAN_NAME.format(algorithm="grpo"), True, False, True),
        (STEP_SPAN_NAME.format(algorithm="dpo"), False, True, True),
        (EVALUATE_SPAN_NAME.format(algorithm="ppo"), False, False, True),
        (STARTUP_SPAN_NAME, False, False, True),
        (SETUP_SPAN_NAME.format(phase="ray.init"), False, False, True),
        ("rl.grpo.generation", False, False, False),
        (efficiency_span_name("idle/refit_bubble"), False, False, False),
        ("rl.grpo.stepper", False, False, False),
    ],
)
def test_span_names_built_by_instrument_are_classified_by_the_rollup(name, is_job, is_step, is_umbrella):
    connection = duckdb.connect()
    row = connection.execute(
        f"SELECT {IS_JOB_SQL}, {IS_STEP_SQL}, {IS_UMBRELLA_SQL} FROM (SELECT $name AS name, NULL AS span_group)",
        {"name": name},
    ).fetchone()
    assert row == (is_job, is_step, is_umbrella)
