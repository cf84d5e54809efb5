"""A toy GRPO job on a local Ray cluster, traced only through `instrument`: what `goodput report` and `check` read.

From the repository root:

    python -m examples.grpo_toy.job                          # sync, 6 steps, framed protobuf, one file per process
    python -m examples.grpo_toy.job --mode async --out run/async/    # generation one step ahead, JSON Lines
    python -m examples.grpo_toy.job --colocated --out run/colo/      # generation and training share two GPUs
    python examples/grpo_toy/job.py --buggy --out run/buggy/         # plants the two mistakes `goodput check` finds
    goodput report run/async/ && goodput check run/async/

Work is simulated with seeded sleeps and small numpy math (`schedule.py` has the plan and the goodput it implies),
so a run takes a few seconds on two cores. The shape is that of a real job:

- `configure(span_groups="per_step", ...)` before `ray.init`, so the raylet, and every worker it starts, inherits the
  GOODPUT_* choice; actors also get it through `runtime_env`, so the job runs inside a cluster started earlier too
  (with `RAY_ADDRESS` set, as `ray job submit` sets it, it joins that cluster rather than starting its own);
- two fleets of Ray actors on GPUs Ray hands out (`fleets.py`): generation (`GenerationWorker`, or the async run's
  rollout engine and validation actor) and training (`PolicyWorker`, the policy's data-parallel ranks), each actor on a
  GPU of its own, or with `--colocated` generation rank i and training rank i on the same GPU; a cluster the job
  starts declares 4 GPUs (`ray.init(num_gpus=4)`, which needs none to be there);
- one `rl.grpo.job` span over everything; `rl.startup` around `ray.init` and the set-up phases (`rl.setup.workers`,
  `rl.setup.collectives`, an `init/total` wait for the workers' `rl.grpo.load_model`);
- per step `iteration_scope(step)` + `rl.grpo.step`, with leaves for generation (in the generation actors), reward,
  logprob and policy training (in the training actors, under the driver's unbucketed `rl.grpo.logprob.fan_out` and
  `rl.grpo.policy_training.fan_out`, so the trace shows the driver waiting for them), advantage and checkpoint
  staging, an `idle/refit_bubble` wait, validation under `evaluate_span("grpo")` every third step, and the
  checkpoint's `rl.checkpoint.finalize` tail on a thread;
- `--mode async` overlaps generation with training: step k hands the rollout engine batch k+2 as soon as its refit
  is done, so batch k+1 generates beside step k's training; that batch's spans are children of step k with their own
  `rl.iteration` k+1 (made ahead for step k+1), and step k+1 waits for it (`idle/buffer_starvation`) only when it is
  late;
- step 2's rollout loses a trajectory: it hangs until a time-out, tagged `wasted/failed_trajectory`, and is redone.

`--colocated` (sync only: an async run generates while it trains, so its fleets never share GPUs) changes where the
actors run, not what they do: the step windows and their goodput are the same, the GPUs half as many.

`--resume-from N` starts at step N, as a job relaunched after a crash does: into the same `--out`, it is a second
attempt (its own run id), and `goodput report` shows the steps it redid as rework and the gap as downtime.

`--slow-phase NAME:SECONDS` (repeatable) makes one phase SECONDS longer in every step it runs in, as a regression
would: NAME is the phase's span as the trace names it (`rl.grpo.policy_training`, `rl.grpo.generation`,
`rl.idle.refit_bubble`, ...; an efficiency category such as `idle/refit_bubble` works too). The extra seconds are
added to the phase's planned sleep, so they land inside its span and `goodput diff` of a normal run against a slowed
one names that phase first:

    python -m examples.grpo_toy.job --out run/base/
    python -m examples.grpo_toy.job --out run/slow/ --slow-phase rl.grpo.policy_training:0.3
    goodput diff run/base/ run/slow/

`--faster PHASE:PCT` (repeatable, one phase each) makes a phase PCT percent shorter in every step: each of its
planned durations (after `--slow-phase` and `--straggler`) times `1 - PCT/100`, so a run with the same seed is the
same job with that phase faster. PHASE is named as for `--slow-phase`, or by the span name's last part
(`policy_training`, `generation`); PCT is above 0 and at most 100, with or without `%`. The median step it saves
against a run without it is, give or take the machine's noise, what `goodput critical` predicts from that run
(`saves_s` for 10%, `--speedup PHASE=PCT`):

    python -m examples.grpo_toy.job --mode async --out run/base/
    python -m examples.grpo_toy.job --mode async --out run/faster/ --faster policy_training:10
    goodput critical run/base/ --speedup rl.grpo.policy_training=10%
    goodput diff run/base/ run/faster/

`--straggler RANK:SECONDS` makes one generation actor that much slower at its half of every rollout, a worker on a
slow node: its peer finishes first and the step waits for it, which `goodput critical` names (with `--slow-phase`,
the phase on top of its table rises too):

    python -m examples.grpo_toy.job --out run/straggler/ --straggler 1:0.3 --slow-phase rl.grpo.reward:0.3
    goodput critical run/straggler/

`--buggy` plants, in step 2 only, a reward span inside a worker's generation span (`nested-bucket`) and the reward
phase as three concurrent asyncio tasks each opening `rl.grpo.reward` (`self-overlap`): `goodput check` reports
exactly those three findings and nothing else; a clean run gives none.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the package importable the way Ray workers import it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import ray

import instrument
from examples.grpo_toy.fleets import (
    CLUSTER_GPUS,
    GENERATION_FLEET,
    STREAM_FLEET,
    TRAINING_FLEET,
    VALIDATION_FLEET,
    Layout,
    NotEnoughGPUs,
    missing_gpus,
    place,
    release,
)
from examples.grpo_toy.loops import async_loop, sync_loop
from examples.grpo_toy.schedule import (
    COLLECTIVES_S,
    LOAD_MODEL_S,
    N_GENERATION_ACTORS,
    N_TRAINING_ACTORS,
    PLANNED_PHASES,
    StepPlan,
    faster,
    make_plan,
    slowed,
    straggling,
)
from examples.grpo_toy.trainer import Trainer
from examples.grpo_toy.workers import GenerationWorker, PolicyWorker, RolloutEngine
from instrument import (
    RLSpanGroup,
    dispatch_with_trace_context,
    efficiency_span,
    setup_span,
    startup_span,
    umbrella_trace_fn,
)
from instrument.wire import ENV_FLEET, ENV_GPUS, efficiency_span_name

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPORTER_BY_MODE = {"sync": "otlp-file", "async": "json-file"}
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


def phase_span_name(name: str) -> str | None:
    """The span of the phase called `name`: its span name as the trace has it (`rl.grpo.policy_training`), its
    efficiency category (`idle/refit_bubble`) or the span name's last part (`policy_training`); None for no phase."""
    span_name = efficiency_span_name(name) if "/" in name else name  # idle/refit_bubble -> rl.idle.refit_bubble
    if span_name in PLANNED_PHASES:
        return span_name
    return next((phase for phase in PLANNED_PHASES if phase.rpartition(".")[2] == name), None)


