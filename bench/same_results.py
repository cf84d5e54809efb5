"""Do the accounting's answers stay the same, byte for byte, while its queries change?

Runs every command in every format (`report` and its `--by`, `--precedence`, `--iterations`, `--attempt`; `check`,
`spans`, `timeline`, `query`, and `diff` against a paired trace) on the sample traces and on the bench traces named,
and compares their standard output and exit code with a saved set. Save the set once on the code you trust
(`--save`), then re-run after every change: a difference names the trace and command and the first line that differs.

Each command runs twice per trace: with `--no-cache` (a fresh walk, and for JSON Lines DuckDB's own reader) and
through a fresh cache directory (the first command fills it, the rest read the cached lineage), so both ways of
loading are held to the same answer.

Usage: python bench/same_results.py [--save] [--trace PATH ...] [--no-samples] [--only NAME ...] [--saved DIR]
       [--src OTHER_CHECKOUT/src]
The saved set lives in bench/out/same_results/ (kept out of git, like the traces).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOODPUT = ROOT / ".venv" / "bin" / "goodput"
SAVED = ROOT / "bench" / "out" / "same_results"
DEFAULT_TRACES = [ROOT / "bench" / "out" / "rl-trace-1000000.otlp"]

# name -> arguments after the path; every one writes JSON to standard output.
COMMANDS: dict[str, list[str]] = {
    "report": ["report", "--format", "json"],
    "report-by-name": ["report", "--by", "name", "--format", "json"],
    "report-by-process": ["report", "--by", "process", "--format", "json"],
    "report-by-group": ["report", "--by", "group", "--format", "json"],
    "report-precedence": ["report", "--precedence", "idle,wasted,overhead,productive", "--format", "json"],
    "check": ["check", "--format", "json"],
    "check-expect": ["check", "--expect", "generation,policy_update,no_such_group", "--format", "json"],
    "spans-iteration-3": ["spans", "--iteration", "3", "--format", "json"],
    "timeline-3-5": ["timeline", "--iterations", "3:5", "--output", "-"],
    # the other formats and commands, as text (the output is piped: tables are drawn 200 columns wide)
    "report-table": ["report"],
    "report-csv": ["report", "--format", "csv"],
    "report-markdown": ["report", "--format", "markdown"],
    "report-jsonl": ["report", "--format", "jsonl"],
    "report-html": ["report", "--format", "html"],
    "report-iterations-3-5": ["report", "--iterations", "3:5", "--format", "json"],
    "report-attempt-latest": ["report", "--attempt", "latest", "--format", "json"],
    "report-by-name-table": ["report", "--by", "name"],
    "report-by-name-total-csv": ["report", "--by", "name", "--total", "--format", "csv"],
    "report-by-process-table": ["report", "--by", "process"],
    "check-table": ["check"],
    "check-all-markdown": ["check", "--all", "--format", "markdown"],
    "spans-table": ["spans", "--iteration", "3"],
    "spans-bucket-csv": ["spans", "--bucket", "idle", "--format", "csv"],
    "query": ["query", "SELECT bucket, count(*) AS n, sum(duration_ns) AS ns FROM spans GROUP BY ALL ORDER BY ALL"],
}

# name -> arguments after the two paths (the trace and its pair, see PAIRS): `goodput diff`.
DIFF_COMMANDS: dict[str, list[str]] = {
    "diff": ["diff"],
    "diff-json": ["diff", "--format", "json"],
    "diff-csv": ["diff", "--format", "csv"],
}
# Each trace's candidate in a diff: the samples against each other, a bench trace against its other format.
PAIRS = {"grpo_sync": "grpo_async", "grpo_async": "grpo_sync", "grpo_restart": "grpo_sync", "grpo_buggy": "grpo_sync"}


def _label(trace: Path) -> str:
    return trace.name if trace.is_dir() else trace.name.replace(".", "_")


def _pair(trace: Path) -> Path:
    """The candidate `diff` compares `trace` with (see PAIRS)."""
    if trace.is_dir():
        return trace.parent / PAIRS.get(trace.name, "grpo_sync")
    other = ".jsonl" if trace.suffix == ".otlp" else ".otlp"
    return trace.with_suffix(other) if trace.with_suffix(other).exists() else trace


def _run(trace: Path, name: str, cache_dir: Path | None, src: Path | None) -> tuple[bytes, float]:
    """The command's exit code and standard output as one blob, and its seconds. With `src`, the goodput of that
    source tree (another checkout's `src/`) runs instead of this one's."""
    command = [str(GOODPUT)] if src is None else [sys.executable, "-m", "cli"]
    if name in DIFF_COMMANDS:
        args = [*command, DIFF_COMMANDS[name][0], str(trace), str(_pair(trace)), *DIFF_COMMANDS[name][1:]]
    else:
        args = [*command, COMMANDS[name][0], str(trace), *COMMANDS[name][1:]]
    env = dict(os.environ, COLUMNS="120")
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())
    if cache_dir is None:
        args.append("--no-cache")
    else:
        env["GOODPUT_CACHE_DIR"] = str(cache_dir)
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr.decode(errors='replace')}")
    return f"exit {done.returncode}\n".encode() + done.stdout, seconds


def _first_difference(saved: bytes, now: bytes) -> str:
    before, after = saved.decode(errors="replace"), now.decode(errors="replace")
    if "\n" not in before.strip() and len(before) > 2000:  # one long JSON line: compare by token
        before, after = before.replace(", ", ",\n"), after.replace(", ", ",\n")
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), "saved", "now", lineterm="", n=1))
    return "\n".join(lines[:12])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="save the outputs as the set to compare with")
    parser.add_argument("--trace", action="append", type=Path, help="a bench trace (default: the 1M-span .otlp)")
    parser.add_argument("--no-samples", action="store_true", help="leave out sample_traces/*")
    parser.add_argument(
        "--only", action="append", choices=sorted([*COMMANDS, *DIFF_COMMANDS]), help="run these commands only"
    )
    parser.add_argument("--saved", type=Path, default=SAVED, help=f"where the set is saved (default {SAVED})")
    parser.add_argument("--src", type=Path, help="run the goodput of this source tree (e.g. an older worktree's src/)")
    args = parser.parse_args()
    traces = [] if args.no_samples else sorted(p for p in (ROOT / "sample_traces").iterdir() if p.is_dir())
    traces += [t.resolve() for t in args.trace] if args.trace else [t for t in DEFAULT_TRACES if t.exists()]
    names = args.only or [*COMMANDS, *DIFF_COMMANDS]
    differences = 0
    for trace in traces:
        with tempfile.TemporaryDirectory(prefix="goodput-same-") as cache:
            for mode, cache_dir in (("no-cache", None), ("cached", Path(cache))):
                for name in names:
                    output, seconds = _run(trace, name, cache_dir, args.src)
                    saved_path = args.saved / _label(trace) / f"{name}.out"
                    digest = hashlib.sha256(output).hexdigest()[:12]
                    where = f"{_label(trace):28} {name:18} {mode:8} {seconds:6.1f} s  {digest}"
                    if args.save and mode == "no-cache":
                        saved_path.parent.mkdir(parents=True, exist_ok=True)
                        saved_path.write_bytes(output)
                        print(f"{where}  saved")
                        continue
                    if not saved_path.exists():
                        print(f"{where}  NOT SAVED (run with --save first)")
                        differences += 1
                        continue
                    saved = saved_path.read_bytes()
                    if saved == output:
                        print(f"{where}  same")
                    else:
                        differences += 1
                        print(f"{where}  DIFFERENT\n{_first_difference(saved, output)}")
    print("all the same" if not differences else f"{differences} different", file=sys.stderr)
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
