"""`report --ray` and `check --ray` on a local 2-CPU Ray cluster beside the local commands, on 1M cached spans.

The trace is the ingest bench's synthetic one (`tracegen`), converted once into a fresh cache with `goodput ingest`
(which also builds the lineage table every accounting command reads), as `bench/rollup.py` does. Each command then
runs as a whole `goodput` process, interleaved with its local twin, best of --repeats:
- locally;
- `--ray ADDRESS` on a running 2-CPU cluster (started here by a holder process, `ray.init(num_cpus=2)`, and shut
  down by it at the end): what a job's own cluster gives;
- `--ray` with no address, which starts a local cluster for the command and stops it after (Ray's start-up and
  shutdown are part of that figure).
Every `--ray` output is compared byte for byte with the local one; a difference fails the bench.
Usage: python bench/ray_report.py [--spans N] [--repeats R] [--range-windows W]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import tracegen
from ingest import run_process

GOODPUT = str(Path(sys.executable).with_name("goodput"))
HOLDER = (
    "import ray, sys; context = ray.init(num_cpus=2, include_dashboard=False, logging_level='ERROR'); "
    "print(context.address_info['gcs_address'], flush=True); sys.stdin.read(); ray.shutdown()"
)


def start_cluster(env: dict[str, str], cwd: str) -> tuple[subprocess.Popen[str], str]:
    """A local 2-CPU Ray cluster held by a child process until its stdin closes; (the holder, its address).

    Run from `cwd`, not from bench/, whose html.py would stand in for the standard library's in `python -c`."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    assert holder.stdout is not None
    address = holder.stdout.readline().strip()
    if not address:
        holder.kill()
        sys.exit("could not start a local Ray cluster")
    return holder, address


def best_run(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of one run; a failed run stops the bench with its stderr."""
    run = run_process(argv, env=env)
    if run.returncode not in (0, 1):  # check exits 1 when it finds errors: a result, not a failure
        sys.exit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr}")
    return run.wall_s, run.max_rss_bytes, run.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--range-windows", type=int, default=None, help="GOODPUT_RAY_RANGE_WINDOWS (default: unset)")
    args = parser.parse_args()

    path = str(tracegen.trace_files(args.spans).proto_path)
    cache = tempfile.mkdtemp(prefix="goodput-bench-cache-")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["GOODPUT_CACHE_DIR"] = cache
    # Ray enables token authentication on the clusters ray.init() starts: the holder and the commands share one.
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    if args.range_windows is not None:
        env["GOODPUT_RAY_RANGE_WINDOWS"] = str(args.range_windows)
    holder = None
    try:
        first = run_process([GOODPUT, "ingest", path], env=env)
        if first.returncode != 0:
            sys.exit(first.stderr)
        print(f"{args.spans:,} spans, {os.path.getsize(path) / 1e6:.0f} MB framed protobuf; cache and lineage filled "
              f"in {first.wall_s:.2f} s; {os.cpu_count()} cores")  # fmt: skip
        holder, address = start_cluster(env, cache)
        print(f"local Ray cluster of 2 CPUs at {address}")
        for name, command in (
            ("report", ["report", "--format", "json", path]),
            ("report --by name", ["report", "--by", "name", "--format", "json", path]),
            ("check", ["check", "--format", "json", path]),
        ):
            variants = {
                "local": [GOODPUT, *command],
                "--ray ADDRESS": [GOODPUT, *command, "--ray", address],
                "--ray (own cluster)": [GOODPUT, *command, "--ray"],
            }
            walls: dict[str, list[float]] = {label: [] for label in variants}
            peaks: dict[str, int] = dict.fromkeys(variants, 0)
            outputs: dict[str, str] = {}
            for _ in range(args.repeats):  # interleaved, so a busy moment of the machine hits every variant
                for label, argv in variants.items():
                    wall, peak, stdout = best_run(argv, env)
                    walls[label].append(wall)
                    peaks[label] = max(peaks[label], peak)
                    if outputs.setdefault(label, stdout) != stdout:
                        sys.exit(f"{name} {label}: two runs gave different output")
            local = min(walls["local"])
            for label in variants:
                same = "same JSON as local" if outputs[label] == outputs["local"] else "JSON DIFFERS from local"
                best = min(walls[label])
                print(f"{name:<17} {label:<20} best {best:6.2f} s ({best / local:4.2f}x local), first "
                      f"{walls[label][0]:6.2f} s, driver peak RSS {peaks[label] / 2**30:.2f} GB, {same}")  # fmt: skip
                if outputs[label] != outputs["local"]:
                    sys.exit(1)
    finally:
        if holder is not None:
            holder.communicate(input="", timeout=120)  # the holder shuts its cluster down
        shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
