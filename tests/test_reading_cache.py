"""The Parquet cache of SPEC section 6: hits, invalidation by size and modification time, old versions retiring,
and a cache folder whose name has a quote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rollup.read.cache as cache_module
import rollup.read.workers
import rollup.store.lineage
from conftest import invoke
from rollup.base.schema import SCHEMA_VERSION
from rollup.read.cache import MANIFEST, default_cache_dir
from rollup.store.span_store import open_store
from tracebuild import S, step, three_steps, write_trace

ROWS = "SELECT trace_id, span_id, start_ns, end_ns, bucket, iteration FROM spans ORDER BY span_id"


def steps(count: int) -> list[S]:
    spans = []
    for i in range(1, count + 1):
        spans += [
            step(f"s{i}", i, i * 10, i * 10 + 9),
            S(f"g{i}", "rl.x", i * 10, i * 10 + 4, parent=f"s{i}", bucket="idle"),
        ]
    return spans


def entry_folders(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / f"v{SCHEMA_VERSION}").iterdir() if (p / MANIFEST).exists())


def load(path: Path, cache: Path):
    with open_store([path], cache_dir=cache) as store:
        return store.entries[0], store.sql(ROWS).to_pylist()


@pytest.mark.slow
def test_a_second_load_reads_the_cache_and_a_changed_file_is_read_again(tmp_path):
    cache = tmp_path / "cache"
    path = write_trace(tmp_path / "run.jsonl", steps(3), "jsonl")

    first, rows = load(path, cache)
    assert not first.cached and len(rows) == 6
    (folder,) = entry_folders(cache)
    assert all(Path(part).parent == folder for part in first.parts)

    again, rows_again = load(path, cache)
    assert again.cached and rows_again == rows and again.parts == first.parts

    write_trace(path, steps(5), "jsonl")  # the job wrote more: another size
    grown, rows_grown = load(path, cache)
    assert not grown.cached and len(rows_grown) == 10

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # same size, later modification time
    touched, rows_touched = load(path, cache)
    assert not touched.cached and rows_touched == rows_grown
    assert len(entry_folders(cache)) == 3  # recent versions stay: another command may still be reading them


def test_a_damaged_entry_is_converted_again_not_trusted(tmp_path):
    cache = tmp_path / "cache"
    path = write_trace(tmp_path / "run.otlp", steps(2))
    first, rows = load(path, cache)
    Path(first.parts[0]).unlink()  # a part gone: the entry is incomplete
    again, rows_again = load(path, cache)
    assert not again.cached and rows_again == rows
    (folder,) = entry_folders(cache)
    (folder / MANIFEST).write_text("{not json")
    third, rows_third = load(path, cache)
    assert not third.cached and rows_third == rows


def test_no_cache_writes_nothing_and_the_variable_moves_the_cache(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "run.otlp", steps(2))
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert default_cache_dir() == tmp_path / "elsewhere"
    with open_store([path], use_cache=False) as store:
        assert store.sql(ROWS).num_rows == 4
    assert not (tmp_path / "elsewhere").exists()
    with open_store([path]) as store:
        assert not store.entries[0].cached
    assert entry_folders(tmp_path / "elsewhere")


@pytest.mark.slow
def test_superseded_versions_retire_once_they_have_been_superseded_long_enough(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    path = write_trace(tmp_path / "run.jsonl", steps(2), "jsonl")
    for count in (3, 4):
        with open_store([path], cache_dir=cache) as store:
            store.spans()
        write_trace(path, steps(count), "jsonl")
    assert len(entry_folders(cache)) == 2 and len(list((cache / f"v{SCHEMA_VERSION}" / "sets").glob("*.parquet"))) == 2

    monkeypatch.setattr(cache_module, "RETIRE_AFTER_S", 0.0)
    with open_store([path], cache_dir=cache) as store:  # the third version: both older ones go
        store.spans()
        current = store.entries[0]
        assert store.sql(ROWS).num_rows == 8
    (folder,) = entry_folders(cache)
    assert Path(current.parts[0]).parent == folder
    (lineage,) = (cache / f"v{SCHEMA_VERSION}" / "sets").glob("*.parquet")
    assert lineage == store.lineage_cache


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["not json", '{"current": 5, "superseded": []}', '{"superseded": {"../..": 0}}'])
def test_a_damaged_version_index_costs_nothing_and_removes_nothing_outside(tmp_path, monkeypatch, damage):
    cache = tmp_path / "cache"
    path = write_trace(tmp_path / "run.otlp", steps(2))
    load(path, cache)
    (index,) = (cache / f"v{SCHEMA_VERSION}" / cache_module.INDEX_DIR).iterdir()
    index.write_text(damage)
    monkeypatch.setattr(cache_module, "RETIRE_AFTER_S", 0.0)
    write_trace(path, steps(3))
    grown, rows = load(path, cache)
    assert not grown.cached and len(rows) == 6
    assert tmp_path.exists() and path.exists()
    assert json.loads(index.read_text())["current"] == Path(grown.parts[0]).parent.name


@pytest.mark.slow
def test_a_quote_in_the_cache_folder_is_written_and_reused(tmp_path, monkeypatch):
    cache = tmp_path / "it's a cache"
    monkeypatch.setenv("GOODPUT_CACHE_DIR", str(cache))
    path = str(three_steps(tmp_path))
    first = invoke(["report", path, "-f", "json"], width=80)
    assert first.exit_code == 0, first.output
    assert list(cache.glob("v*/sets/*.lineage-v*.parquet")), "the lineage table was not cached"
    assert list(cache.glob("v*/*/manifest.json")), "the spans were not cached"

    def must_not_run(*args, **kwargs):
        raise AssertionError("the cache was not reused")

    monkeypatch.setattr(rollup.read.workers, "convert_chunk", must_not_run)
    monkeypatch.setattr(rollup.store.lineage, "build_lineage", must_not_run)
    again = invoke(["report", path, "-f", "json"], width=80)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    lineage_table = next(cache.glob("v*/sets/*.lineage-v*.parquet"))
    assert pq.read_metadata(lineage_table).num_rows == 7


def derived_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.derived/*.arrow"))


def test_a_cached_re_run_reads_the_charges_and_kinds_it_worked_out_and_a_damaged_one_is_worked_out_again(tmp_path):
    """The charge's sweep and the windows' kinds are kept beside the set's lineage (`rollup.store.derived`): the
    re-run's JSON is the first run's, whichever of them it reads back; a question asked differently keeps its own
    answer."""
    path = write_trace(tmp_path / "run.otlp", steps(20))
    cache = tmp_path / "cache"
    env = {"GOODPUT_CACHE_DIR": str(cache)}
    fresh = invoke(["report", str(path), "--format", "json", "--no-cache"]).stdout
    first = invoke(["report", str(path), "--format", "json"], env=env)
    kept = derived_files(cache)
    assert {p.name.split("-")[0] for p in kept} == {"charge", "kinds"}
    assert first.stdout == fresh
    assert invoke(["report", str(path), "--format", "json"], env=env).stdout == fresh
    assert derived_files(cache) == kept  # read back, not written again
    for damaged in kept:
        damaged.write_bytes(b"not arrow")
    assert invoke(["report", str(path), "--format", "json"], env=env).stdout == fresh
    other = invoke(
        ["report", str(path), "--format", "json", "--precedence", "idle,productive,overhead,wasted"], env=env
    )
    assert other.exit_code == 0 and len(derived_files(cache)) == len(kept) + 1  # its own charge


def test_a_cached_re_run_by_name_reads_the_shares_it_worked_out_of_any_number_per_window(tmp_path):
    """`--by name` keeps its sweep's shares and charges (`names`): windows with no share, one, and several, so the
    kept columns are of other lengths than the windows'; by group asks another question and keeps its own."""
    spans = steps(12)
    spans += [step("bare", 13, 130, 139)]  # a window with no bucketed span: no share
    spans += [S(f"p{i}", f"rl.p{i % 3}", i * 10 + 5, i * 10 + 8, parent=f"s{i}", bucket="productive")
              for i in range(1, 8)]  # fmt: skip
    path = write_trace(tmp_path / "run.otlp", spans)
    cache = tmp_path / "cache"
    env = {"GOODPUT_CACHE_DIR": str(cache)}
    for by in ("name", "group"):
        command = ["report", str(path), "--format", "json", "--by", by, "--total"]
        fresh = invoke([*command, "--no-cache"]).stdout
        assert '"names"' in fresh or '"groups"' in fresh
        assert invoke(command, env=env).stdout == fresh
        kept = [p for p in derived_files(cache) if p.name.startswith("names-")]
        assert invoke(command, env=env).stdout == fresh  # read back
        assert [p for p in derived_files(cache) if p.name.startswith("names-")] == kept
        for damaged in kept:
            damaged.write_bytes(b"not arrow")
        assert invoke(command, env=env).stdout == fresh
    assert len([p for p in derived_files(cache) if p.name.startswith("names-")]) == 2  # one per question


