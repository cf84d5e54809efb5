"""What lending the process's kept DuckDB database saves a command run in a process that runs many (the test suite,
the shell, a Ray worker given many ranges): `report --format json` and `check --format json` of a shipped sample,
cached, run `--repeats` times in one process, with the kept database lent to each (what goodput does) against the
same commands while the kept database is held by another connection for the whole run, so that each command opens a
DuckDB database of its own (what it did before, and what it still does when two stores are open at once).

Both run in this one process, alternating, after one run of each command fills the cache; the median CPU seconds
(`time.process_time`, every thread) of each is kept, and the output of both must be the same. Also: one bare
`connect` + close against one lending + `release`, the cost lending saves.

Usage: python bench/lent.py [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = {"report": REPO / "sample_traces" / "grpo_async", "check": REPO / "sample_traces" / "grpo_buggy"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="goodput-bench-lent-"))
    os.environ["GOODPUT_CACHE_DIR"] = str(folder / "cache")
    sys.path.remove(str(Path(__file__).resolve().parent))  # bench/rollup.py is not the package
    from typer.testing import CliRunner

    from cli import app
    from rollup.base.connection import connect, release, spill_directory

    spill = spill_directory(folder / "spill")
    runner = CliRunner()

    def cpu_of(action, repeats: int) -> float:
        costs = []
        for _ in range(repeats):
            started = time.process_time()
            action()
            costs.append(time.process_time() - started)
        return statistics.median(costs)

    def lend_and_release() -> None:
        release(connect(spill, lent=True))

    def fresh_and_close() -> None:
        connect(spill).close()

    print(f"one connection: lent and released {cpu_of(lend_and_release, 50) * 1000:.1f} ms CPU, "
          f"a database of its own opened and closed {cpu_of(fresh_and_close, 50) * 1000:.1f} ms")  # fmt: skip

    for command, sample in SAMPLES.items():
        args = [command, str(sample), "--format", "json"]
        first = runner.invoke(app, args)  # fills the cache
        outputs: dict[str, set[str]] = {"lent": set(), "own": set()}
        costs: dict[str, list[float]] = {"lent": [], "own": []}
        for _ in range(options.repeats):
            for way in ("lent", "own"):
                held = connect(spill, lent=True) if way == "own" else None  # the kept database is busy
                started = time.process_time()
                result = runner.invoke(app, args)
                costs[way].append(time.process_time() - started)
                if held is not None:
                    release(held)
                if result.exit_code != first.exit_code:
                    sys.exit(f"{' '.join(args)} exited {result.exit_code}: {result.output}")
                outputs[way].add(result.stdout)
        same = outputs["lent"] == outputs["own"] and len(outputs["lent"]) == 1
        lent, own = statistics.median(costs["lent"]), statistics.median(costs["own"])
        print(f"{command} {sample.name} (cached, median of {options.repeats}): lent {lent * 1000:.0f} ms CPU, "
              f"a database of its own {own * 1000:.0f} ms -> {lent / own:.2f}x; same output: "
              f"{'yes' if same else 'NO'}")  # fmt: skip


if __name__ == "__main__":
    main()
