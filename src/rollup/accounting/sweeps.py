"""What a report asks of its spans beside its parts, and who answers: every sweep here, over every span
(`LocalSweeps`), or a watcher that keeps each frame's answer and asks only about the frames new spans touched
(`watch.kept.KeptSweeps`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from .attribution import charge_stretches
from .frames import report_frames
from .gpu_charge import charge_gpus
from .windows import window_kinds

if TYPE_CHECKING:
    from array import array

    from rollup.store.spanset import SpanSet

    from .attribution import FrameCharges
    from .frames import ReportFrames
    from .gpu_charge import GpuCharges
    from .gpus import GpuModel


class Sweeps(Protocol):
    """What a report asks of its spans beside its parts: its frames (`frames.report_frames`), the windows' kinds
    (outliers), the GPU charge, and stretches charged whole (`--last`'s `recent`). One stretch's answer depends only
    on the spans active in it, so a watcher (`watch`) keeps each stretch's answer and asks only about the stretches
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
