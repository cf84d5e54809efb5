"""The normalized span row every reader produces and every query reads, and the words the accounting uses for it.

Ids are lowercase hex; times are integer nanoseconds since the epoch; attribute values are rendered as text (see
`read.values`) so one map type holds them all. The goodput attributes are promoted to typed columns. Beside the row:
the buckets, and how a row is told to be a job, step or umbrella span, in SQL, since every command asks it of DuckDB.
"""

from __future__ import annotations

import pyarrow as pa

from instrument.groups import BUCKETS, UMBRELLA_GROUPS
from instrument.wire import (
    EVALUATE_SPAN_NAME,
    JOB_SPAN_NAME,
    RL_BUCKET_ATTR,
    RL_EFFICIENCY_CATEGORY_ATTR,
    RL_ITERATION_ATTR,
    RL_SPAN_GROUP_ATTR,
    SETUP_SPAN_NAME,
    STARTUP_SPAN_NAME,
    STEP_SPAN_NAME,
    span_name_regex,
)

SCHEMA_VERSION = 6  # part of the cache key: bump it whenever a reader's output changes

ATTRIBUTE_MAP = pa.map_(pa.string(), pa.string())
# A span's events (`record_exception` writes one named `exception`) and links, attribute values rendered as the
# span's are; a span without any has an empty list.
EVENT = pa.struct([("time_ns", pa.int64()), ("name", pa.string()), ("attributes", ATTRIBUTE_MAP)])
LINK = pa.struct([("trace_id", pa.string()), ("span_id", pa.string()), ("attributes", ATTRIBUTE_MAP)])

SPAN_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),  # null for a root span (also when the file says 0000000000000000)
        ("name", pa.string()),
        ("kind", pa.int8()),  # the OTLP SpanKind number: 0 unspecified, 1 internal, 2 server, 3 client, ...
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("status_code", pa.int8()),  # 0 unset, 1 ok, 2 error
        ("status_message", pa.string()),
        ("attributes", ATTRIBUTE_MAP),
        ("events", pa.list_(EVENT)),
        ("links", pa.list_(LINK)),
        ("resource", ATTRIBUTE_MAP),
        ("scope_name", pa.string()),
        ("scope_version", pa.string()),
        ("service", pa.string()),  # resource service.name
        ("process", pa.string()),  # as SPEC section 1 shows it: service.instance.id, else service.name@host:pid
        ("host_pid", pa.string()),  # host.name:process.pid, telling apart two processes shown alike
        ("run_id", pa.string()),  # the attempt (SPEC section 7): goodput.run.id, else nemo.run.id
        ("holding", pa.string()),  # what the process holds (SPEC section 12): `read.values.holding`, else null
        ("bucket", pa.string()),  # rl.bucket as written, valid or not: `check` flags the invalid ones
        ("iteration", pa.int64()),  # rl.iteration when it is an integer
        ("span_group", pa.string()),
        ("efficiency_category", pa.string()),
        ("fleet", pa.string()),  # the span's own goodput.fleet (SPEC section 12): the fleet it works for
        ("source_file", pa.string()),
    ]
)

# OTLP's invalid span id: a parent id of all zeros means no parent (SPEC section 4). Readers write null for it, so
# the lineage, `check` and every listing see the span as the root it is, whichever reader read the file.
NO_PARENT_ID = "0" * 16

# The attributes promoted to columns of their own, as `instrument` writes them.
RL_BUCKET = RL_BUCKET_ATTR
RL_ITERATION = RL_ITERATION_ATTR
RL_SPAN_GROUP = RL_SPAN_GROUP_ATTR
RL_EFFICIENCY_CATEGORY = RL_EFFICIENCY_CATEGORY_ATTR
GOODPUT_FLEET = "goodput.fleet"  # on a span: the fleet whose GPUs it occupies; on a resource: the process's fleet
PROMOTED_KEYS = frozenset({RL_BUCKET, RL_ITERATION, RL_SPAN_GROUP, RL_EFFICIENCY_CATEGORY, GOODPUT_FLEET})

# What the accounting (lineage, report, check, spans) reads of a span. A load for those commands alone, with no cache
# to fill, converts just these: the attribute maps, the bulk of a span, are never built.
ACCOUNTING_SCHEMA = pa.schema(
    [
        SPAN_SCHEMA.field(name)
        for name in (
            "trace_id", "span_id", "parent_span_id", "name", "start_ns", "end_ns", "process", "host_pid", "run_id",
            "bucket", "iteration", "span_group", "service", "holding", "fleet",
        )
    ]
)  # fmt: skip


def sql_text(value: str) -> str:
    """`value` as a SQL string literal (for the places DuckDB takes no parameter, such as `COPY ... TO`)."""
    return "'" + value.replace("'", "''") + "'"


def accounting_only(schema: pa.Schema) -> bool:
    """Whether `schema` asks for no more than the accounting reads (then readers may skip the rest)."""
    return set(schema.names) <= set(ACCOUNTING_SCHEMA.names)


# --- buckets and span kinds ---------------------------------------------------------------------------------------

BUCKET_LIST_SQL = ", ".join(f"'{b}'" for b in BUCKETS)
UMBRELLA_LIST_SQL = ", ".join(f"'{g}'" for g in sorted(UMBRELLA_GROUPS))

# Traces from emitters that set no `rl.span_group` still name their umbrellas the way `instrument` does.
UMBRELLA_NAME_REGEX = span_name_regex(
    JOB_SPAN_NAME, STEP_SPAN_NAME, EVALUATE_SPAN_NAME, STARTUP_SPAN_NAME, SETUP_SPAN_NAME
)
STEP_NAME_REGEX = span_name_regex(STEP_SPAN_NAME)
JOB_NAME_REGEX = span_name_regex(JOB_SPAN_NAME)


def _group_or_name(group_test: str, name_regex: str) -> str:
    """A CASE rather than an OR, so the regular expression only runs for spans without a group."""
    return f"(CASE WHEN span_group IS NOT NULL THEN {group_test} ELSE regexp_full_match(name, '{name_regex}') END)"


IS_STEP_SQL = _group_or_name("span_group = 'step'", STEP_NAME_REGEX)
IS_JOB_SQL = _group_or_name("span_group = 'job'", JOB_NAME_REGEX)
IS_UMBRELLA_SQL = _group_or_name(f"span_group IN ({UMBRELLA_LIST_SQL})", UMBRELLA_NAME_REGEX)