def test_a_cached_re_run_reads_the_gpu_charge_it_worked_out(tmp_path):
    """The GPUs' sweep (SPEC section 12) is kept too (`gpus`), one answer per question (`--gpus`, `--place`)."""
    spans = steps(6) + [S(f"t{i}", "rl.train", i * 10 + 4, i * 10 + 8, parent=f"s{i}", bucket="productive",
                          process="trainer") for i in range(1, 7)]  # fmt: skip
    resources = {"driver": {"service.name": "driver", "host.name": "h", "process.pid": 1, "goodput.gpu.ids": ["0"]},
                 "trainer": {"service.name": "trainer", "host.name": "h", "process.pid": 2,
                             "goodput.gpu.ids": ["0", "1"]}}  # fmt: skip
    path = write_trace(tmp_path / "run.otlp", spans, resources=resources)
    env = {"GOODPUT_CACHE_DIR": str(tmp_path / "cache")}
    for extra in ([], ["--by", "pool"], ["--place", "rl.x=trainer"]):
        command = ["report", str(path), "--format", "json", *extra]
        fresh = invoke([*command, "--no-cache"]).stdout
        assert '"gpus"' in fresh
        assert invoke(command, env=env).stdout == fresh
        assert invoke(command, env=env).stdout == fresh  # read back
    kept = [p for p in derived_files(tmp_path / "cache") if p.name.startswith("gpus-")]
    assert len(kept) == 2  # --by pool asks what the plain report asked; --place asks another question
    for damaged in kept:
        damaged.write_bytes(b"not arrow")
    assert (
        invoke(["report", str(path), "--format", "json"], env=env).stdout
        == invoke(["report", str(path), "--format", "json", "--no-cache"]).stdout
    )


