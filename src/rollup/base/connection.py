"""goodput's DuckDB connections: opened in one place, each held to a memory limit and spilling to a folder of its own.

A trace of tens of millions of spans does not fit in memory on every machine, and need not: DuckDB's joins, sorts,
aggregates and even its in-memory tables spill to a temporary directory once they reach `memory_limit`. So every
connection goodput opens comes from `connect`, with that limit and a spill directory of its own. The store's
connection (the accounting) gets `GOODPUT_MEMORY_LIMIT` (default DEFAULT_SHARE of the machine's memory, or of the
container's limit when it has a lower one); how the rest of the work shares it is `memory`'s.

The limit is a size as DuckDB writes it (`4GB`, `800MB`: powers of 1000; `2GiB`: powers of 1024; `4G` as `4GiB`),
plain bytes, or a share of the machine (`25%`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import GoodputError

if TYPE_CHECKING:
    import duckdb

ENV_MEMORY_LIMIT = "GOODPUT_MEMORY_LIMIT"
DEFAULT_SHARE = 0.4  # of the machine's memory: leaves room for goodput's own Python, its workers and the machine's job
# DuckDB's queries over the spans of a load this small gain no wall clock from a second thread (bench/threads.py);
# each query pays for handing its work between threads all the same, CPU the machine's job could use.
ONE_THREAD_SPANS = 200_000
MIN_LIMIT_BYTES = 64 * 10**6  # twice the least the accounting runs in (docs/performance.md, bench/scale.py)
_CGROUP_LIMIT = Path("/sys/fs/cgroup/memory.max")

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>[a-z]*|%)")


def machine_memory_bytes() -> int:
    """This machine's physical memory, or the container's memory limit (cgroup v2) when that is lower."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        cgroup = _CGROUP_LIMIT.read_text().strip()
    except OSError:
        return physical
    return min(physical, int(cgroup)) if cgroup.isdigit() else physical


def parse_memory_limit(text: str, machine_bytes: int | None = None) -> int:
    """Bytes from a size such as `4GB`, `800MB`, `2GiB`, `4G`, `1000000` or `40%` (of `machine_bytes`).

    Raises GoodputError naming the setting and what it accepts, for text that is no size or a size too small to
    work with (MIN_LIMIT_BYTES)."""
    shown = f"{ENV_MEMORY_LIMIT}={text!r}"
    match = _SIZE.fullmatch(text.strip().lower())
    if match is None or match["unit"] not in (*_UNITS, "%"):
        raise GoodputError(f"{shown}: expected a size such as 4GB, 800MB, 2GiB or 40% (of this machine's memory)")
    number = float(match["number"])
    if match["unit"] == "%":
        if not 0 < number <= 100:
            raise GoodputError(f"{shown}: a share of this machine's memory is between 0% and 100%")
        limit = int(number / 100 * (machine_bytes or machine_memory_bytes()))
    else:
        limit = int(number * _UNITS[match["unit"]])
    if limit < MIN_LIMIT_BYTES:
        raise GoodputError(f"{shown}: goodput needs at least {MIN_LIMIT_BYTES // 10**6}MB")
    return limit


def memory_limit_bytes() -> int:
    """The store's limit: `GOODPUT_MEMORY_LIMIT`, else DEFAULT_SHARE of this machine's memory."""
    text = os.environ.get(ENV_MEMORY_LIMIT, "").strip()
    if text:
        return parse_memory_limit(text)
    return max(MIN_LIMIT_BYTES, int(DEFAULT_SHARE * machine_memory_bytes()))


def connection_limit_bytes(connection: duckdb.DuckDBPyConnection) -> int:
    """The memory limit `connection` was opened with (DuckDB shows it as `476.8 MiB`)."""
    ((shown,),) = connection.execute("SELECT current_setting('memory_limit')").fetchall()
    match = _SIZE.fullmatch(str(shown).strip().lower())
    if match is None or match["unit"] not in _UNITS:  # never seen: DuckDB writes a number and a unit
        return memory_limit_bytes()
    return int(float(match["number"]) * _UNITS[match["unit"]])


def out_of_memory(error: BaseException) -> GoodputError | None:
    """The error to show for DuckDB running out of memory under the limit (None for any other error)."""
    if type(error).__name__ != "OutOfMemoryException":  # duckdb's; DuckDB itself may not be imported here
        return None
    limit = shown_size(memory_limit_bytes())
    return GoodputError(
        f"out of memory: DuckDB needed more than the {limit} it may use (set {ENV_MEMORY_LIMIT} higher, e.g. 4GB)"
    )


def shown_size(size: int) -> str:
    """A byte count as the limit is usually written: `4.0GB`, `800MB`."""
    return f"{size / 1e9:.1f}GB" if size >= 10**9 else f"{size / 1e6:.0f}MB"