def slow_phase(value: str) -> tuple[str, float]:
    """`NAME:SECONDS` as (span name, seconds); an unknown phase or a malformed value names the phases there are."""
    phases = ", ".join(PLANNED_PHASES)
    name, colon, seconds_text = value.rpartition(":")
    try:
        seconds = float(seconds_text)
    except ValueError:
        seconds = math.nan
    if not colon or not name or not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(
            f"expected NAME:SECONDS with SECONDS a number >= 0 (rl.grpo.generation:0.3), got {value!r}; "
            f"the phases are {phases}"
        )
    return _known_phase(name), seconds


def faster_phase(value: str) -> tuple[str, float]:
    """`PHASE:PCT` as (span name, percent): PCT a percentage above 0 and at most 100, with or without `%`, as
    `goodput critical --speedup` takes it; an unknown phase or a malformed value names the phases there are."""
    phases = ", ".join(PLANNED_PHASES)
    name, colon, pct_text = value.rpartition(":")
    try:
        pct = float(pct_text.strip().removesuffix("%"))
    except ValueError:
        pct = math.nan
    if not colon or not name or not 0 < pct <= 100:  # NaN fails the comparison too
        raise argparse.ArgumentTypeError(
            f"expected PHASE:PCT with PCT a percentage above 0 and at most 100 (policy_training:10, "
            f"rl.grpo.generation:10%), got {value!r}; the phases are {phases}"
        )
    return _known_phase(name), pct


def _known_phase(name: str) -> str:
    """The span name of phase `name` (a short name or a span name); an unknown one names the phases there are."""
    span_name = phase_span_name(name)
    if span_name is None:
        raise argparse.ArgumentTypeError(f"no phase named {name!r}; the phases are {', '.join(PLANNED_PHASES)}")
    return span_name


