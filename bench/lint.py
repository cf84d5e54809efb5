"""How long `goodput lint` takes on a folder of 1,000 instrumented files, against `ruff check` of the same folder.

The files are made here: copies of the example job's instrumented modules (examples/grpo_toy/*.py, with their
planted mistake's ignore comments removed, so lint has findings to report) under 1,000 names in nested folders.
Both commands run as whole processes, `--repeats` times each, interleaved; the best of each is shown. Bar: lint of
the 1,000 files under 5 s on this machine. ruff (a Rust linter, on every rule of its own) is the baseline a user's CI
already pays for.

Usage: python bench/lint.py [--files 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from ingest import run_process

REPO = Path(__file__).resolve().parents[1]
GOODPUT = os.path.join(os.path.dirname(sys.executable), "goodput")
RUFF = os.path.join(os.path.dirname(sys.executable), "ruff")
BAR_S = 5.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    sources = [re.sub(r"  # goodput: ignore\[[a-z, -]+\].*", "", p.read_text()) for p in
               sorted((REPO / "examples" / "grpo_toy").glob("*.py"))]  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="goodput-bench-lint-"))
    try:
        for number in range(args.files):
            path = folder / f"pkg{number // 100:02d}" / f"sub{number // 10 % 10}" / f"module_{number:04d}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(sources[number % len(sources)])
        lines = sum(len(s.splitlines()) for s in sources) * args.files // len(sources)
        print(f"{args.files:,} files, about {lines:,} lines, copies of examples/grpo_toy/*.py")
        lint_argv = [GOODPUT, "lint", str(folder), "--format", "json"]
        ruff_argv = [RUFF, "check", "--no-cache", "--quiet", "--exit-zero", "--isolated", "--select", "ALL",
                     str(folder)]  # fmt: skip
        lints, ruffs = [], []
        for _ in range(args.repeats):
            lints.append(run_process(lint_argv))
            ruffs.append(run_process(ruff_argv))
        if any(run.returncode not in (0, 1) for run in lints):
            sys.exit(f"goodput lint failed:\n{lints[0].stderr}")
        summary = json.loads(lints[0].stdout)["summary"]
        lint_s, ruff_s = min(r.wall_s for r in lints), min(r.wall_s for r in ruffs)
        print(f"goodput lint   best {lint_s:5.2f} s (first {lints[0].wall_s:.2f} s), peak RSS "
              f"{max(r.max_rss_bytes for r in lints) / 1e6:.0f} MB: {summary['files']:,} files, "
              f"{summary['errors']:,} errors, {summary['warnings']:,} warnings")  # fmt: skip
        print(f"ruff check     best {ruff_s:5.2f} s (every rule, no cache): lint is {lint_s / ruff_s:.1f}x ruff")
        print(f"bar: under {BAR_S:.0f} s -> {'ok' if lint_s < BAR_S else 'OVER THE BAR'}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
