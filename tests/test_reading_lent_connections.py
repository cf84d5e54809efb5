"""The process's kept DuckDB database (`connection.connect(lent=True)`): each command that borrows it sees an empty
database of its own, with its own limit, spill folder and threads, and a second command at the same time gets a
database of its own instead. Real DuckDB throughout; the commands are the real `report` and `check`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from conftest import invoke
from rollup import open_store
from rollup.base.connection import connect, release, spill_directory

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def shown(connection: duckdb.DuckDBPyConnection, setting: str) -> str:
    return connection.execute(f"SELECT current_setting('{setting}')").fetchall()[0][0]


def tables_named(connection: duckdb.DuckDBPyConnection, name: str) -> int:
    sql = "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?"
    tables = connection.execute(sql, [name]).fetchall()[0][0]
    views = connection.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [name]).fetchall()[0][0]
    return tables + views


@pytest.mark.parametrize("closing", [release, duckdb.DuckDBPyConnection.close], ids=["release", "close"])
def test_what_one_borrower_made_is_gone_for_the_next(tmp_path, closing):
    """Given back by `release`, or closed and dropped."""
    first = connect(spill_directory(tmp_path / "spill"), lent=True)
    first.execute("CREATE TABLE made AS SELECT 1 AS a")
    first.execute("CREATE VIEW made_view AS SELECT * FROM made")
    first.execute("CREATE TEMP TABLE made_temp AS SELECT 2 AS b")
    first.register("made_registered", pa.table({"c": [3]}))
    closing(first)
    del first
    second = connect(spill_directory(tmp_path / "spill"), lent=True)
    try:
        for name in ("made", "made_view", "made_temp", "made_registered"):
            assert tables_named(second, name) == 0, name
        second.execute("CREATE TABLE made AS SELECT 4 AS a")  # the same names are free again
        assert second.execute("SELECT a FROM made").fetchall() == [(4,)]
    finally:
        release(second)


def test_each_borrower_gets_its_limit_its_spill_folder_and_its_threads(tmp_path):
    for limit, threads, folder in [(100_000_000, 1, "one"), (200_000_000, None, "two"), (300_000_000, 2, "three")]:
        spill = spill_directory(tmp_path / folder)
        connection = connect(spill, limit_bytes=limit, threads=threads, lent=True)
        try:
            fresh = duckdb.connect(config={"memory_limit": f"{limit}B"})
            assert shown(connection, "memory_limit") == shown(fresh, "memory_limit")
            assert shown(connection, "threads") == shown(fresh, "threads") if threads is None else str(threads)
            fresh.close()
            assert Path(shown(connection, "temp_directory")) == spill.path
        finally:
            release(connection)


def test_a_second_borrower_while_the_first_holds_it_has_a_database_of_its_own(tmp_path):
    first = connect(spill_directory(tmp_path / "a"), limit_bytes=100_000_000, lent=True)
    second = connect(spill_directory(tmp_path / "b"), limit_bytes=400_000_000, lent=True)
    try:
        first.execute("CREATE TABLE mine AS SELECT 1 AS a")
        assert tables_named(second, "mine") == 0
        assert shown(first, "memory_limit") != shown(second, "memory_limit")  # one limit would be both's
        assert shown(first, "temp_directory") != shown(second, "temp_directory")
    finally:
        release(second)
        release(first)


def test_after_a_borrower_spilled_the_next_spills_into_its_own_folder(tmp_path):
    spilled = spill_directory(tmp_path / "first")
    first = connect(spilled, limit_bytes=64 * 10**6, lent=True)
    first.execute("CREATE TEMP TABLE filler AS SELECT md5(i::VARCHAR) AS s FROM range(4000000) t(i)")
    assert spilled.path.is_dir() and any(spilled.path.iterdir())  # DuckDB used this folder
    release(first)
    spilled.remove()
    later = spill_directory(tmp_path / "second")
    second = connect(later, limit_bytes=64 * 10**6, lent=True)
    try:
        assert Path(shown(second, "temp_directory")) == later.path  # DuckDB keeps a used folder: a new database
        second.execute("CREATE TEMP TABLE filler AS SELECT md5(i::VARCHAR) AS s FROM range(4000000) t(i)")
        assert any(later.path.iterdir()) and not spilled.path.exists()
    finally:
        release(second)


def test_commands_in_one_process_give_what_each_gives_alone(tmp_path):
    """report, check, then the report of another sample and the first again, in one process: each answer is the
    one a process of its own gives (the committed JSON of the docs is not relied on: the first answer is)."""
    sync, buggy = str(SAMPLES / "grpo_sync"), str(SAMPLES / "grpo_buggy")
    alone = invoke(["report", sync, "--format", "json"]).stdout
    other = invoke(["check", buggy, "--format", "json"]).stdout
    again = invoke(["report", sync, "--format", "json"]).stdout
    assert again == alone
    assert invoke(["check", buggy, "--format", "json"]).stdout == other
    assert json.loads(other)["summary"]["errors"] > 0


def test_two_stores_open_at_once_keep_their_spans_apart(tmp_path):
    """What a diff does: both sides open, each its own spans."""
    with open_store([SAMPLES / "grpo_sync"]) as sync, open_store([SAMPLES / "grpo_async"]) as async_:
        count = "SELECT count(*) FROM spans"
        assert sync.connection.execute(count).fetchall() != async_.connection.execute(count).fetchall()
        assert sync.connection.execute(count).fetchall()[0][0] == sync.read_summary().spans


def test_a_borrower_still_held_is_not_lent_again_nor_disturbed(tmp_path):
    """A store open (its connection in the middle of a streamed result) while another command starts."""
    held = connect(spill_directory(tmp_path / "a"), lent=True)
    try:
        held.execute("CREATE TABLE counted AS SELECT range AS i FROM range(100000)")
        streaming = held.execute("SELECT i FROM counted")
        other = connect(spill_directory(tmp_path / "b"), lent=True)
        assert tables_named(other, "counted") == 0
        release(other)
        assert len(streaming.fetchall()) == 100000
        assert held.execute("SELECT count(*) FROM counted").fetchall() == [(100000,)]
    finally:
        release(held)