def straggler(value: str) -> tuple[int, float]:
    """`RANK:SECONDS` as (generation actor rank, seconds)."""
    rank_text, colon, seconds_text = value.partition(":")
    try:
        rank, seconds = int(rank_text), float(seconds_text)
    except ValueError:
        rank, seconds = -1, math.nan
    if not colon or not 0 <= rank < N_GENERATION_ACTORS or not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(
            f"expected RANK:SECONDS with RANK a generation actor (0 to {N_GENERATION_ACTORS - 1}) and SECONDS a "
            f"number >= 0 (1:0.3), got {value!r}"
        )
    return rank, seconds


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m examples.grpo_toy.job", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the schedule and the numpy work (default 0)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="a directory (one file per process) or a FILE (workers write FILE's siblings); "
        "default goodput_traces/grpo_<mode>-<time>/",
    )
    parser.add_argument(
        "--exporter",
        choices=["otlp-file", "json-file"],
        default=None,
        help="default: json-file for a .jsonl FILE or --mode async, else otlp-file",
    )
    parser.add_argument(
        "--mode",
        choices=["sync", "async"],
        default="sync",
        help="sync: generate, then train; async: the next step's generation runs beside this step's training",
    )
    parser.add_argument(
        "--colocated",
        action="store_true",
        help="generation rank i and training rank i share a GPU (NeMo-RL's colocated mode; sync only)",
    )
    parser.add_argument("--buggy", action="store_true", help="plant the nested-bucket and self-overlap mistakes")
    parser.add_argument(
        "--resume-from",
        type=int,
        default=1,
        metavar="N",
        help="start at step N, as a job relaunched after a crash resumes from its last checkpoint (default 1)",
    )
    parser.add_argument(
        "--slow-phase",
        type=slow_phase,
        action="append",
        default=[],
        metavar="NAME:SECONDS",
        help="make the phase whose span is NAME (rl.grpo.policy_training, idle/refit_bubble, ...) SECONDS longer in "
        "every step; repeatable",
    )
    parser.add_argument(
        "--faster",
        type=faster_phase,
        action="append",
        default=[],
        metavar="PHASE:PCT",
        help="make the phase PHASE (policy_training, rl.grpo.generation, idle/refit_bubble, ...) PCT percent shorter "
        "in every step, after --slow-phase and --straggler (policy_training:10, generation:10%%); repeatable, one "
        "phase each",
    )
    parser.add_argument(
        "--straggler",
        type=straggler,
        default=None,
        metavar="RANK:SECONDS",
        help="make generation actor RANK SECONDS slower at its half of every rollout (sync mode: its peer waits)",
    )
    options = parser.parse_args(argv)
    if options.steps < 1:
        parser.error("--steps must be at least 1")
    if not 1 <= options.resume_from <= options.steps:
        parser.error(f"--resume-from must be a step from 1 to {options.steps}")
    named = [name for name, _ in options.faster]
    twice = sorted({name for name in named if named.count(name) > 1})
    if twice:
        parser.error(f"--faster names {', '.join(twice)} more than once: give each phase one percentage")
    if options.colocated and options.mode == "async":
        parser.error("--colocated is for --mode sync: an async run generates while it trains, on GPUs of its own")
    if options.out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        variant = "_colocated" * options.colocated + "_buggy" * options.buggy
        options.out = Path("goodput_traces") / f"grpo_{options.mode}{variant}-{stamp}"
    if options.exporter is None:
        suffix = options.out.suffix
        by_suffix = "json-file" if suffix in JSON_SUFFIXES else "otlp-file"
        options.exporter = by_suffix if suffix else EXPORTER_BY_MODE[options.mode]
    return options


