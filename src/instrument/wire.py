"""The names goodput puts on the wire and reads from the environment, each spelled once.

Attribute keys, span-name templates, baggage keys and environment variables are a contract between a training job
and the `goodput` command that reads its traces, possibly years apart. Both halves import them from here, and this
module imports nothing, so `rollup` can use them without loading the OpenTelemetry SDK.
"""

from __future__ import annotations

import re

# --- span attributes (SPEC section 1) -----------------------------------------------------------------------------

RL_ALGORITHM = "rl.algorithm"
RL_BUCKET_ATTR = "rl.bucket"
RL_EFFICIENCY_CATEGORY_ATTR = "rl.efficiency.category"
RL_ITERATION_ATTR = "rl.iteration"
RL_IDLE_POLLS_ATTR = "rl.idle.polls"
RL_SPAN_GROUP_ATTR = "rl.span_group"
RL_CHECKPOINT_ASYNC_SAVE_ATTR = "rl.checkpoint.async_save"  # on rl.checkpoint.finalize, where the caller knows it
RL_CHECKPOINT_ASYNC_ATTR = RL_CHECKPOINT_ASYNC_SAVE_ATTR  # NeMo-RL's name for it

# --- resource attributes -----------------------------------------------------------------------------------------

RESOURCE_RUN_ID = "goodput.run.id"  # the attempt a process belongs to (SPEC section 7)
NEMO_RUN_ID = "nemo.run.id"  # what NeMo-RL's nemo-lens sets instead
# OpenTelemetry's own (ISO 8601): the process's start, so an attempt's extent reaches back to it (SPEC section 7).
RESOURCE_PROCESS_CREATION_TIME = "process.creation.time"
# What a process holds (SPEC section 12): its GPUs' ids on its host.name, else a count of GPUs of its own; its fleet.
RESOURCE_GPU_IDS = "goodput.gpu.ids"
RESOURCE_GPUS = "goodput.gpus"
RESOURCE_FLEET = "goodput.fleet"

# --- span names: what the helpers build, and what a reader of traces without `rl.span_group` matches --------------

JOB_SPAN_NAME = "rl.{algorithm}.job"
STEP_SPAN_NAME = "rl.{algorithm}.step"
EVALUATE_SPAN_NAME = "rl.{algorithm}.evaluate"
STARTUP_SPAN_NAME = "rl.startup"
SETUP_SPAN_NAME = "rl.setup.{phase}"
CHECKPOINT_FINALIZE_SPAN_NAME = "rl.checkpoint.finalize"
UMBRELLA_SPAN_NAMES = (JOB_SPAN_NAME, STEP_SPAN_NAME, EVALUATE_SPAN_NAME, STARTUP_SPAN_NAME, SETUP_SPAN_NAME)


def efficiency_span_name(category: str) -> str:
    """`idle/refit_bubble` -> `rl.idle.refit_bubble`: an efficiency span is named for its category."""
    return "rl." + category.replace("/", ".")


_PLACEHOLDER_PATTERNS = {"algorithm": "[^.]+", "phase": ".+"}


def span_name_regex(*templates: str) -> str:
    """A regular expression (for a full match) of the names the templates build, whatever fills their fields."""

    def one(template: str) -> str:
        pieces = re.split(r"\{(\w+)\}", template)  # text, field, text, field, ..., text
        return "".join(
            re.escape(piece) if i % 2 == 0 else _PLACEHOLDER_PATTERNS[piece] for i, piece in enumerate(pieces)
        )

    return "|".join(one(template) for template in templates)


# --- W3C baggage that rides along with a trace carrier ------------------------------------------------------------

BAGGAGE_ITERATION = "goodput.iteration"
BAGGAGE_BUCKET_SCOPE = "goodput.bucket_scope"
BAGGAGE_RUN_ID = "goodput.run_id"
# The caller's set-up, so a worker that never called configure() is configured like its caller.
BAGGAGE_SPAN_GROUPS = "goodput.span_groups"
BAGGAGE_EXPORTER = "goodput.exporter"
BAGGAGE_TRACE_PATH = "goodput.trace_path"
BAGGAGE_TRACE_OWNER = "goodput.trace_owner_pid"  # the process that owns a single trace file (ENV_TRACE_OWNER_PID)

# --- environment variables ----------------------------------------------------------------------------------------

ENV_SPAN_GROUPS = "GOODPUT_SPAN_GROUPS"
ENV_EXPORTER = "GOODPUT_EXPORTER"
ENV_TRACE_PATH = "GOODPUT_TRACE_PATH"
ENV_TRACE_OWNER_PID = "GOODPUT_TRACE_OWNER_PID"  # the process that owns a single trace file; others write siblings
ENV_RUN_ID = "GOODPUT_RUN_ID"
ENV_CACHE_DIR = "GOODPUT_CACHE_DIR"
# Read, never written: what one process holds, so a driver's value must not reach the workers it starts.
ENV_GPUS = "GOODPUT_GPUS"
ENV_FLEET = "GOODPUT_FLEET"

OTEL_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"
OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
OTEL_EXPORTER_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_EXPORTER_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTEL_BSP_MAX_QUEUE_SIZE = "OTEL_BSP_MAX_QUEUE_SIZE"
OTEL_BSP_MAX_EXPORT_BATCH_SIZE = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
OTEL_BSP_SCHEDULE_DELAY = "OTEL_BSP_SCHEDULE_DELAY"
OTEL_BSP_EXPORT_TIMEOUT = "OTEL_BSP_EXPORT_TIMEOUT"
