"""The package logger and its warn-once helper.

Telemetry problems are reported through `logging`, never raised and never `warnings.warn`: a training job run with
`-W error` must not die because a span could not be parented.
"""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("instrument")

_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, *args: object, stack_info: bool = False) -> bool:
    """Log `message` at WARNING the first time `key` is seen in this process; True when it was logged."""
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    # stacklevel=3 points the record at the caller of the helper that called us, the user's call site.
    logger.warning(message, *args, stack_info=stack_info, stacklevel=3)
    return True
