"""A schedule simulator: RL jobs whose timing is computed, not measured, written as real trace files.

`goodput critical --speedup` predicts what a phase 10% shorter would have given (SPEC section 14), and the only way
to know the truth is to run the job again with that phase shorter. Here the job is a program over simulated threads,
so the re-run is exact: `simulate(schedule)` and `simulate(schedule, speedup=NAME)` differ only in NAME's durations.

What the programs are made of, each an ordinary way an RL job spends its time:

- a `Thread` runs one thing at a time, in order: the driver's main thread, a background thread of the driver, a
  worker actor. A call handed to a busy worker starts when the worker is free (FIFO, in the order the calls were
  sent, which the thread checks);
- a fan-out: a thread sends the same call to several workers at once and joins them all (`fan_out`, `join`); the
  calls are children of a span of the caller's (the step, an umbrella, a bucketed driver span), so they end before it;
- sequence: what a thread runs under one parent runs one after another;
- fire-and-forget: a call whose result this step does not wait for (the next step's generation, its own
  `rl.iteration` N + 1, its parent a span of step N);
- a wait woken by work elsewhere (`wait`): an idle span that ends a small latency after the span it waited for;
- what a step uses was made for it by an earlier step (the batch of an async run).

Every stretch of time is some span's own time, and its length is read from the schedule's `durations`: a leaf's
length; an umbrella's, the step's or the job's time before it dispatches (their names are never sped up by the
tests, which speed up bucketed phases); a wait's latency after what woke it (a poll interval). The table gives
seconds per span name (or per `NAME (BUCKET)`, where one name has two), or a `{process label: seconds}`, or a list
of seconds, one per iteration. Time is integer nanoseconds from the job's start; no clock is read.

A run writes one file per process through the OpenTelemetry SDK, with the times given explicitly
(`tracer.start_span(..., start_time=ns)`, `span.end(end_time=ns)`), through the project's own exporters: the
driver's as OTLP JSON Lines, the workers' as framed protobuf. Each process has its own resource (`service.name`, the
fleet; `service.instance.id`, its label; `host.name`, `process.pid`, and the GPUs it holds).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from instrument.exporters import FramedProtobufFileExporter, JsonLinesFileExporter
from instrument.wire import (
    RESOURCE_GPU_IDS,
    RESOURCE_GPUS,
    RL_BUCKET_ATTR,
    RL_EFFICIENCY_CATEGORY_ATTR,
    RL_ITERATION_ATTR,
    RL_SPAN_GROUP_ATTR,
)
from tracebuild import ORIGIN_NS

NS = 10**9
SPEEDUP = (9, 10)  # a phase sped up by 10%: its own time times 9/10, as `--speedup NAME=10%` shortens it
WAKEUP_NS = 20_000_000  # SPEC section 14: a wait's end at most 20 ms after what woke it (`--wakeup` default)

Durations = Mapping[str, float | Mapping[str, float | Sequence[float]]]


@dataclass(frozen=True)
class Phase:
    """What a span is: its name, its `rl.span_group`, its bucket (None: an umbrella) and efficiency category."""

    name: str
    group: str
    bucket: str | None = None
    category: str | None = None


def efficiency(category: str) -> Phase:
    """An efficiency span as `efficiency_span(category)` opens it: `rl.` + category with `/` as `.`."""
    return Phase("rl." + category.replace("/", "."), "efficiency", category.split("/")[0], category)


JOB = Phase("rl.grpo.job", "job")
STEP = Phase("rl.grpo.step", "step")
ROLLOUT = Phase("rl.grpo.rollout", "rollout")
EVALUATE = Phase("rl.grpo.evaluate", "evaluate")
SETUP = Phase("rl.setup.policy", "setup")
GENERATION = Phase("rl.grpo.generation", "generation", "productive")
VALIDATION_GENERATION = Phase("rl.grpo.generation", "generation", "overhead")  # the tokens are thrown away
REWARD = Phase("rl.grpo.reward", "reward", "productive")
LOGPROB = Phase("rl.grpo.logprob", "logprob", "overhead")  # the driver's span around its workers' shards
WORKER_LOGPROB = Phase("rl.policy.logprob", "logprob", "overhead")  # a training worker's shard
ADVANTAGE = Phase("rl.grpo.advantage", "advantage", "overhead")
TRAINING = Phase("rl.grpo.policy_training", "policy_update", "productive")
WORKER_TRAINING = Phase("rl.policy.train", "policy_update", "productive")
UPDATE_WEIGHTS = Phase("rl.grpo.update_weights", "data_plane", "overhead")  # a generation worker's refit
REFIT_BUBBLE = efficiency("idle/refit_bubble")
BUFFER_STARVATION = efficiency("idle/buffer_starvation")
VALIDATION_WAIT = efficiency("idle/validation")


@dataclass(frozen=True)
class Process:
    """One emitting process: `label` is its `service.instance.id` (what goodput shows), `service` its fleet."""

    label: str
    service: str
    pid: int
    host: str = "node-0"
    gpu_ids: tuple[str, ...] = ()
    gpus: int = 0  # a count of GPUs of its own, where ids are not known

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_ids) or self.gpus

    def resource(self) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "service.name": self.service,
            "service.instance.id": self.label,
            "host.name": self.host,
            "process.pid": self.pid,
        }
        if self.gpu_ids:
            attributes[RESOURCE_GPU_IDS] = list(self.gpu_ids)
        elif self.gpus:
            attributes[RESOURCE_GPUS] = self.gpus
        return attributes


@dataclass(eq=False)
class Span:
    """One span as the simulator computed it (nanoseconds from the job's start)."""

    phase: Phase
    process: Process
    iteration: int | None
    parent: Span | None
    start_ns: int
    end_ns: int = -1  # set when it ends

    @property
    def name(self) -> str:
        return self.phase.name

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {RL_SPAN_GROUP_ATTR: self.phase.group}
        if self.phase.bucket is not None:
            out[RL_BUCKET_ATTR] = self.phase.bucket
        if self.phase.category is not None:
            out[RL_EFFICIENCY_CATEGORY_ATTR] = self.phase.category
        if self.iteration is not None:
            out[RL_ITERATION_ATTR] = self.iteration
        return out

    def ancestors(self) -> Iterator[Span]:
        span = self.parent
        while span is not None:
            yield span
            span = span.parent


@dataclass
class FanOut:
    """Calls one thread sent together to several workers, and joined."""

    phase: Phase
    parent: Span
    calls: list[Span]


@dataclass
class Run:
    """What a simulated job did: every span, the fan-outs, and which span woke each wait."""

    processes: list[Process] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    fan_outs: list[FanOut] = field(default_factory=list)
    woken_by: dict[Span, Span] = field(default_factory=dict)

    def step_walls_ns(self) -> dict[int, int]:
        """Each iteration's wall clock: its step span's length."""
        return {s.iteration: s.end_ns - s.start_ns for s in self.spans if s.phase == STEP and s.iteration}

    def bucketed_names(self) -> list[str]:
        return sorted({s.name for s in self.spans if s.phase.bucket is not None})

    def write(self, folder: Path) -> Path:
        """One trace file per process in `folder` (replaced if there), written through the OpenTelemetry SDK;
        returns `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        memories, tracers = {}, {}
        for process in self.processes:
            provider = TracerProvider(resource=Resource.create(process.resource()), id_generator=_SeededIds(process))
            memories[process] = (provider, InMemorySpanExporter())
            provider.add_span_processor(SimpleSpanProcessor(memories[process][1]))
            tracers[process] = provider.get_tracer("goodput.tests.schedules")
        opened: dict[Span, trace.Span] = {}
        for span in self.spans:  # parents were recorded before their children
            context = trace.set_span_in_context(opened[span.parent]) if span.parent else Context()
            opened[span] = tracers[span.process].start_span(
                span.name, context=context, start_time=ORIGIN_NS + span.start_ns, attributes=span.attributes()
            )
        for span in sorted(self.spans, key=lambda s: s.end_ns):
            opened[span].end(end_time=ORIGIN_NS + span.end_ns)
        for index, process in enumerate(self.processes):
            provider, memory = memories[process]
            finished = memory.get_finished_spans()
            if finished:
                kind = JsonLinesFileExporter if index == 0 else FramedProtobufFileExporter
                file = folder / f"{process.label}{kind.suffix}"
                file.unlink(missing_ok=True)  # the exporters append: a second write must replace, not add
                exporter = kind(file, service_name=process.service)
                exporter.export(finished)
                exporter.shutdown()
            provider.shutdown()
        return folder


class _SeededIds(IdGenerator):
    """Ids drawn from a generator seeded by the process's label: the same schedule writes the same ids."""

    def __init__(self, process: Process) -> None:
        self._random = random.Random(zlib.crc32(process.label.encode()))

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


class Sim:
    """The clock-less machine a schedule's program runs on: its durations, the phase sped up, what it recorded."""

    def __init__(self, durations: Durations, speedup: str | None = None) -> None:
        self.durations = durations
        self.speedup = speedup
        self.run = Run()

    def process(self, label: str, service: str, **resource: Any) -> Process:
        process = Process(label, service, pid=1000 + len(self.run.processes), **resource)
        self.run.processes.append(process)
        return process

    def thread(self, process: Process) -> Thread:
        return Thread(self, process)

    def seconds_ns(self, phase: Phase, process: Process, iteration: int | None) -> int:
        """The own time of a span of `phase` in `process` at `iteration`, from the table (`NAME (BUCKET)` where a
        name's buckets differ, else `NAME`); 10% less if its name is sped up."""
        name, by_bucket = phase.name, f"{phase.name} ({phase.bucket})"
        value = self.durations[by_bucket if by_bucket in self.durations else name]
        if isinstance(value, Mapping):
            value = value[process.label]
        if isinstance(value, Sequence):
            value = value[((iteration or 1) - 1) % len(value)]
        length = round(float(value) * NS)
        return length * SPEEDUP[0] // SPEEDUP[1] if name == self.speedup else length

    def record(self, phase: Phase, process: Process, iteration: int | None, parent: Span | None, start: int) -> Span:
        span = Span(phase, process, iteration, parent, start)
        self.run.spans.append(span)
        return span


class Thread:
    """One thread of a process: it runs one thing at a time, and `now` is when it is next free."""

    def __init__(self, sim: Sim, process: Process) -> None:
        self.sim, self.process = sim, process
        self.now = 0
        self.last_sent = 0

    @contextmanager
    def span(self, phase: Phase, parent: Span | None = None, iteration: int | None = None) -> Iterator[Span]:
        """A span of this thread around what the block runs: the job, a step, an umbrella, a driver phase."""
        span = self.sim.record(phase, self.process, iteration, parent, self.now)
        yield span
        span.end_ns = self.now

    def step(self, iteration: int, job: Span):
        return self.span(STEP, job, iteration)

    def own(self, span: Span) -> None:
        """Run `span`'s own time (code of its own before or between its children)."""
        self.now += self.sim.seconds_ns(span.phase, self.process, span.iteration)

    def leaf(self, phase: Phase, parent: Span | None, iteration: int | None, *, after: int = 0) -> Span:
        """Run a phase of its own length, once free and no earlier than `after`."""
        span = self.sim.record(phase, self.process, iteration, parent, max(self.now, after))
        span.end_ns = span.start_ns + self.sim.seconds_ns(phase, self.process, iteration)
        self.now = span.end_ns
        return span

    def call(self, phase: Phase, parent: Span, iteration: int | None, sent: int) -> Span:
        """A call this worker received at `sent`: it starts then, or when the worker finishes what it runs."""
        assert sent >= self.last_sent, "calls reach a worker in the order they were sent"
        self.last_sent = sent
        return self.leaf(phase, parent, iteration, after=sent)

    def fan_out(
        self, workers: Sequence[Thread], phase: Phase, parent: Span, iteration: int | None = None
    ) -> list[Span]:
        """Send `phase` to every worker now (children of `parent`, a span of this thread's), not waiting yet."""
        iteration = parent.iteration if iteration is None else iteration
        calls = [worker.call(phase, parent, iteration, self.now) for worker in workers]
        self.sim.run.fan_outs.append(FanOut(phase, parent, calls))
        return calls

    def join(self, calls: Sequence[Span]) -> None:
        """Wait for every call (inside the span the calls are children of: the trace shows the wait)."""
        self.now = max([self.now, *(call.end_ns for call in calls)])

    def wait(self, phase: Phase, parent: Span, iteration: int | None, until: Span) -> Span | None:
        """An idle wait for `until` to end, over a latency after it (the wait's own time), if it has not ended yet."""
        if until.end_ns <= self.now:
            return None  # it was ready: nothing to wait for
        span = self.sim.record(phase, self.process, iteration, parent, self.now)
        span.end_ns = until.end_ns + self.sim.seconds_ns(phase, self.process, iteration)
        self.now = span.end_ns
        self.sim.run.woken_by[span] = until
        return span


def spec_wakeup(wait: Span, spans: Sequence[Span], wakeup_ns: int = WAKEUP_NS) -> Span | None:
    """SPEC section 14's wakeup of an idle span: the latest-ending span that is not idle, neither its ancestor nor
    its descendant, that ended inside it at most `wakeup_ns` before its end."""
    ancestors = set(wait.ancestors())
    found = [
        x
        for x in spans
        if x.phase.bucket != "idle"
        and x is not wait
        and x not in ancestors
        and wait not in set(x.ancestors())
        and wait.start_ns < x.end_ns <= wait.end_ns
        and wait.end_ns - x.end_ns <= wakeup_ns
    ]
    return max(found, key=lambda x: x.end_ns, default=None)


@dataclass(frozen=True)
class Schedule:
    """A job: its program over a `Sim`, the durations it reads, and the names whose effect goes through a
    dependency the spans do not show (the counter-example's; empty for every other schedule)."""

    id: str
    program: Callable[[Sim], None]
    durations: Durations
    unrecorded_names: tuple[str, ...] = ()


def simulate(schedule: Schedule, speedup: str | None = None) -> Run:
    """Run the schedule's program, with the own time of every span named `speedup` 10% shorter."""
    sim = Sim(schedule.durations, speedup)
    schedule.program(sim)
    run = sim.run
    assert all(span.end_ns >= span.start_ns for span in run.spans)
    for span in run.spans:
        if span.phase.bucket == "idle":  # each wait's waker is the one SPEC's rule finds, and no wait is woken else
            assert spec_wakeup(span, run.spans) is run.woken_by.get(span), (schedule.id, span.name, span.start_ns)
    return run


# --- the schedules ---------------------------------------------------------------------------------------------------


def thread_generation_beside_refit(sim: Sim, steps: int = 4) -> None:
    """The issue's reproduction: one process. Each step trains (0.30 s), then waits for the refit (0.15 s): the
    refit waits for the next step's generation (0.40 s), which a background thread of the same process starts 45 ms
    into the step (the step's own time) and which ends 5 ms before the wait does. The first batch is generated
    before the first step."""
    driver = sim.process("driver", "grpo-driver", gpu_ids=("0",))
    main, generator = sim.thread(driver), sim.thread(driver)
    with main.span(JOB) as job:
        main.leaf(GENERATION, job, 1)
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                launched = step.start_ns + sim.seconds_ns(STEP, driver, n)
                # idle by then: work queued behind a thread's own is no dependency SPEC records within one process
                assert generator.now <= launched
                batch = generator.leaf(GENERATION, step, n + 1, after=launched)  # fire-and-forget: for step n + 1
                main.leaf(TRAINING, step, n)
                main.wait(REFIT_BUBBLE, step, n, batch)


ISSUE = Schedule(
    "issue-thread-generation",
    thread_generation_beside_refit,
    {
        JOB.name: 0.002,
        STEP.name: 0.045,  # until the generating thread picks up the step's weights
        GENERATION.name: 0.40,
        TRAINING.name: 0.30,
        REFIT_BUBBLE.name: 0.005,
    },
)


def async_one_step_ahead(sim: Sim, steps: int = 4, marked_wait: bool = True, validate_every: int = 0) -> None:
    """Async GRPO one step ahead: a generation worker makes batch n + 1 while step n trains on batch n. Step n sends
    the call for batch n + 1 as it starts (its parent step n, its iteration n + 1; the worker queues it behind batch
    n), then waits for batch n if it is not there yet, then computes logprobs and trains on the driver. Batch 1 is
    sent before the first step.

    `marked_wait`: the wait is a buffer-starvation span, woken by the batch's end. Without it the driver blocks on
    the batch in no span of its own and goes on BARE_POLL_NS after the batch ended: the step's children start after
    the batch made for them in the step before, the one record of that wait (the step's own time, on the path as
    waiting). Batch 1, made under the job and not in a step, is then ready before the first step: the driver loads
    its model first (`rl.setup.policy`, longer than a generation).

    `validate_every` k: every k-th step ends with a validation generation on the same worker (under the
    `rl.grpo.evaluate` umbrella, the same span name, overhead), queued behind the next step's batch when that one
    is still being made: the worker was busy."""
    driver = sim.process("driver", "grpo-driver")
    rollout = sim.process("rollout-0", "grpo-rollout", host="node-1", gpu_ids=("0", "1"))
    main, worker = sim.thread(driver), sim.thread(rollout)
    with main.span(JOB) as job:
        main.own(job)
        batch = worker.call(GENERATION, job, 1, main.now)
        if not marked_wait:
            with main.span(SETUP, job) as setup:
                main.own(setup)
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                main.own(step)
                next_batch = worker.call(GENERATION, step, n + 1, main.now)
                if marked_wait:
                    main.wait(BUFFER_STARVATION, step, n, batch)
                elif batch.end_ns > main.now:
                    main.now = batch.end_ns + BARE_POLL_NS
                main.leaf(LOGPROB, step, n)
                main.leaf(TRAINING, step, n)
                if validate_every and n % validate_every == 0:
                    with main.span(EVALUATE, step, n) as evaluate:
                        main.own(evaluate)
                        main.join([worker.call(VALIDATION_GENERATION, evaluate, n, main.now)])
            batch = next_batch


BARE_POLL_NS = 3_000_000  # the step's own time between the batch's end and the driver seeing it
ASYNC_DURATIONS = {
    JOB.name: 0.002,
    STEP.name: 0.001,
    EVALUATE.name: 0.001,
    SETUP.name: 0.60,
    BUFFER_STARVATION.name: 0.003,
    LOGPROB.name: 0.05,
    TRAINING.name: 0.25,
}
ASYNC_FAST_GENERATION = Schedule(
    "async-generation-faster", async_one_step_ahead, {**ASYNC_DURATIONS, GENERATION.name: 0.20}
)
ASYNC_SLOW_GENERATION = Schedule(
    "async-generation-slower", async_one_step_ahead, {**ASYNC_DURATIONS, GENERATION.name: 0.50}
)
# A step waits when a generation outlasts the driver's 0.306 s between the starts of two waits (0.001 s to send,
# 0.05 + 0.25 s of logprob and training, 0.002 s between steps, 0.003 s to see the batch): 0.33 s does by 24 ms,
# 10% less (0.297 s) no longer does, and training is then what the steps wait on.
ASYNC_BALANCED = Schedule("async-generation-balanced", async_one_step_ahead, {**ASYNC_DURATIONS, GENERATION.name: 0.33})
ASYNC_BARE_WAIT = Schedule(
    "async-generation-slower-bare-wait",
    partial(async_one_step_ahead, marked_wait=False),
    {**ASYNC_DURATIONS, GENERATION.name: 0.50},
)
ASYNC_QUEUED_VALIDATION = Schedule(
    "async-validation-queued-behind-generation",
    partial(async_one_step_ahead, steps=5, validate_every=2),
    {
        **ASYNC_DURATIONS,
        GENERATION.name: {"rollout-0": [0.50, 0.45, 0.48, 0.52, 0.47, 0.50]},
        f"{GENERATION.name} (overhead)": 0.12,
    },
)


def rollout_with_a_straggler(sim: Sim, steps: int = 4) -> None:
    """Sync GRPO with a generation fan-out over four rollout workers, one of them (rollout-3) slow but for one step,
    then training on the driver, and on even steps a validation fan-out over two validation workers (the same
    span name, `rl.grpo.generation`, overhead, under the `rl.grpo.evaluate` umbrella) in a fleet of their own."""
    driver = sim.process("driver", "grpo-driver")
    rollouts = [sim.thread(sim.process(f"rollout-{i}", "grpo-rollout", gpu_ids=(str(i),))) for i in range(4)]
    validators = [
        sim.thread(sim.process(f"validation-{i}", "grpo-validation", host="node-1", gpus=2)) for i in range(2)
    ]
    main = sim.thread(driver)
    with main.span(JOB) as job:
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                with main.span(ROLLOUT, step, n) as rollout:
                    main.own(rollout)
                    main.join(main.fan_out(rollouts, GENERATION, rollout))
                main.leaf(TRAINING, step, n)
                if n % 2 == 0:
                    with main.span(EVALUATE, step, n) as evaluate:
                        main.own(evaluate)
                        main.join(main.fan_out(validators, VALIDATION_GENERATION, evaluate))


STRAGGLER = Schedule(
    "straggler-and-validation",
    rollout_with_a_straggler,
    {
        JOB.name: 0.002,
        ROLLOUT.name: 0.001,
        EVALUATE.name: 0.001,
        GENERATION.name: {
            "rollout-0": [0.30, 0.29, 0.31, 0.30],
            "rollout-1": [0.32, 0.31, 0.36, 0.31],
            "rollout-2": [0.28, 0.30, 0.30, 0.29],
            "rollout-3": [0.45, 0.42, 0.33, 0.47],  # slow, but at step 3 rollout-1 ends last
            "validation-0": 0.10,
            "validation-1": [0.14, 0.15, 0.16, 0.17],  # validation runs at steps 2 and 4
        },
        TRAINING.name: 0.25,
    },
)


def colocated_turns(sim: Sim, steps: int = 4) -> None:
    """NeMo-RL's colocated mode: generation worker i and training worker i hold the same GPU (same host, same id)
    and take turns, the driver running generation, then training (inside its own `rl.grpo.policy_training`, whose
    children are the workers' shards), then the refit (an idle wait whose children are the generation workers'
    weight updates), one after another."""
    driver = sim.process("driver", "grpo-driver")
    generators = [sim.thread(sim.process(f"generation-{i}", "grpo-generation", gpu_ids=(str(i),))) for i in range(2)]
    trainers = [sim.thread(sim.process(f"training-{i}", "grpo-training", gpu_ids=(str(i),))) for i in range(2)]
    main = sim.thread(driver)
    with main.span(JOB) as job:
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                with main.span(ROLLOUT, step, n) as rollout:
                    main.own(rollout)
                    main.join(main.fan_out(generators, GENERATION, rollout))
                with main.span(TRAINING, step, n) as training:
                    main.own(training)
                    main.join(main.fan_out(trainers, WORKER_TRAINING, training))
                with main.span(REFIT_BUBBLE, step, n) as refit:
                    main.own(refit)
                    main.join(main.fan_out(generators, UPDATE_WEIGHTS, refit))


COLOCATED = Schedule(
    "colocated-pools",
    colocated_turns,
    {
        JOB.name: 0.002,
        ROLLOUT.name: 0.001,
        GENERATION.name: {"generation-0": [0.30, 0.34], "generation-1": [0.36, 0.31]},
        TRAINING.name: 0.002,  # the driver's own time in it: dispatching the shards
        WORKER_TRAINING.name: {"training-0": 0.44, "training-1": 0.40},
        REFIT_BUBBLE.name: 0.001,
        UPDATE_WEIGHTS.name: {"generation-0": 0.06, "generation-1": 0.05},
    },
)


def sync_grpo(sim: Sim, steps: int = 6) -> None:
    """A plain sync GRPO step, the fleets on GPUs of their own: generation fanned out over two rollout workers
    under the rollout umbrella; reward on the driver; logprobs fanned out over two training workers inside the
    driver's `rl.grpo.logprob`; the advantage on the driver; training fanned out inside `rl.grpo.policy_training`;
    the refit inside the driver's idle wait, its children the rollout workers' weight updates. Every third step
    then validates: the driver sends validation generations to the rollout workers straight under the step (the
    call sent after the refit ended: the caller's previous span) and waits for them in an `rl.idle.validation`
    span, which the last of them wakes."""
    driver = sim.process("driver", "grpo-driver")
    generators = [sim.thread(sim.process(f"rollout-{i}", "grpo-rollout", gpu_ids=(str(i),))) for i in range(2)]
    trainers = [
        sim.thread(sim.process(f"policy-{i}", "grpo-policy", host="node-1", gpu_ids=(str(2 * i), str(2 * i + 1))))
        for i in range(2)
    ]
    main = sim.thread(driver)
    with main.span(JOB) as job:
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                with main.span(ROLLOUT, step, n) as rollout:
                    main.own(rollout)
                    main.join(main.fan_out(generators, GENERATION, rollout))
                main.leaf(REWARD, step, n)
                with main.span(LOGPROB, step, n) as logprob:
                    main.own(logprob)
                    main.join(main.fan_out(trainers, WORKER_LOGPROB, logprob))
                main.leaf(ADVANTAGE, step, n)
                with main.span(TRAINING, step, n) as training:
                    main.own(training)
                    main.join(main.fan_out(trainers, WORKER_TRAINING, training))
                with main.span(REFIT_BUBBLE, step, n) as refit:
                    main.own(refit)
                    main.join(main.fan_out(generators, UPDATE_WEIGHTS, refit))
                if n % 3 == 0:
                    calls = main.fan_out(generators, VALIDATION_GENERATION, step)
                    main.wait(VALIDATION_WAIT, step, n, max(calls, key=lambda call: call.end_ns))


SYNC_GRPO = Schedule(
    "sync-grpo",
    sync_grpo,
    {
        JOB.name: 0.002,
        ROLLOUT.name: 0.001,
        GENERATION.name: {"rollout-0": [0.40, 0.42, 0.38], "rollout-1": [0.44, 0.37, 0.45, 0.43]},
        REWARD.name: 0.03,
        LOGPROB.name: 0.002,
        WORKER_LOGPROB.name: {"policy-0": 0.08, "policy-1": [0.09, 0.07]},
        ADVANTAGE.name: 0.01,
        TRAINING.name: 0.002,
        WORKER_TRAINING.name: {"policy-0": [0.35, 0.30], "policy-1": 0.33},
        REFIT_BUBBLE.name: 0.001,
        UPDATE_WEIGHTS.name: {"rollout-0": 0.05, "rollout-1": 0.04},
        f"{GENERATION.name} (overhead)": {"rollout-0": [0.15, 0.11], "rollout-1": 0.13},  # at steps 3 and 6
        VALIDATION_WAIT.name: 0.002,
    },
)


def unrecorded_logprob_wait(sim: Sim, steps: int = 4) -> None:
    """The counter-example: the driver sends the logprob shards straight under the step (as tests' toy job does)
    and waits for them in no span of its own, then computes the advantage. The advantage started because the
    shards ended, but nothing in the trace says so: its recorded cause is the rollout umbrella's end (its sequence
    anchor), the gap between them the step's own time. A faster logprob makes the real step shorter; no prediction
    from these spans can see it."""
    driver = sim.process("driver", "grpo-driver")
    generators = [sim.thread(sim.process(f"rollout-{i}", "grpo-rollout", gpu_ids=(str(i),))) for i in range(2)]
    trainers = [sim.thread(sim.process(f"policy-{i}", "grpo-policy", gpu_ids=(str(2 + i),))) for i in range(2)]
    main = sim.thread(driver)
    with main.span(JOB) as job:
        for n in range(1, steps + 1):
            main.own(job)
            with main.step(n, job) as step:
                with main.span(ROLLOUT, step, n) as rollout:
                    main.own(rollout)
                    main.join(main.fan_out(generators, GENERATION, rollout))
                main.join(main.fan_out(trainers, WORKER_LOGPROB, step))  # waited for inside no span of its own
                main.leaf(ADVANTAGE, step, n)
                main.leaf(TRAINING, step, n)


UNRECORDED = Schedule(
    "unrecorded-wait",
    unrecorded_logprob_wait,
    {
        JOB.name: 0.002,
        ROLLOUT.name: 0.001,
        GENERATION.name: {"rollout-0": 0.30, "rollout-1": 0.32},
        WORKER_LOGPROB.name: {"policy-0": 0.10, "policy-1": 0.12},
        ADVANTAGE.name: 0.01,
        TRAINING.name: 0.20,
    },
    unrecorded_names=(WORKER_LOGPROB.name,),
)

SCHEDULES = [
    ISSUE,
    ASYNC_FAST_GENERATION,
    ASYNC_SLOW_GENERATION,
    ASYNC_BALANCED,
    ASYNC_BARE_WAIT,
    ASYNC_QUEUED_VALIDATION,
    STRAGGLER,
    COLOCATED,
    SYNC_GRPO,
    UNRECORDED,
]