def test_what_was_worked_out_retires_with_its_lineage(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "RETIRE_AFTER_S", 0.0)
    path = write_trace(tmp_path / "run.otlp", steps(20))
    cache = tmp_path / "cache"
    env = {"GOODPUT_CACHE_DIR": str(cache)}
    assert invoke(["report", str(path)], env=env).exit_code == 0
    old = derived_files(cache)
    assert old
    for count in (21, 22):  # the file changed: a new set, a new lineage; the superseded ones retire
        write_trace(path, steps(count))
        assert invoke(["report", str(path)], env=env).exit_code == 0
    assert not any(p.exists() for p in old) and not any(p.parent.exists() for p in old) and derived_files(cache)


def test_a_cached_lineage_of_other_columns_is_walked_again_not_an_error(tmp_path):
    """A lineage file that reads as Parquet but holds other columns (another version wrote it) is rebuilt, small or
    large: a small one is read into a table first, which must be dropped as a table."""
    path = write_trace(tmp_path / "run.otlp", steps(3))
    cache = tmp_path / "cache"
    env = {"GOODPUT_CACHE_DIR": str(cache)}
    first = invoke(["report", str(path), "--format", "json"], env=env)
    assert first.exit_code == 0, first.output
    lineage_table = next(cache.glob("v*/sets/*.lineage-v*.parquet"))
    pq.write_table(pa.table({"something": [1, 2, 3]}), lineage_table)
    again = invoke(["report", str(path), "--format", "json"], env=env)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout
    assert pq.read_schema(lineage_table).names != ["something"]  # written again, this version's
