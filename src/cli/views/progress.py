"""The load's progress bar: on the user's terminal only, and only once loading has taken over a second."""

from __future__ import annotations

import sys
import time
from typing import Any

from rich.console import Console


class LoadProgress:
    """A rich progress bar on `console` (stderr), fed `(done_bytes, total_bytes)` by the store as files load."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._started = time.monotonic()
        self._progress: Any = None
        self._task: Any = None

    def __call__(self, done_bytes: int, total_bytes: int) -> None:
        if self._progress is None:
            if not sys.stderr.isatty() or time.monotonic() - self._started < 1.0:
                return
            from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

            self._progress = Progress(
                "reading traces",
                BarColumn(),
                DownloadColumn(),
                TimeRemainingColumn(),
                console=self._console,
                transient=True,
            )
            self._task = self._progress.add_task("load", total=total_bytes)
            self._progress.start()
        self._progress.update(self._task, completed=done_bytes, total=total_bytes)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
