"""A range of windows checked on its own: `check`'s part, as `accounting.parts` is the report's.

A part holds the span rules' findings of the spans it answers for, and per window its charge and the `--expect`
groups active in it; the parts of one check, however it was cut, merge to the answer of one part holding every
window (`check.check_findings`; `on_ray.RayRunner` computes one per range of windows as a Ray task).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rollup.accounting.attribution import FrameCharges, charge_stretches
from rollup.accounting.windows import stretches_of
from rollup.base.schema import BUCKETS

from .span_rules import SPAN_RULES
from .window_rules import groups_present

if TYPE_CHECKING:
    from rollup.accounting.windows import Windows
    from rollup.store.spanset import SpanSet

    from .findings import Finding


@dataclass
class CheckPart:
    """A part of `check`: the span rules' findings of the spans it answers for, and per window of its own (by
    position among the report's windows) the charge in the declared precedence and the `--expect` groups active."""

    findings: list[Finding]
    positions: array
    charges: FrameCharges
    present: dict[int, set[str]] = field(default_factory=dict)


class CheckRunner(Protocol):
    """Computes `check`'s parts over `spans` elsewhere (`on_ray.RayRunner`: a Ray task per range of
    windows); without one, `check_findings` computes one part here (`check_frames`)."""

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]: ...


def check_frames(spans: SpanSet, windows: Windows, expect: Sequence[str], positions: array | None = None) -> CheckPart:
    """The part of `check` over `spans`: every span rule's findings (of every span `spans` holds: a Ray task keeps
    those it answers for), and the charge and groups present of each of `windows` (at `positions` among the
    report's windows; default 0, 1, ...)."""
    if positions is None:
        positions = array("q", range(len(windows)))
    findings = [finding for rule in SPAN_RULES for finding in rule(spans)]
    charges = charge_stretches(spans, stretches_of(windows), list(BUCKETS))
    present: dict[int, set[str]] = {}
    if expect and windows:
        present = {positions[i]: groups for i, groups in groups_present(spans, windows, expect).items()}
    return CheckPart(findings, positions, charges, present)