def actor_runtime_env(service_name: str) -> dict[str, Any]:
    """The driver's GOODPUT_* choice (left in os.environ by `configure`) for an actor's bare `configure()`.

    A cluster started after `configure` already passes it on; one started before (`ray start`, a test session's)
    does not, so it is handed over here either way, less what only one process holds (GOODPUT_GPUS, GOODPUT_FLEET:
    a driver's own must not make every actor claim it). PYTHONPATH lets the worker import this package from anywhere.
    """
    env_vars = {
        key: value
        for key, value in os.environ.items()
        if key.startswith("GOODPUT_") and key not in (ENV_GPUS, ENV_FLEET)
    }
    env_vars["OTEL_SERVICE_NAME"] = service_name
    env_vars["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {"env_vars": env_vars}


async def start_workers(mode: str, seed: int, layout: Layout) -> tuple[list[Any], list[Any]]:
    """Create both fleets' actors where `layout` puts them and wait until each has loaded its model: (generation,
    training). Generation is two rollout ranks (sync), or a rollout engine and a validation actor (async)."""
    with setup_span("workers"):
        if mode == "sync":
            options = {"runtime_env": actor_runtime_env(GENERATION_FLEET)}
            generation = [
                GenerationWorker.options(**options, **layout.generation[rank]).remote(rank, N_GENERATION_ACTORS, seed)
                for rank in range(N_GENERATION_ACTORS)
            ]
        else:
            engine, validation = layout.generation
            generation = [
                RolloutEngine.options(runtime_env=actor_runtime_env(STREAM_FLEET), **engine).remote(seed),
                GenerationWorker.options(runtime_env=actor_runtime_env(VALIDATION_FLEET), **validation).remote(
                    0, 1, seed
                ),
            ]
        options = {"runtime_env": actor_runtime_env(TRAINING_FLEET)}
        training = [
            PolicyWorker.options(**options, **layout.training[rank]).remote(rank, N_TRAINING_ACTORS, seed)
            for rank in range(N_TRAINING_ACTORS)
        ]
        loading = [dispatch_with_trace_context(actor.load_model, LOAD_MODEL_S) for actor in generation + training]
        with efficiency_span("init/total"):  # unbucketed: start-up is outside every step window anyway
            await asyncio.gather(*loading)
    return generation, training


async def stop_workers(actors: list[Any]) -> None:
    """Let each actor flush its spans, then kill it (a killed actor runs no atexit hook)."""
    try:
        await asyncio.gather(*(actor.close.remote() for actor in actors))
    finally:
        for actor in actors:
            ray.kill(actor)


@umbrella_trace_fn(RLSpanGroup.U_JOB, "rl.grpo.job")
async def run(
    mode: str, seed: int, plans: list[StepPlan], log: Callable[[str], None] = print, *, colocated: bool = False
) -> None:
    """The whole job: start-up, the training loop, teardown. Joins a Ray cluster that is already up, as it is."""
    started_ray = False
    layout: Layout | None = None
    actors: list[Any] = []
    trainer: Trainer | None = None
    try:
        with startup_span():
            if not ray.is_initialized():
                if os.environ.get("RAY_ADDRESS"):  # joins the cluster it names, as a submitted job does
                    ray.init(logging_level=logging.WARNING)
                else:
                    ray.init(num_cpus=2, num_gpus=CLUSTER_GPUS, include_dashboard=False, logging_level=logging.WARNING)
                started_ray = True
            problem = missing_gpus(ray.cluster_resources().get("GPU", 0.0), mode, colocated)
            if problem:
                raise NotEnoughGPUs(problem)
            layout = await place(mode, colocated)
            generation, training = await start_workers(mode, seed, layout)
            actors = generation + training
            with setup_span("collectives"):
                await asyncio.sleep(COLLECTIVES_S)  # stands in for NCCL group set-up between the two fleets
        trainer = Trainer(training)
        if mode == "sync":
            await sync_loop(trainer, generation, plans, log)
        else:
            await async_loop(trainer, generation[0], generation[1], plans, log)
    finally:
        if trainer is not None:
            trainer.wait_for_checkpoints()
        if actors:
            await stop_workers(actors)
        if layout is not None:
            release(layout)
        if started_ray:
            ray.shutdown()


def written_files(out: Path) -> list[Path]:
    """The trace files a run wrote to `out`: the directory's files, or FILE and its workers' siblings."""
    if out.is_dir():
        return sorted(path for path in out.iterdir() if path.is_file())
    return sorted(path for path in out.parent.glob(f"{out.stem}*{out.suffix}") if path.is_file())


def main(argv: Sequence[str] | None = None, log: Callable[[str], None] = print) -> Path:
    """Run the job as `argv` says and return where its traces are."""
    options = parse_args(argv)
    # A relaunch resumes at --resume-from with the same seeded schedule: the steps it redoes sleep as they did.
    plans = [plan for plan in make_plan(options.seed, options.steps, buggy=options.buggy)
             if plan.step >= options.resume_from]  # fmt: skip
    extra_s: dict[str, float] = {}
    for name, seconds in options.slow_phase:  # the same phase twice adds up
        extra_s[name] = extra_s.get(name, 0.0) + seconds
    plans = slowed(plans, extra_s)
    if options.straggler is not None:
        plans = straggling(plans, *options.straggler)
    plans = faster(plans, dict(options.faster))  # last: a share of what the phase would otherwise take
    # Before ray.init: configure() leaves its choice in GOODPUT_* for every process started afterwards.
    instrument.configure(
        service_name="grpo-driver", span_groups="per_step", exporter=options.exporter, path=options.out
    )
    try:
        asyncio.run(run(options.mode, options.seed, plans, log, colocated=options.colocated))
    except NotEnoughGPUs as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        instrument.shutdown()
    for path in written_files(options.out):
        log(f"wrote {path} ({path.stat().st_size} bytes)")
    log(f"next: goodput report {options.out} && goodput check {options.out}")
    return options.out


if __name__ == "__main__":
    main()
