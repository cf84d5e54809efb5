"""Where a report's and a check's parts are computed: here, one part holding every frame, or elsewhere, in many.

`report.build_report` and `checks.check_findings` are each one function: they find the frames, hand them to a
runner, and merge the parts it gives back, the same way whoever computed them (`ranges`). `LocalRunner` computes
one part in this process, over the store's spans; `on_ray.RayRunner` cuts the frames into ranges of windows and
computes each as a Ray task over its slice of the spans. Both give the same answer, because both run `ranges`' own
functions and the merge is exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .attribution import charge_stretches
from .critical import CriticalPart, critical_part
from .frames import report_frames
from .gpu_charge import charge_gpus
from .ranges import CheckPart, ReportPart, account_frames, check_frames
from .windows import window_kinds

if TYPE_CHECKING:
    from array import array

    from .attribution import FrameCharges
    from .frames import ReportFrames
    from .gpu_charge import GpuCharges
    from .gpus import GpuModel
    from .spanset import SpanSet
    from .windows import Windows


class Runner(Protocol):
    """Computes the parts of a report (`report_parts`) and of a check (`check_parts`) over `spans`."""

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]: ...

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]: ...


class Sweeps(Protocol):
    """What a report asks of its spans beside its parts: its frames (`frames.report_frames`), the windows' kinds
    (outliers), the GPU charge, and stretches charged whole (`--last`'s `recent`). One stretch's answer depends only
    on the spans active in it, so a watcher (`live`) keeps each stretch's answer and asks only about the stretches
    new spans touched; and it keeps the windows until a step span arrives."""

    def frames(self, spans: SpanSet, iterations: tuple[int, int] | None) -> ReportFrames: ...

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array: ...

    def charge_gpus(
        self,
        spans: SpanSet,
        model: GpuModel,
        stretches: Sequence[tuple[int, int]],
        attempts: Sequence[str],
        precedence: Sequence[str],
    ) -> GpuCharges: ...

    def charge_stretches(
        self, spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]
    ) -> FrameCharges: ...


class LocalSweeps:
    """Every sweep asked of every span, in this process."""

    def frames(self, spans: SpanSet, iterations: tuple[int, int] | None) -> ReportFrames:
        return report_frames(spans, iterations)

    def window_kinds(self, spans: SpanSet, starts: Sequence[int], ends: Sequence[int]) -> array:
        return window_kinds(spans, starts, ends)

    def charge_gpus(
        self,
        spans: SpanSet,
        model: GpuModel,
        stretches: Sequence[tuple[int, int]],
        attempts: Sequence[str],
        precedence: Sequence[str],
    ) -> GpuCharges:
        return charge_gpus(spans, model, stretches, attempts, precedence)

    def charge_stretches(
        self, spans: SpanSet, stretches: Sequence[tuple[int, int]], precedence: Sequence[str]
    ) -> FrameCharges:
        return charge_stretches(spans, stretches, precedence)


class LocalRunner:
    """In this process: one part holding every frame, over every span."""

    def report_parts(
        self, spans: SpanSet, frames: ReportFrames, precedence: Sequence[str], by: str | None
    ) -> list[ReportPart]:
        return [account_frames(spans, frames.windows, frames.lost.stretches, frames.outside, precedence, by)]

    def check_parts(self, spans: SpanSet, windows: Windows, expect: Sequence[str]) -> list[CheckPart]:
        return [check_frames(spans, windows, expect)]

    def critical_parts(self, spans: SpanSet, windows: Windows) -> list[CriticalPart]:
        return [critical_part(spans, windows)]

    def __repr__(self) -> str:
        return "LocalRunner()"
