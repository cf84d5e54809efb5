"""What `goodput check` reports: the rules of SPEC section 5 with their severities, and a finding of one.

Kept apart from the rules' queries (`checks`, `window_rules`) so both can build findings without importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ERROR = "error"
WARNING = "warning"

# Every rule and its severity, in SPEC section 5's order: findings are listed errors first, then in this order.
RULES: dict[str, str] = {
    "nested-bucket": ERROR,
    "self-overlap": ERROR,
    "bucketed-umbrella": ERROR,
    "unknown-bucket": ERROR,
    "overlapping-steps": WARNING,
    "orphan-span": WARNING,
    "iteration-mismatch": WARNING,
    "inverted-span": WARNING,
    "lost-step": WARNING,
    "duplicate-step": WARNING,
    "no-spans": WARNING,
    "overlapping-attempts": WARNING,
    "no-iterations": WARNING,
    "mostly-unaccounted": WARNING,
    "missing-group": WARNING,
}


@dataclass(frozen=True)
class Finding:
    """One accounting bug: the rule it breaks, the span that shows it and, where there is one, the span involved.

    A finding about no span (`no-iterations`, a window without a step span) has empty ids and name. `topic` is
    what else tells findings of one rule and name apart (`missing-group`'s group), so the `check` table does not
    merge them; it is not part of the JSON, whose keys SPEC section 6 fixes.
    """

    rule: str
    severity: str
    trace_id: str
    span_id: str
    name: str
    iteration: int | None
    related_span_id: str | None
    message: str
    overlap_s: float | None = None  # nested-bucket and self-overlap: the seconds counted twice
    topic: str = ""

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["topic"]
        return out
