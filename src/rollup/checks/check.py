"""`goodput check`: every rule of SPEC sections 5, 7 and 10 run over a store's spans, as one orchestration.

The span rules (`span_rules`) and the window rules' measurements (each window's charge, the groups active in it) are
computed in one part in this process, or in parts by a runner (`runners.on_ray.RayRunner`: Ray tasks by ranges of
windows); the rules about the whole run (`overlapping-attempts`, `no-iterations`) and the window rules' verdicts
(`window_rules`) are worked out here from what the parts found. So a check gives the same findings in the same order
wherever it ran."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollup.accounting.windows import iteration_windows, missing_in
from rollup.base.errors import GoodputError, OptionError

from .findings import ERROR, RULES, WARNING, Finding
from .parts import CheckPart, CheckRunner, check_frames
from .run_rules import (
    duplicate_step_findings,
    lost_step_findings,
    no_iterations_findings,
    no_spans_findings,
    orphan_span_findings,
    overlapping_attempts_findings,
)
from .window_rules import parse_groups, window_findings_from, window_step_spans

if TYPE_CHECKING:
    from rollup.accounting.attribution import Charge
    from rollup.store.spanset import SpanSet, SpanSource


@dataclass(frozen=True)
class CheckOptions:
    """What a check is asked for, checked when it is made (an OptionError naming the option otherwise).

    `attempt` (a run id or `latest`) checks that attempt alone. `expect`: span group names (any case; each item
    `GROUP` or `GROUP,GROUP,...`) that every window should have a span of (`missing-group`). `iterations`: only the
    findings of iterations in that inclusive range are kept; `exact`: it is one iteration asked for by number, an
    error when the traces lack it."""

    attempt: str | None = None
    expect: Sequence[str] = ()
    iterations: tuple[int, int] | None = None
    exact: bool = False

    def __post_init__(self) -> None:
        if self.expect:
            try:
                object.__setattr__(self, "expect", tuple(parse_groups(self.expect)))
            except ValueError as error:
                raise OptionError("--expect", str(error)) from None


@dataclass(frozen=True)
class Check:
    """What a check found: its findings (errors first, then in SPEC section 5's order of rules, then by iteration,
    those of no iteration last, then by the span's start) and `missing`, why the iterations asked for hold none of the
    traces' (None when they hold some, or none was asked for)."""

    findings: list[Finding]
    missing: str | None = None
    summary: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "summary", check_summary(self.findings))

    @property
    def failed(self) -> bool:
        """Whether an error-severity finding was found (`goodput check` then exits 1)."""
        return bool(self.summary["errors"])


def check_findings(store: SpanSource, options: CheckOptions | None = None, runner: CheckRunner | None = None) -> Check:
    """Every finding of every rule over the store's spans, as `options` ask (`CheckOptions`), the span rules and
    the windows' measurements computed by `runner` (default: one part, in this process)."""
    options = options or CheckOptions()
    spans = store.spans(options.attempt)
    windows = iteration_windows(spans)
    missing = missing_in(windows.iterations, options.iterations)
    if missing is not None and options.exact:
        raise GoodputError(missing)
    parts = (
        [check_frames(spans, windows, options.expect)]
        if runner is None
        else runner.check_parts(spans, windows, options.expect)
    )
    rule_order = list(RULES)
    found = [finding for part in parts for finding in part.findings]
    findings = sorted(found, key=lambda f: (rule_order.index(f.rule), f.trace_id, f.span_id))
    findings += orphan_span_findings(spans)
    findings += lost_step_findings(spans) + duplicate_step_findings(spans) + no_spans_findings(spans)
    findings += sorted(overlapping_attempts_findings(spans), key=lambda f: (f.trace_id, f.span_id))
    findings += no_iterations_findings(spans)
    charges, present = _by_position(parts)
    findings += window_findings_from(
        windows, lambda keys: window_step_spans(spans, keys), charges, present, options.expect
    )
    starts = _starts(spans, findings)
    findings.sort(
        key=lambda f: (
            f.severity != ERROR, rule_order.index(f.rule), f.iteration is None, f.iteration or 0,
            starts.get((f.trace_id, f.span_id), 0),
        )
    )  # fmt: skip  # stable: findings of one rule, iteration and span keep their rule's order
    return Check(_in_iterations(findings, options.iterations), missing)


def _starts(spans: SpanSet, findings: Sequence[Finding]) -> dict[tuple[str, str], int]:
    """Each finding's span start (the findings are listed by rule, then iteration, then start)."""
    import pyarrow as pa

    ids = sorted({(f.trace_id, f.span_id) for f in findings if f.span_id})
    if not ids:
        return {}
    table = pa.table({"trace_id": [t for t, _ in ids], "span_id": [s for _, s in ids]})
    with spans.registered("finding_spans", table) as wanted:
        rows = spans.rows(
            f"SELECT trace_id, span_id, min(start_ns) FROM {spans.own} SEMI JOIN {wanted} USING (trace_id, span_id) "
            "GROUP BY ALL"
        )
    return {(t, s): int(start) for t, s, start in rows}


def _by_position(parts: Sequence[CheckPart]) -> tuple[Sequence[Charge] | Mapping[int, Charge], dict[int, set[str]]]:
    """The parts' window charges and groups present, by window position. One part holds every window, in order:
    its charges are used as they are, columns of integers rather than an object a window."""
    present = {position: groups for part in parts for position, groups in part.present.items()}
    if len(parts) == 1:
        return parts[0].charges, present
    return {p: charge for part in parts for p, charge in zip(part.positions, part.charges, strict=True)}, present


def _in_iterations(findings: list[Finding], iterations: tuple[int, int] | None) -> list[Finding]:
    """The findings of iterations in the inclusive range `iterations` (all when None: a finding of no iteration,
    such as `no-iterations`, is kept only then)."""
    if iterations is None:
        return findings
    low, high = iterations
    return [f for f in findings if f.iteration is not None and low <= f.iteration <= high]


def check_summary(findings: Iterable[Finding]) -> dict[str, int]:
    """`{"errors": n, "warnings": n}`: SPEC section 6's summary of the findings."""
    listed = list(findings)
    return {
        "errors": sum(f.severity == ERROR for f in listed),
        "warnings": sum(f.severity == WARNING for f in listed),
    }
