"""The report's figures, declared once: what each is, its unit, where it sits in the JSON, its column in a CSV and a
table, how it gives way on a narrow terminal, and whether `goodput diff` compares it.

Every view of a report reads this list: the rows' JSON (`report.report_json`), the CSV and Markdown rows and the
table (`cli.views.report`), the HTML page, the outliers (`report.mark_outliers`) and the diff's medians
(`diff`). A figure added here appears in each of them; a view that leaves one out fails a test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from instrument.groups import BUCKETS
from rollup.accounting.rows import seconds

if TYPE_CHECKING:
    from rollup.accounting.rows import Figures

Unit = Literal["s", "share", "ratio"]

# Short bucket names for table headers.
BUCKET_SHORT = {"productive": "prod", "overhead": "ovhd", "idle": "idle", "wasted": "waste"}


@dataclass(frozen=True)
class Figure:
    """One figure of a report row (or of the total, or a whole-run row).

    `key`: its name in a CSV header and among the diff's medians. `header`: its column in the table (None: not a
    column of the table). `unit`: seconds, a share of the wall clock (shown as a percentage), or a ratio (`1.31x`).
    `value`: the figure of a row's `Figures`; `nanos`, for a seconds figure the integer nanoseconds it is made of
    (what sums and medians take, exactly). `json`: where it sits in a row's JSON object (a key, or a key in a
    nested object; empty: not in the JSON). `spans`: a span-seconds figure, which only rows counting span-seconds
    have (not outside, rework or downtime). `drop`: at a narrow terminal it is left out, lowest number first (0:
    kept). `short`: the header when the full one does not fit its column even on two lines. `whole_run`: shown on
    the table's whole-run rows (outside, rework), where a share of start-up or of lost work compares with nothing.
    `in_diff`: `goodput diff` compares its median over the rows. `outlier`: a row standing out in it is marked
    (SPEC section 10). `stacked`: one of the parts the wall clock is charged to (they add up to `wall_s`)."""

    key: str
    header: str | None
    unit: Unit
    value: Callable[[Figures], float | None]
    json: tuple[str, ...] = ()
    nanos: Callable[[Figures], int] | None = None
    csv: bool = True
    spans: bool = False
    drop: int = 0
    short: str | None = None
    whole_run: bool = True
    in_diff: bool = False
    outlier: bool = False
    stacked: bool = False

    @property
    def ns(self) -> str | None:
        """The `IterationRows` column of a seconds figure held as nanoseconds (`wall_ns`, `idle_ns`), else None."""
        if self.unit != "s" or self.spans:
            return None
        return f"{self.key.removesuffix('_s')}_ns"


def _bucket(bucket: str) -> Callable[[Figures], float]:
    return lambda figures: seconds(figures.bucket_ns[bucket])


def _bucket_ns(bucket: str) -> Callable[[Figures], int]:
    return lambda figures: figures.bucket_ns[bucket]


def _span_bucket(bucket: str) -> Callable[[Figures], float]:
    return lambda figures: seconds(figures.span_ns[bucket])


def _span_total(figures: Figures) -> float:
    """The span-seconds of every bucket, summed as the seconds each is shown in."""
    return sum(figures.span_seconds.values())


def _span_ratio(figures: Figures) -> float | None:
    """Span-seconds over wall seconds: how far the naive sum overcounts the wall clock."""
    return _span_total(figures) / figures.wall_s if figures.wall_ns > 0 else None


FIGURES: tuple[Figure, ...] = (
    Figure("wall_s", "wall s", "s", lambda f: f.wall_s, ("wall_s",), lambda f: f.wall_ns, in_diff=True, outlier=True),
    *(
        Figure(f"{b}_s", f"{BUCKET_SHORT[b]} s", "s", _bucket(b), (f"{b}_s",), _bucket_ns(b), in_diff=True,
               outlier=True, stacked=True)
        for b in BUCKETS
    ),
    Figure("unaccounted_s", "unacct s", "s", lambda f: f.unaccounted_s, ("unaccounted_s",),
           lambda f: f.unaccounted_ns, drop=2, in_diff=True, outlier=True, stacked=True),
    Figure("goodput", "goodput", "share", lambda f: f.goodput, ("goodput",), short="good-put", whole_run=False,
           in_diff=True),
    *(Figure(f"span_{b}_s", None, "s", _span_bucket(b), ("span_seconds", b), spans=True) for b in BUCKETS),
    Figure("span_s", "span s", "s", _span_total, csv=False, spans=True, drop=1),
    Figure("span_wall", "span/wall", "ratio", _span_ratio, csv=False, spans=True, drop=1),
)  # fmt: skip