@dataclass
class SpillDirectory:
    """A folder of one process's own for DuckDB to spill into, removed by `remove()` (DuckDB itself creates it on
    its first spill and deletes it when the connection closes; a process that died leaves it for the next one to
    clear, see `spill_directory`)."""

    path: Path

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def spill_directory(root: Path) -> SpillDirectory:
    """A new spill folder under `root` (created; the folder itself is left to DuckDB), named for this process.

    Folders left under `root` by processes that no longer run (killed before they could clean up) are removed here,
    so a crash costs disk until the next command, not for ever."""
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.iterdir():
            pid = stale.name.split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)
    return SpillDirectory(root / f"{os.getpid()}-{os.urandom(4).hex()}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive
    return True


def drop_table_or_view(connection: duckdb.DuckDBPyConnection, name: str) -> None:
    """Drop the table or view `name`, whichever it is, if there is one (DuckDB's DROP names the kind)."""
    import duckdb

    for kind in ("TABLE", "VIEW"):
        try:
            connection.execute(f"DROP {kind} IF EXISTS {name}")
        except duckdb.CatalogException:  # it is the other kind
            continue


def connect(
    spill: SpillDirectory,
    *,
    limit_bytes: int | None = None,
    threads: int | None = None,
    database: Path | None = None,
    lent: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB connection (or one of the new database file `database`) held to `limit_bytes`
    (default `memory_limit_bytes()`), spilling into `spill`, without the insertion order it would otherwise keep
    (no query of goodput relies on it: those that need an order say ORDER BY, and keeping it costs memory in every
    operator).

    With `lent`, an in-memory connection is lent from the process's kept database when no other command holds it
    (`_Kept`): the same settings and an empty database of its own, without the tens of milliseconds a new DuckDB
    costs. Close it with `release`; one closed with a plain `close()`, or never, is given back once nothing refers
    to it any more."""
    import duckdb

    limit = limit_bytes or memory_limit_bytes()
    if lent and database is None:
        connection = _KEPT.lend(spill, limit, threads)
        if connection is not None:
            return connection
    config: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": f"{limit}B",
        "temp_directory": str(spill.path),
        "preserve_insertion_order": False,
    }
    if threads is not None:
        config["threads"] = threads
    return duckdb.connect(str(database) if database is not None else ":memory:", config=config)


def release(connection: duckdb.DuckDBPyConnection) -> None:
    """Close a connection `connect` gave: a lent one gives its database back to the process's kept one."""
    if not _KEPT.give_back(connection):
        connection.close()


class _Kept:
    """The process's kept in-memory DuckDB database, lent to one command at a time.

    A new DuckDB database costs about 30 ms of CPU (it builds its catalog of functions) and a command's queries over
    a small run cost less than that; a process that runs many commands (the test suite, a Ray worker given many
    ranges, the shell) paid it for each. A lent connection is a cursor of the kept database using a fresh in-memory
    database attached for it alone, so what one command creates is never seen by the next: its tables and views go
    to that database, dropped at `give_back`, and its temporary ones and registered relations are the cursor's own.
    Memory limit, spill folder and threads are the database's, set at each lending. So it is lent only when no
    other connection holds it (two at once would share one limit), and a database whose spill folder was used is
    closed and a new one made (DuckDB keeps its first spill folder). Between lendings it runs one query thread
    (`SET threads = 1`). A process forked from one that held it makes its own (and forks only before DuckDB is
    imported at all: `read.workers.pool_start_method`)."""

    def __init__(self) -> None:
        self.pid = 0
        self.database: duckdb.DuckDBPyConnection | None = None
        self.lent: weakref.ref[duckdb.DuckDBPyConnection] | None = None
        self.attached = ""
        self.count = 0

    def lend(self, spill: SpillDirectory, limit: int, threads: int | None) -> duckdb.DuckDBPyConnection | None:
        import duckdb

        if self.pid != os.getpid():  # forked (or first): what the parent held is not this process's to use
            if self.database is not None:
                _FORKED.append(self.database)  # kept from the destructor: it is the parent's to close
            self.pid, self.database, self.lent = os.getpid(), None, None
        if self.lent is not None:
            if self.lent() is not None:
                return None  # held by another command of this process
            self._clear()  # dropped without `release`: clear what it left
        try:
            database = self._database(spill)
            database.execute(f"SET memory_limit = '{limit}B'")
            cursor = database.cursor()
            self.count += 1
            name = f"goodput_lent_{self.count}"
            cursor.execute(f"ATTACH ':memory:' AS {name}")
            cursor.execute(f"USE {name}")
            cursor.execute("RESET threads" if threads is None else f"SET threads = {int(threads)}")
        except duckdb.Error:
            self.database = None
            return None
        self.lent, self.attached = weakref.ref(cursor), name
        return cursor

    def _database(self, spill: SpillDirectory) -> duckdb.DuckDBPyConnection:
        import duckdb

        if self.database is not None:
            try:
                self.database.execute(f"SET temp_directory = '{spill.path}'")
            except duckdb.Error:  # its spill folder was used: DuckDB keeps it
                self.database.close()
                self.database = None
        if self.database is None:
            config: dict[str, str | bool | int | float | list[str]] = {
                "temp_directory": str(spill.path),
                "preserve_insertion_order": False,
                "threads": 1,
            }
            self.database = duckdb.connect(":memory:", config=config)
        return self.database

    def give_back(self, connection: duckdb.DuckDBPyConnection) -> bool:
        if self.lent is None or connection is not self.lent() or self.pid != os.getpid():
            return False
        connection.close()
        self._clear()
        return True

    def _clear(self) -> None:
        import duckdb

        self.lent = None
        if self.database is None:
            return
        try:
            self.database.execute(f"DETACH DATABASE IF EXISTS {self.attached}")
            self.database.execute("SET threads = 1")
        except duckdb.Error:
            self.database.close()
            self.database = None


_KEPT = _Kept()
_FORKED: list[duckdb.DuckDBPyConnection] = []
