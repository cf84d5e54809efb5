"""`goodput critical` as text (SPEC section 14): what to speed up first, in a line, then the phases and processes.

The table leads with the phase whose 10% speed-up saves the most a step, a `--speedup`'s prediction, and per fleet
the worker its fan-outs waited on most; the phases (their time on the path and their saving) and the processes
follow, and with `--iteration N` that step's path. JSON is
SPEC's object; CSV and Markdown give every row in one table, `kind` saying which (a phase, a process, a segment of a
path: every iteration's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .formats import OutputFormat, json_chunks, render_rows
from .narrow import Fit, fold
from .tables import table_text

if TYPE_CHECKING:
    from rollup.critical import CriticalPaths, PathShare, WindowPath

# The phases and processes the table lists; JSON, CSV and Markdown list them all.
TABLE_ROWS = 12


def _percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.1f}%"


def headline(found: CriticalPaths) -> list[str]:
    """The table's opening lines: what was explained, the phase whose 10% speed-up saves the most (SPEC section
    14's lead), a `--speedup`'s prediction, and per fleet the worker its fan-outs waited on most."""
    steps = len(found.iterations)
    wall, waiting = found.wall_ns / 1e9, found.waiting_ns / 1e9
    waited = f"{waiting:.3f} s waiting ({_percent(waiting / wall if wall else None) or '0.0%'})"
    lines = [f"critical path of {steps} iteration{'s' if steps != 1 else ''}: {wall:.3f} s of steps, {waited}"]
    if not steps:
        return lines
    first = found.first()
    speed_up = f"{100 * found.SPEED_UP:.0f}%"
    if first is None:
        lines.append(f"speed up first: no phase's {speed_up} speed-up shortens a step")
    else:
        lines.append(
            f"speed up first: {first.key} ({first.bucket}): {speed_up} off it saves {first.saves_s:.3f} s a step "
            f"(median); {first.per_step_s:.3f} s a step on the path, {_percent(first.share)}"
        )
    if found.speedup is not None:
        asked = ", ".join(f"{name} {float(pct):g}%" for name, pct in found.speedup.names.items())
        lines.append(f"with {asked} faster: {found.speedup.median_saving_ns / 1e9:.3f} s a step saved (median)")
    for straggler in found.waited_on_most():
        lines.append(
            f"waited on most in {straggler.fleet}: {straggler.process} ended {straggler.slowest} of "
            f"{straggler.fan_outs} {straggler.name} fan-outs last, alone {straggler.alone_ns / 1e9:.3f} s; its peers' "
            f"GPUs waited {float(straggler.waited_gpu_ns) / 1e9:.3f} GPU-s"
        )
    return lines


def _share_rows(shares: list[PathShare], named: bool) -> list[list[str]]:
    return [
        [share.key or "", *([share.bucket or ""] if named else []), f"{share.critical_s:.3f}",
         f"{share.per_step_s:.3f}", _percent(share.share), *([f"{share.saves_s:.3f}"] if named else [])]
        for share in shares[:TABLE_ROWS]
    ]  # fmt: skip


def _path_rows(path: WindowPath) -> list[list[str]]:
    return [
        [f"{(s.start_ns - path.start_ns) / 1e9:.3f}", f"{s.duration_ns / 1e9:.3f}", s.name, s.process or "", s.bucket]
        for s in path.path
    ]


def critical_table(found: CriticalPaths, *, width: int, path_of: int | None = None) -> str:
    """The headline, the phases' and the processes' shares, and iteration `path_of`'s path when asked for."""
    out = ["".join(f"{part}\n" for line in headline(found) for part in fold(line, width))]
    if not found.iterations:
        return out[0]
    figures = [Fit("figure"), Fit("figure"), Fit("figure")]
    more = len(found.names) - TABLE_ROWS
    title = "phases by what 10% off them saves a step" + (f" ({more} more in JSON)" if more > 0 else "")
    out += ["\n", table_text(["name", "bucket", "critical s", "per step s", "share", "saves s"],
                             _share_rows(found.names, True), title=title, title_justify="left",
                             right=[False, False, True, True, True, True], width=width,
                             fits=[Fit("elide"), Fit("text", drop=1), *figures, Fit("figure")])]  # fmt: skip
    more = len(found.processes) - TABLE_ROWS
    title = "processes on the path, most first" + (f" ({more} more in JSON)" if more > 0 else "")
    out += ["\n", table_text(["process", "critical s", "per step s", "share"], _share_rows(found.processes, False),
                             title=title, title_justify="left", right=[False, True, True, True], width=width,
                             fits=[Fit("elide"), *figures])]  # fmt: skip
    paths = found.iterations  # a window's path is made when read: only the one asked for is
    for at in [i for i, iteration in enumerate(found.windows.iterations) if iteration == path_of]:
        path = paths[at]
        waiting = path.waiting_ns / 1e9
        title = f"iteration {path.iteration}: {path.wall_ns / 1e9:.3f} s, {waiting:.3f} s waiting; its path"
        out += ["\n", table_text(["offset s", "duration s", "name", "process", "bucket"], _path_rows(path),
                                 title=title, title_justify="left", right=[True, True, False, False, False],
                                 width=width,
                                 fits=[*figures[:2], Fit("elide"), Fit("elide"), Fit("text", drop=1)])]  # fmt: skip
    return "".join(out)


def critical_rows(found: CriticalPaths) -> tuple[list[str], list[list[Any]]]:
    """CSV / Markdown: `kind` (name, process or path), then what each kind has; a path's rows are every iteration's
    segments, their start offset from the iteration's window."""
    head = ["kind", "iteration", "name", "process", "bucket", "start_offset_s", "duration_s", "critical_s", "share",
            "saves_s"]  # fmt: skip
    rows: list[list[Any]] = [["name", None, n.key, None, n.bucket, None, None, n.critical_s, n.share, n.saves_s]
                             for n in found.names]  # fmt: skip
    rows += [["process", None, None, p.key, None, None, None, p.critical_s, p.share, None] for p in found.processes]
    for path in found.iterations:
        rows += [["path", path.iteration, s.name, s.process, s.bucket, (s.start_ns - path.start_ns) / 1e9,
                  s.duration_ns / 1e9, None, None, None] for s in path.path]  # fmt: skip
    return head, rows


def critical_text(
    found: CriticalPaths, fmt: OutputFormat, *, width: int, path_of: int | None = None
) -> str | Iterable[str]:
    """The answer in `fmt`; the JSON in pieces, a window's path at a time (a long run's is 100 MB and more)."""
    if fmt is OutputFormat.json:
        return json_chunks(found.json())
    if fmt is OutputFormat.table:
        return critical_table(found, width=width, path_of=path_of)
    return render_rows(*critical_rows(found), fmt, width=width)
